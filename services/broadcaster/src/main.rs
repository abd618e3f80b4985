//! `sigcast-broadcaster`: sends, confirms and resolves operations.

use anyhow::Context;
use clap::Parser;
use sigcast_broadcaster::Config;
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
    // One line with the whole cause chain; no backtrace for a configuration mistake.
    match tokio::runtime::Runtime::new().map_err(anyhow::Error::from).and_then(|rt| rt.block_on(serve())) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn serve() -> anyhow::Result<()> {
    let args = Args::parse();
    let config = Config::load(args.config.as_deref())?;
    sigcast_telemetry::init(&config.log);
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    sigcast_broadcaster::run(config, listener, shutdown_signal()).await
}

/// Completes on SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = ctrl_c => {}
                _ = term.recv() => {}
            }
        }
        Err(error) => {
            tracing::warn!(%error, "no SIGTERM handler; stopping on Ctrl-C only");
            let _ = ctrl_c.await;
        }
    }
}
