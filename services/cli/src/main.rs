//! `sigcast`: the operator's command line.
//!
//! Over gRPC to a gateway: inspect (`op get | list | attempts`), follow (`op watch`) and
//! cancel operations, read their audit trail (`audit`); `reconcile` compares what the store
//! says of an operation with what the chain says, reading the chain itself; `keys list` asks
//! the signer which keys it holds (public data only); `derive-op-id` computes the recommended
//! idempotency key. Tables by default, `--json` for scripts. It changes nothing but what
//! `op cancel` asks for.

mod client;
mod op_id;
mod output;
mod reconcile;

use anyhow::Result;
use clap::{Parser, Subcommand};

/// sigcast operator tools.
#[derive(Debug, Parser)]
#[command(name = "sigcast", version)]
struct Args {
    /// The gateway.
    #[arg(
        long,
        global = true,
        env = "SIGCAST_GATEWAY",
        default_value = "http://127.0.0.1:50051"
    )]
    gateway: String,
    /// Print JSON (protobuf's JSON mapping) instead of tables.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Operations: get, watch, list, cancel, attempts.
    Op {
        #[command(subcommand)]
        command: OpCommand,
    },
    /// The signer's audit records of an operation: one per signature.
    Audit {
        /// The operation's op_id.
        op_id: String,
    },
    /// Compare an operation in the store with the chain, read from `--rpc` endpoints: which
    /// attempt is included, the account's nonce, what the broadcaster will conclude. Reads only.
    Reconcile {
        /// The operation's op_id.
        op_id: String,
        /// JSON-RPC endpoint of the operation's chain (repeat for several).
        #[arg(long = "rpc", required = true)]
        rpc_urls: Vec<String>,
        /// Blocks a transaction must be under before it settles anything (EVM), as the
        /// broadcaster's `confirmations`.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
        confirmations: u64,
    },
    /// The keys the signer holds (public data only).
    Keys {
        #[command(subcommand)]
        command: KeysCommand,
    },
    /// Print the recommended op_id for a payment: `sc1-` + SHA-256 of its chain, sender,
    /// recipient, amount and your business reference (invoice, payout or order id).
    ///
    /// Addresses and amounts are normalized first, so `0xABC…` and `0xabc…`, or `0100` and
    /// `100`, give the same op_id.
    DeriveOpId {
        /// Chain, CAIP-2: `eip155:<chain id>` or `solana:<cluster>`.
        #[arg(long)]
        chain: String,
        /// Sending account.
        #[arg(long)]
        from: String,
        /// Recipient.
        #[arg(long)]
        to: String,
        /// Amount in base units (wei or lamports), decimal.
        #[arg(long)]
        amount: String,
        /// Your own unique reference for this payment.
        #[arg(long)]
        reference: String,
    },
}

#[derive(Debug, Subcommand)]
enum OpCommand {
    /// One operation: state, chain, account, result, error.
    Get {
        /// Its op_id.
        op_id: String,
    },
    /// Follow an operation until it is terminal, one line per change.
    Watch {
        /// Its op_id.
        op_id: String,
    },
    /// Operations in op_id order, filtered.
    List {
        /// Only this chain (CAIP-2, e.g. eip155:1).
        #[arg(long)]
        chain: Option<String>,
        /// Only this account (needs --chain).
        #[arg(long)]
        account: Option<String>,
        /// Only this state (e.g. SENT, CONFIRMED).
        #[arg(long)]
        state: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = 50)]
        limit: usize,
    },
    /// Cancel: at once before signing; after signing, an on-chain cancel is requested.
    Cancel {
        /// Its op_id.
        op_id: String,
    },
    /// An operation's attempts: number, transaction, endpoint, outcome, why.
    Attempts {
        /// Its op_id.
        op_id: String,
    },
}

#[derive(Debug, Subcommand)]
enum KeysCommand {
    /// List the signer's keys: `unix:/path/signer.sock` (as a uid it allows) or
    /// `https://host:port` with a client certificate.
    List {
        /// The signer's API.
        #[arg(long, env = "SIGCAST_SIGNER")]
        signer: String,
        /// CA of the signer's certificate (https).
        #[arg(long)]
        ca: Option<std::path::PathBuf>,
        /// Client certificate (https).
        #[arg(long)]
        cert: Option<std::path::PathBuf>,
        /// Its key (https).
        #[arg(long)]
        key: Option<std::path::PathBuf>,
    },
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let result = match args.command {
        Command::DeriveOpId {
            chain,
            from,
            to,
            amount,
            reference,
        } => op_id::op_id_for(&chain, &from, &to, &amount, &reference)
            .map(|op_id| println!("{op_id}")),
        command => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(anyhow::Error::from)
            .and_then(|rt| rt.block_on(run(&args.gateway, args.json, command))),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(gateway: &str, json: bool, command: Command) -> Result<()> {
    let out = output::Output::new(json)?;
    match command {
        Command::Op { command } => {
            let mut client = client::Gateway::connect(gateway).await?;
            match command {
                OpCommand::Get { op_id } => out.operation(&client.get(&op_id).await?),
                OpCommand::Watch { op_id } => client.watch(&op_id, &out).await,
                OpCommand::List {
                    chain,
                    account,
                    state,
                    limit,
                } => {
                    let ops = client.list(chain, account, state, limit).await?;
                    out.operations(&ops)
                }
                OpCommand::Cancel { op_id } => out.operation(&client.cancel(&op_id).await?),
                OpCommand::Attempts { op_id } => out.attempts(&client.get(&op_id).await?),
            }
        }
        Command::Audit { op_id } => {
            let mut client = client::Gateway::connect(gateway).await?;
            out.audit(&client.audit(&op_id).await?)
        }
        Command::Reconcile {
            op_id,
            rpc_urls,
            confirmations,
        } => {
            let mut client = client::Gateway::connect(gateway).await?;
            let op = client.get(&op_id).await?;
            let report = reconcile::reconcile(&op, &rpc_urls, confirmations).await?;
            out.reconcile(&op, &report)
        }
        Command::Keys {
            command:
                KeysCommand::List {
                    signer,
                    ca,
                    cert,
                    key,
                },
        } => {
            let keys = client::signer_keys(&signer, ca, cert, key).await?;
            out.keys(&keys)
        }
        Command::DeriveOpId { .. } => unreachable!("handled without a runtime"),
    }
}
