//! Solana JSON-RPC: the shared endpoint pool with the methods sigcast reads and the one it
//! writes.

use base64::Engine;
use serde_json::{Value, json};
use sigcast_jsonrpc::{Result, RpcError, RpcPool, SendAttempt};
use std::time::Duration;

/// A recent blockhash as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LatestBlockhash {
    /// The blockhash.
    pub hash: [u8; 32],
    /// The last block height at which a transaction carrying it can be processed.
    pub last_valid_block_height: u64,
    /// The slot of the read: the endpoint's history must reach back to it for any proof that
    /// a transaction carrying it never landed.
    pub slot: u64,
}

/// A landed transaction's status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureStatus {
    /// Slot it landed in.
    pub slot: u64,
    /// Its execution error, if it failed (it landed all the same: fee paid, not retried).
    pub err: Option<String>,
    /// "processed", "confirmed" or "finalized".
    pub confirmation: String,
}

fn parse_account_data(value: &Value) -> Option<Option<Vec<u8>>> {
    let account = value.get("value")?;
    if account.is_null() {
        return Some(None);
    }
    let data = account.get("data")?.get(0)?.as_str()?;
    base64::engine::general_purpose::STANDARD
        .decode(data)
        .ok()
        .map(Some)
}

fn account_params(account: &[u8; 32]) -> Value {
    json!([
        bs58::encode(account).into_string(),
        { "encoding": "base64", "commitment": "confirmed" }
    ])
}

/// The endpoints of one Solana cluster.
#[derive(Debug)]
pub struct SolanaRpc(RpcPool);

impl std::ops::Deref for SolanaRpc {
    type Target = RpcPool;
    fn deref(&self) -> &RpcPool {
        &self.0
    }
}

fn parse_statuses(value: &Value) -> Option<Vec<Option<SignatureStatus>>> {
    value
        .get("value")?
        .as_array()?
        .iter()
        .map(|s| {
            if s.is_null() {
                return Some(None);
            }
            Some(Some(SignatureStatus {
                slot: s.get("slot")?.as_u64()?,
                err: s
                    .get("err")
                    .filter(|e| !e.is_null())
                    .map(ToString::to_string),
                confirmation: s
                    .get("confirmationStatus")
                    .and_then(Value::as_str)
                    .unwrap_or("processed")
                    .to_owned(),
            }))
        })
        .collect()
}

impl SolanaRpc {
    /// A pool over `urls`; each request times out after `timeout`.
    pub fn new(urls: &[String], timeout: Duration) -> Result<Self> {
        Ok(Self(RpcPool::new(urls, timeout)?))
    }

    /// The latest blockhash at `confirmed` commitment, its last valid block height, and the
    /// slot it was read at.
    pub async fn latest_blockhash(&self) -> Result<LatestBlockhash> {
        // An answer that is not one counts against its endpoint (see `RpcPool::read_as`).
        self.read_as(
            "getLatestBlockhash",
            json!([{ "commitment": "confirmed" }]),
            |value| {
                let hash = value["value"]["blockhash"]
                    .as_str()
                    .and_then(|h| bs58::decode(h).into_vec().ok())
                    .and_then(|b| <[u8; 32]>::try_from(b).ok());
                let last_valid = value["value"]["lastValidBlockHeight"].as_u64();
                let slot = value["context"]["slot"].as_u64();
                match (hash, last_valid, slot) {
                    (Some(hash), Some(last_valid_block_height), Some(slot)) => {
                        Ok(LatestBlockhash {
                            hash,
                            last_valid_block_height,
                            slot,
                        })
                    }
                    _ => Err(value),
                }
            },
        )
        .await
    }

    /// The block height (hedged).
    pub async fn block_height(&self) -> Result<u64> {
        self.read_as("getBlockHeight", json!([]), |v| v.as_u64().ok_or(v))
            .await
    }

    /// Statuses of `signatures` (base58), searching the whole history; `None` where unknown.
    pub async fn statuses(&self, signatures: &[String]) -> Result<Vec<Option<SignatureStatus>>> {
        let params = json!([signatures, { "searchTransactionHistory": true }]);
        // Exactly one entry per signature asked: a list of another length answers some other
        // question, and an entry missing must not read as "unknown".
        self.read_as("getSignatureStatuses", params, |value| {
            parse_statuses(&value)
                .filter(|statuses| statuses.len() == signatures.len())
                .ok_or(value)
        })
        .await
    }

    /// A nonce account's state at `confirmed` (hedged): `None` if it is missing or not an
    /// initialized nonce account.
    pub async fn nonce(&self, account: &[u8; 32]) -> Result<Option<crate::NonceState>> {
        Ok(self.nonce_and_slot(account).await?.0)
    }

    /// [`SolanaRpc::nonce`], with the slot it was read at.
    pub async fn nonce_and_slot(
        &self,
        account: &[u8; 32],
    ) -> Result<(Option<crate::NonceState>, u64)> {
        let (data, slot) = self
            .read_as("getAccountInfo", account_params(account), |value| {
                match (
                    parse_account_data(&value),
                    value["context"]["slot"].as_u64(),
                ) {
                    (Some(data), Some(slot)) => Ok((data, slot)),
                    _ => Err(value),
                }
            })
            .await?;
        Ok((data.as_deref().and_then(crate::parse_nonce_account), slot))
    }

    /// The balance an account of `size` bytes needs to be rent-exempt.
    pub async fn rent_exempt_minimum(&self, size: usize) -> Result<u64> {
        self.read_as("getMinimumBalanceForRentExemption", json!([size]), |v| {
            v.as_u64().ok_or(v)
        })
        .await
    }

    /// Sends a signed transaction to one endpoint, once, without the node's own retries.
    pub async fn send_transaction(&self, wire: &[u8]) -> SendAttempt<String> {
        let encoded = base64::engine::general_purpose::STANDARD.encode(wire);
        let params =
            json!([encoded, { "encoding": "base64", "skipPreflight": true, "maxRetries": 0 }]);
        let sent = self.0.send("sendTransaction", params).await;
        let endpoint = sent.endpoint;
        let result = sent.result.and_then(|v| {
            v.as_str()
                .map(str::to_owned)
                .ok_or_else(|| RpcError::Malformed {
                    endpoint: endpoint.clone(),
                    message: format!(
                        "not a signature: {}",
                        sigcast_jsonrpc::quoted(&v.to_string())
                    ),
                })
        });
        SendAttempt { endpoint, result }
    }
}
