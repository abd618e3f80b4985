//! `sigcast-gateway`: runs the public gRPC API.

use anyhow::Context;
use clap::Parser;
use sigcast_gateway::Config;
use sigcast_runtime::ServiceConfig;
use std::net::SocketAddr;
use std::path::PathBuf;

/// sigcast gateway: the public gRPC API (submit, get, watch, list, cancel operations).
///
/// Configuration comes from defaults, then the --config file (TOML), then environment
/// variables prefixed SIGCAST_GATEWAY__ with `__` between levels, e.g.
/// SIGCAST_GATEWAY__STORE__PATH=/data/sigcast.db. Command-line flags win over all of them.
#[derive(Debug, Parser)]
#[command(name = "sigcast-gateway", version)]
struct Args {
    /// TOML configuration file.
    #[arg(long, short, env = "SIGCAST_GATEWAY_CONFIG")]
    config: Option<PathBuf>,
    /// Address to listen on (overrides `listen`).
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// SQLite store file (overrides `store.path`).
    #[arg(long)]
    store_path: Option<PathBuf>,
    /// Print the effective configuration and exit.
    #[arg(long)]
    print_config: bool,
}

fn main() -> std::process::ExitCode {
    sigcast_runtime::main(serve())
}

async fn serve() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut config = Config::load(args.config.as_deref())?;
    if let Some(listen) = args.listen {
        config.listen = listen;
    }
    if let Some(path) = args.store_path {
        config.store.path = path;
    }
    if args.print_config {
        println!("{config:#?}");
        return Ok(());
    }
    let telemetry = sigcast_telemetry::init("sigcast-gateway", &config.log, &config.tracing)?;
    sigcast_telemetry::metrics::spawn(config.metrics_listen).await?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    let result = sigcast_gateway::run(config, listener, sigcast_runtime::shutdown_signal()).await;
    telemetry.shutdown().await;
    result
}
