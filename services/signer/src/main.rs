//! `sigcast-signer`: the key-holding signing service, and its key tools.

use anyhow::Context;
use clap::{Parser, Subcommand};
use sigcast_runtime::ServiceConfig;
use sigcast_signer::{Config, config, keys, token};
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
    /// Manage keys: keystore files and PKCS#11 token keys.
    Keys {
        #[command(subcommand)]
        command: KeysCommand,
    },
    /// Manage Solana durable-nonce accounts. A key with nonce accounts signs every operation
    /// with one of them (one operation per account at a time) instead of a recent blockhash.
    Nonce {
        #[command(subcommand)]
        command: NonceCommand,
    },
}

#[derive(Debug, Subcommand)]
enum NonceCommand {
    /// Create nonce accounts on chain, paid for and advanced by a key this signer holds, and
    /// register them; prints each address once it is confirmed.
    Create {
        /// The cluster, as in [[solana_clusters]].
        #[arg(long)]
        cluster: String,
        /// The Ed25519 key (base58) that pays for them and becomes their authority.
        #[arg(long)]
        authority: String,
        /// How many: one operation of the key is in flight per account.
        #[arg(long, default_value_t = 1)]
        count: usize,
    },
    /// List the registered nonce accounts: cluster, authority, address, current value and the
    /// operation holding it.
    List,
}

#[derive(Debug, Subcommand)]
enum KeysCommand {
    /// Write encrypted keystores for the well-known dev accounts of the public test mnemonic
    /// (local chains only): anvil's (secp256k1), or Solana's at m/44'/501'/i'/0' (ed25519);
    /// prints each account.
    ImportDev {
        /// How many dev accounts, from the first: as many as anvil funds (`anvil --accounts N`,
        /// ten by default).
        #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(0..=10_000))]
        count: u32,
        /// secp256k1 (anvil's EVM accounts) or ed25519 (Solana accounts).
        #[arg(long, default_value = "secp256k1", value_parser = ["secp256k1", "ed25519"])]
        algorithm: String,
    },
    /// Encrypt an existing secp256k1 key (hex in a file) into a keystore; prints its account.
    /// Destroy the plain file afterwards.
    Import {
        /// File holding the private key as hex.
        #[arg(long)]
        key_file: PathBuf,
    },
    /// Generate a key, inside the configured PKCS#11 token (non-extractable) or in an
    /// encrypted keystore; prints its account.
    Generate {
        /// Where the key lives: pkcs11 (the configured token) or keystore.
        #[arg(long, default_value = "pkcs11", value_parser = ["pkcs11", "keystore"])]
        backend: String,
        /// The key's label in the token (pkcs11 only).
        #[arg(long, default_value = "sigcast")]
        label: String,
        /// secp256k1 (EVM; prints the address) or ed25519 (Solana; prints the base58 key).
        #[arg(long, default_value = "secp256k1", value_parser = ["secp256k1", "ed25519"])]
        algorithm: String,
    },
    /// List the accounts held: keystores (decrypted to derive them) and token keys. Prints
    /// addresses and where each key lives, never a key.
    List,
}

fn main() -> std::process::ExitCode {
    sigcast_runtime::main(serve())
}

async fn serve() -> anyhow::Result<()> {
    // Before anything: every command may decrypt keys (list, import, generate, nonce), not
    // only the server, and none of them may leave a core dump or be read by a debugger.
    sigcast_signer::harden_process();
    let args = Args::parse();
    let mut config = Config::load(args.config.as_deref())?;
    match args.command.unwrap_or(Command::Serve { listen: None }) {
        Command::Serve { listen } => {
            if let Some(listen) = listen {
                config.listen = listen;
            }
            let telemetry =
                sigcast_telemetry::init("sigcast-signer", &config.log, &config.tracing)?;
            sigcast_telemetry::metrics::spawn(config.metrics_listen).await?;
            let listener = tokio::net::TcpListener::bind(config.listen)
                .await
                .with_context(|| format!("binding {}", config.listen))?;
            let result =
                sigcast_signer::run(config, listener, sigcast_runtime::shutdown_signal()).await;
            telemetry.shutdown().await;
            result
        }
        Command::Nonce { command } => {
            match command {
                NonceCommand::Create {
                    cluster,
                    authority,
                    count,
                } => {
                    let keyring = sigcast_signer::load_keyring(&config)?;
                    for account in sigcast_signer::nonce_accounts::create(
                        &config, &keyring, &cluster, &authority, count,
                    )
                    .await?
                    {
                        println!("{account}");
                    }
                }
                NonceCommand::List => {
                    println!("CLUSTER\tAUTHORITY\tNONCE_ACCOUNT\tVALUE\tHELD_BY");
                    for row in sigcast_signer::nonce_accounts::list(&config).await? {
                        println!(
                            "{}\t{}\t{}\t{}\t{}",
                            row.cluster,
                            row.authority,
                            row.account,
                            row.value.unwrap_or_else(|e| format!("({e})")),
                            row.holder.as_deref().unwrap_or("-")
                        );
                    }
                }
            }
            Ok(())
        }
        Command::Keys { command } => {
            let passphrase =
                || keys::read_passphrase(config.passphrase_file.as_deref(), config::PASSPHRASE_ENV);
            let token = || {
                let pkcs11 = config
                    .pkcs11
                    .as_ref()
                    .context("no [pkcs11] token in the configuration")?;
                anyhow::Ok(token::Token::open(pkcs11)?)
            };
            match command {
                KeysCommand::ImportDev { count, algorithm } => {
                    let accounts = if algorithm == "ed25519" {
                        keys::import_solana_dev_keys(&config.keystore_dir, &passphrase()?, count)?
                    } else {
                        keys::import_anvil_dev_keys(&config.keystore_dir, &passphrase()?, count)?
                            .iter()
                            .map(ToString::to_string)
                            .collect()
                    };
                    for account in accounts {
                        println!("{account}");
                    }
                }
                KeysCommand::Import { key_file } => {
                    println!(
                        "{}",
                        keys::import_key_file(&config.keystore_dir, &key_file, &passphrase()?)?
                    )
                }
                KeysCommand::Generate {
                    backend,
                    label,
                    algorithm,
                } => {
                    let ed25519 = algorithm == "ed25519";
                    let account = match backend.as_str() {
                        "keystore" => keys::generate_keystore_key(
                            &config.keystore_dir,
                            &passphrase()?,
                            ed25519,
                        )?,
                        _ if ed25519 => {
                            bs58::encode(token()?.generate_ed25519(&label)?).into_string()
                        }
                        _ => token()?.generate(&label)?.to_string(),
                    };
                    println!("{account}");
                }
                KeysCommand::List => {
                    let mut keyring = keys::Keyring::load(&config.keystore_dir, &passphrase()?)?;
                    if config.pkcs11.is_some() {
                        keyring.add_token_keys(token()?.keys()?);
                    }
                    for (account, backend) in keyring.entries() {
                        println!("{account} {backend}");
                    }
                    if config.pkcs11.is_some() {
                        keyring.add_token_ed25519_keys(token()?.ed25519_keys()?);
                    }
                    for (account, backend) in keyring.ed25519_entries() {
                        println!("{account} {backend} ed25519");
                    }
                }
            }
            Ok(())
        }
    }
}
