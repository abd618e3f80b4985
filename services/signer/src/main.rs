//! `sigcast-signer`: the key-holding signing service, and its key tools.

use anyhow::Context;
use clap::{Parser, Subcommand};
use sigcast_runtime::ServiceConfig;
use sigcast_signer::{Config, config, keys};
use std::net::SocketAddr;
use std::path::PathBuf;

/// sigcast signer: holds the keys and signs recorded operations.
///
/// Configuration: defaults, then --config (TOML), then SIGCAST_SIGNER__* environment variables
/// (`__` between levels). The keystore passphrase comes from `passphrase_file` or the
/// SIGCAST_SIGNER_PASSPHRASE environment variable.
#[derive(Debug, Parser)]
#[command(name = "sigcast-signer", version)]
struct Args {
    /// TOML configuration file.
    #[arg(long, short, global = true, env = "SIGCAST_SIGNER_CONFIG")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the signer API (the default).
    Serve {
        /// Address to listen on (overrides `listen`).
        #[arg(long)]
        listen: Option<SocketAddr>,
    },
    /// Manage keystore files.
    Keys {
        #[command(subcommand)]
        command: KeysCommand,
    },
}

#[derive(Debug, Subcommand)]
enum KeysCommand {
    /// Write encrypted keystores for anvil's well-known dev accounts (local chains only).
    ImportDev {
        /// How many of the ten dev accounts.
        #[arg(long, default_value_t = 4)]
        count: usize,
    },
    /// List the accounts of the keystores (decrypts them; prints addresses only).
    List,
}

fn main() -> std::process::ExitCode {
    sigcast_runtime::main(serve())
}

async fn serve() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut config = Config::load(args.config.as_deref())?;
    match args.command.unwrap_or(Command::Serve { listen: None }) {
        Command::Serve { listen } => {
            if let Some(listen) = listen {
                config.listen = listen;
            }
            sigcast_telemetry::init(&config.log);
            let listener = tokio::net::TcpListener::bind(config.listen)
                .await
                .with_context(|| format!("binding {}", config.listen))?;
            sigcast_signer::run(config, listener, sigcast_runtime::shutdown_signal()).await
        }
        Command::Keys { command } => {
            let passphrase =
                keys::read_passphrase(config.passphrase_file.as_deref(), config::PASSPHRASE_ENV)?;
            let accounts = match command {
                KeysCommand::ImportDev { count } => {
                    keys::import_anvil_dev_keys(&config.keystore_dir, &passphrase, count)?
                }
                KeysCommand::List => {
                    keys::Keyring::load(&config.keystore_dir, &passphrase)?.accounts()
                }
            };
            for account in accounts {
                println!("{account}");
            }
            Ok(())
        }
    }
}
