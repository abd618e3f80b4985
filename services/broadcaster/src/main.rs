//! `sigcast-broadcaster`: sends, confirms and resolves operations.

use anyhow::Context;
use clap::Parser;
use sigcast_broadcaster::Config;
use sigcast_runtime::ServiceConfig;
use std::path::PathBuf;

/// sigcast broadcaster: sends signed operations and settles them from chain state.
///
/// Configuration: defaults, then --config (TOML), then SIGCAST_BROADCASTER__* environment
/// variables (`__` between levels).
#[derive(Debug, Parser)]
#[command(name = "sigcast-broadcaster", version)]
struct Args {
    /// TOML configuration file.
    #[arg(long, short, env = "SIGCAST_BROADCASTER_CONFIG")]
    config: Option<PathBuf>,
}

fn main() -> std::process::ExitCode {
    sigcast_runtime::main(serve())
}

async fn serve() -> anyhow::Result<()> {
    let args = Args::parse();
    let config = Config::load(args.config.as_deref())?;
    let telemetry = sigcast_telemetry::init("sigcast-broadcaster", &config.log, &config.tracing)?;
    sigcast_telemetry::metrics::spawn(config.metrics_listen).await?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    let result =
        sigcast_broadcaster::run(config, listener, sigcast_runtime::shutdown_signal()).await;
    telemetry.shutdown().await;
    result
}
