//! `sigcast`: the operator's command line.
//!
//! Over gRPC to a gateway: inspect (`op get | list | attempts`), follow (`op watch`) and
//! cancel operations, read their audit trail (`audit`); `reconcile` compares what the store
//! says of an operation with what the chain says, reading the chain itself; `keys list` asks
//! the signer which keys it holds (public data only); `derive-op-id` computes the recommended
//! idempotency key. Tables by default, `--json` for scripts. It changes nothing but what
//! `op cancel` asks for.

/// `println!` for results: when the reader of standard output has gone (`sigcast op list |
/// head`), the command ends quietly with status 141, as a Unix tool ended by SIGPIPE does,
/// where `println!` would panic. (SIGPIPE itself stays ignored, as Rust sets it: a write to
/// a gateway or signer whose connection closed must be an error the exit codes describe, not a
/// silent death.)
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(error) = writeln!(std::io::stdout(), $($arg)*) {
            crate::output_failed(error)
        }
    }};
}

mod client;
mod op_id;
mod output;
mod reconcile;

use anyhow::Result;
use clap::{Parser, Subcommand};

/// The longest `--timeout`: a deadline past what a clock can hold would end the CLI in a panic.
const MAX_TIMEOUT_SECS: u64 = 365 * 24 * 3600;

/// sigcast operator tools.
#[derive(Debug, Parser)]
#[command(
    name = "sigcast",
    version,
    after_help = "Exit status: 0 done; 1 any other error; 2 bad arguments; 3 not found; \
                  4 gateway unreachable, unavailable, busy or timed out (retry later); 5 refused \
                  (invalid, denied, conflicting or in the wrong state); 6 not terminal when \
                  `op watch` ended (its --timeout)."
)]
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
    /// Seconds each call may take (default 30); for `op watch`, how long to wait for a
    /// terminal state (default: until it is one). From 1 to a year's seconds.
    #[arg(long, global = true, value_parser = clap::value_parser!(u64).range(1..=MAX_TIMEOUT_SECS))]
    timeout: Option<u64>,
    /// CA of the gateway's certificate (PEM): TLS to the gateway.
    #[arg(long, global = true, env = "SIGCAST_TLS_CA")]
    ca: Option<std::path::PathBuf>,
    /// Client certificate (PEM), for a gateway that authenticates callers.
    #[arg(long, global = true, env = "SIGCAST_TLS_CERT")]
    cert: Option<std::path::PathBuf>,
    /// Its key (PEM).
    #[arg(long, global = true, env = "SIGCAST_TLS_KEY")]
    key: Option<std::path::PathBuf>,
    /// The name the gateway's certificate carries, when not the address's host.
    #[arg(long, global = true, env = "SIGCAST_TLS_SERVER_NAME")]
    server_name: Option<String>,
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
        /// The genesis hash of the operation's Solana cluster (its `getGenesisHash`), as the
        /// broadcaster's `genesis_hash`: an endpoint serving another cluster is not read.
        /// Needed for a cluster other than mainnet-beta, devnet and testnet.
        #[arg(long, value_parser = genesis_hash)]
        genesis_hash: Option<String>,
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
    /// Print a completion script for your shell, e.g.
    /// `sigcast completions bash > /etc/bash_completion.d/sigcast` or
    /// `sigcast completions zsh > "${fpath[1]}/_sigcast"`.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
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
    /// An operation's attempts: number, transaction, why, outcome, endpoint, when sent, max fee per gas.
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
        #[arg(long = "signer-ca")]
        signer_ca: Option<std::path::PathBuf>,
        /// Client certificate for the signer (https).
        #[arg(long = "signer-cert")]
        signer_cert: Option<std::path::PathBuf>,
        /// Its key (https).
        #[arg(long = "signer-key")]
        signer_key: Option<std::path::PathBuf>,
    },
}

/// Ends the command after a failed write of its output: quietly with status 141 when the
/// reader went away, else with the error and status 1.
fn output_failed(error: std::io::Error) -> ! {
    if error.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(141);
    }
    eprintln!("error: writing output: {error}");
    std::process::exit(1)
}

/// `--genesis-hash`: base58 of 32 bytes.
fn genesis_hash(value: &str) -> Result<String, String> {
    if sigcast_solana::is_genesis_hash(value) {
        Ok(value.to_owned())
    } else {
        Err("not a genesis hash (base58 of 32 bytes)".into())
    }
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
        } => {
            op_id::op_id_for(&chain, &from, &to, &amount, &reference).map(|op_id| outln!("{op_id}"))
        }
        Command::Completions { shell } => {
            use clap::CommandFactory;
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Args::command(), "sigcast", &mut script);
            if let Err(error) = std::io::Write::write_all(&mut std::io::stdout(), &script) {
                output_failed(error)
            }
            Ok(())
        }
        command => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(anyhow::Error::from)
            .and_then(|rt| {
                let how = client::Connection {
                    timeout: args.timeout.map(std::time::Duration::from_secs),
                    ca: args.ca,
                    cert: args.cert,
                    key: args.key,
                    server_name: args.server_name,
                };
                rt.block_on(run(&args.gateway, &how, args.json, command))
            }),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            // 3 not found, 4 unavailable, 5 refused, 6 not terminal; 1 anything else (2 is
            // a usage error, from the argument parser).
            let code = error
                .downcast_ref::<client::Ended>()
                .map_or(1, |ended| ended.outcome.exit_code());
            std::process::ExitCode::from(code)
        }
    }
}

async fn run(gateway: &str, how: &client::Connection, json: bool, command: Command) -> Result<()> {
    let out = output::Output::new(json)?;
    match command {
        Command::Op { command } => {
            let mut client = client::Gateway::connect(gateway, how).await?;
            match command {
                OpCommand::Get { op_id } => out.operation(&client.get(&op_id).await?),
                OpCommand::Watch { op_id } => client.watch(&op_id, &out, how.timeout).await,
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
            let mut client = client::Gateway::connect(gateway, how).await?;
            out.audit(&client.audit(&op_id).await?)
        }
        Command::Reconcile {
            op_id,
            rpc_urls,
            confirmations,
            genesis_hash,
        } => {
            let mut client = client::Gateway::connect(gateway, how).await?;
            let op = client.get(&op_id).await?;
            let report =
                reconcile::reconcile(&op, &rpc_urls, confirmations, genesis_hash.as_deref())
                    .await?;
            out.reconcile(&op, &report)
        }
        Command::Keys {
            command:
                KeysCommand::List {
                    signer,
                    signer_ca,
                    signer_cert,
                    signer_key,
                },
        } => {
            let keys =
                client::signer_keys(&signer, signer_ca, signer_cert, signer_key, how.timeout)
                    .await?;
            out.keys(&keys)
        }
        Command::DeriveOpId { .. } | Command::Completions { .. } => {
            unreachable!("handled without a runtime")
        }
    }
}
