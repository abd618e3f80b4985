//! Durable-nonce accounts, for the operator's CLI: created on chain with a key this signer
//! holds as their authority, registered in the store, and listed with their on-chain state.
//!
//! Once a key has nonce accounts registered, every Solana operation it signs uses one of them
//! (one operation per account at a time) instead of a recent blockhash.

use crate::config::Config;
use crate::keys::Keyring;
use anyhow::{Context, bail};
use sigcast_solana::{NONCE_ACCOUNT_SIZE, SolanaRpc};
use sigcast_store::{Store, accounts};
use std::time::Duration;

/// How many fresh blockhashes a creation is tried with before giving up.
const CREATE_ROUNDS: usize = 5;

fn cluster_rpc(config: &Config, cluster: &str) -> anyhow::Result<SolanaRpc> {
    let configured = config
        .solana_clusters
        .iter()
        .find(|c| c.cluster == cluster)
        .with_context(|| format!("cluster {cluster:?} is not in [[solana_clusters]]"))?;
    Ok(SolanaRpc::new(
        &configured.rpc_urls,
        Duration::from_millis(config.rpc_timeout_ms),
    )?)
}

fn pubkey(text: &str) -> anyhow::Result<[u8; 32]> {
    bs58::decode(text)
        .into_vec()
        .ok()
        .and_then(|v| v.try_into().ok())
        .with_context(|| format!("{text:?} is not a base58 Solana public key"))
}

/// Creates `count` nonce accounts with `authority` (a key this signer holds) as payer and
/// authority, waits until each is confirmed, registers it, and returns their addresses.
pub async fn create(
    config: &Config,
    keyring: &Keyring,
    cluster: &str,
    authority: &str,
    count: usize,
) -> anyhow::Result<Vec<String>> {
    let rpc = cluster_rpc(config, cluster)?;
    let authority_bytes = pubkey(authority)?;
    let key = keyring
        .ed25519(&authority_bytes)
        .with_context(|| format!("this signer holds no Ed25519 key {authority}"))?;
    let store = Store::open(&config.store)?;
    let rent = rpc
        .rent_exempt_minimum(NONCE_ACCOUNT_SIZE)
        .await
        .context("reading the rent-exempt minimum")?;
    let mut created = Vec::with_capacity(count);
    for _ in 0..count {
        let account = create_one(&rpc, &key, authority_bytes, rent).await?;
        let root = store.root().clone();
        store
            .run(|tx| accounts::register_nonce_account(tx, &root, cluster, authority, &account))?;
        tracing::info!(%cluster, %authority, nonce_account = %account, "nonce account created");
        created.push(account);
    }
    Ok(created)
}

/// One nonce account: a fresh address (its key signs the creation and is then dropped: the
/// account is controlled by its authority alone), created and initialized in one transaction.
async fn create_one(
    rpc: &SolanaRpc,
    authority: &crate::keys::Ed25519Handle,
    authority_bytes: [u8; 32],
    rent: u64,
) -> anyhow::Result<String> {
    use ed25519_dalek::Signer;
    for _ in 0..CREATE_ROUNDS {
        let address_key = ed25519_dalek::SigningKey::generate(&mut rand::rngs::OsRng);
        let address = address_key.verifying_key().to_bytes();
        let latest = rpc.latest_blockhash().await?;
        let (blockhash, last_valid) = (latest.hash, latest.last_valid_block_height);
        let message =
            sigcast_solana::create_nonce_account_message(authority_bytes, address, rent, blockhash);
        let bytes = sigcast_solana::message_bytes(&message);
        let signatures = [
            authority.sign(&bytes).map_err(anyhow::Error::msg)?,
            address_key.sign(&bytes).to_bytes(),
        ];
        drop(address_key);
        let transaction = sigcast_solana::assemble(message, &signatures);
        let wire = sigcast_solana::wire_bytes(&transaction);
        let signature = bs58::encode(signatures[0]).into_string();
        loop {
            // Resending the same bytes is safe: one transaction lands at most once.
            let _ = rpc.send_transaction(&wire, 0).await;
            tokio::time::sleep(Duration::from_millis(500)).await;
            if let Ok(statuses) = rpc.statuses(std::slice::from_ref(&signature)).await
                && let Some(Some(status)) = statuses.first()
            {
                if let Some(err) = &status.err {
                    bail!("creating nonce account: transaction {signature} failed: {err}");
                }
                if status.confirmation != "processed" {
                    return Ok(bs58::encode(address).into_string());
                }
                continue;
            }
            if rpc.block_height().await.is_ok_and(|h| h > last_valid) {
                break; // expired unlanded: try again with a fresh address and blockhash
            }
        }
    }
    bail!("creating a nonce account: no transaction landed in {CREATE_ROUNDS} blockhash lifetimes")
}

/// A registered nonce account and what the chain says of it.
#[derive(Debug)]
pub struct Listed {
    /// Cluster.
    pub cluster: String,
    /// The key that advances it.
    pub authority: String,
    /// Its address.
    pub account: String,
    /// Its current nonce value (base58), or why it could not be read.
    pub value: Result<String, String>,
    /// The operation holding it, if any.
    pub holder: Option<String>,
}

/// Every registered nonce account, with its on-chain value and its holder.
pub async fn list(config: &Config) -> anyhow::Result<Vec<Listed>> {
    let store = Store::open(&config.store)?;
    let root = store.root().clone();
    let registered = store.read(|tx| accounts::all_nonce_accounts(tx, &root))?;
    let mut listed = Vec::with_capacity(registered.len());
    for (cluster, authority, account) in registered {
        let holder = store.read(|tx| accounts::nonce_holder(tx, &root, &cluster, &account))?;
        let value = match cluster_rpc(config, &cluster) {
            Err(e) => Err(e.to_string()),
            Ok(rpc) => match rpc.nonce(&pubkey(&account)?).await {
                Ok(Some(state)) if bs58::encode(state.authority).into_string() == authority => {
                    Ok(bs58::encode(state.value).into_string())
                }
                Ok(Some(state)) => Err(format!(
                    "authority is {}, not {authority}",
                    bs58::encode(state.authority).into_string()
                )),
                Ok(None) => Err("not an initialized nonce account".into()),
                Err(e) => Err(e.to_string()),
            },
        };
        listed.push(Listed {
            cluster,
            authority,
            account,
            value,
            holder,
        });
    }
    Ok(listed)
}
