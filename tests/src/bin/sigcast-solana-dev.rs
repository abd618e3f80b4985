//! `sigcast-solana-dev`: a Solana JSON-RPC node for local development, the one the tests use
//! (the real Solana runtime, crate `litesvm`, behind the RPC methods sigcast needs, plus
//! `requestAirdrop`). Blockhashes expire 150 slots after they are issued, durable nonces work,
//! and every start is a new cluster (a new genesis hash, empty state): nothing is kept.
//!
//! `scripts/run.sh` starts it next to anvil. Not a validator: no consensus, no forks, one
//! process, state in memory.

use anyhow::Context;
use clap::Parser;
use std::net::SocketAddr;
use std::time::Duration;

#[derive(Debug, Parser)]
#[command(
    version,
    about = "A local Solana JSON-RPC node for development (state in memory)"
)]
struct Args {
    /// Address to answer JSON-RPC on (Solana's usual port).
    #[arg(
        long,
        env = "SIGCAST_SOLANA_DEV_LISTEN",
        default_value = "127.0.0.1:8899"
    )]
    listen: SocketAddr,
    /// Milliseconds per slot (a blockhash lives 150 slots: 60 s at 400 ms, as on mainnet).
    #[arg(long, env = "SIGCAST_SOLANA_DEV_SLOT_MS", default_value_t = 400,
          value_parser = clap::value_parser!(u64).range(1..=60_000))]
    slot_ms: u64,
}

fn main() -> std::process::ExitCode {
    sigcast_runtime::main(run())
}

async fn run() -> anyhow::Result<()> {
    let args = Args::parse();
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let node = sigcast_e2e::SolanaNode::serve_on(listener, Duration::from_millis(args.slot_ms));
    eprintln!(
        "sigcast-solana-dev: JSON-RPC on {} (a slot every {} ms, genesis {})",
        node.url,
        args.slot_ms,
        node.genesis_hash()
    );
    sigcast_runtime::shutdown_signal().await;
    Ok(())
}
