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

/// The endpoints of one Solana cluster, and the genesis hash that names it.
#[derive(Debug)]
pub struct SolanaRpc(RpcPool, Genesis);

impl std::ops::Deref for SolanaRpc {
    type Target = RpcPool;
    fn deref(&self) -> &RpcPool {
        &self.0
    }
}

/// Whether `hash` reads as a genesis hash: base58 of 32 bytes.
pub fn is_genesis_hash(hash: &str) -> bool {
    bs58::decode(hash)
        .into_vec()
        .is_ok_and(|bytes| bytes.len() == 32)
}

/// The genesis hashes of Solana's public clusters, by the names intents use.
pub fn known_genesis_hash(cluster: &str) -> Option<&'static str> {
    match cluster {
        "mainnet-beta" | "mainnet" => Some("5eykt4UsFv8P8NJdTREpY1vzqKqZKvdpKuc147dw2N9d"),
        "devnet" => Some("EtWTRABZaYq6iMfeYKouRu166VU2xqa1wcaWoxPkrZBG"),
        "testnet" => Some("4uhcVJyU9pJkvQyS88uRDiswHXSCkY3zQawwpjk2NsNY"),
        _ => None,
    }
}

/// The cluster an endpoint must serve for its answers to count: a genesis hash configured or
/// known for the cluster's name, else the one every configured endpoint answers alike (until
/// they all answer and agree, no endpoint's answers are evidence; blockhashes and nonce
/// accounts are read from any while one has not answered, from none while they disagree).
/// An endpoint of another cluster (a load balancer or a DNS name moved) shows other block
/// heights and no trace of our signatures: taken as evidence, that reads as "expired, never
/// landed", and a re-sign could apply an operation twice.
#[derive(Debug, Default)]
struct Genesis(
    std::sync::OnceLock<String>,
    /// When pinning it was last tried without success, and whether the endpoints answered
    /// different hashes: tried again only [`PIN_AGAIN_AFTER`] later, not on every read.
    std::sync::Mutex<Option<(std::time::Instant, bool)>>,
);

/// How long after a pinning of the genesis hash that did not succeed it is tried again.
const PIN_AGAIN_AFTER: Duration = Duration::from_secs(10);

/// What the configured endpoints answer of their genesis hash, all asked at once.
enum Agreement {
    /// Every one the same.
    Agreed(String),
    /// Not every one the same: one serves another cluster.
    Disagree,
    /// Some did not answer.
    Unknown,
}

/// The genesis hash reads of the cluster are checked against.
enum Expected {
    /// This one.
    Hash(String),
    /// None can be told yet (an endpoint did not answer): reads go unchecked, as before the
    /// check, so that signing waits on no endpoint that is down.
    Unknown,
    /// The endpoints answer different hashes: one serves another cluster, and no read of
    /// the cluster is taken until `genesis_hash` is configured.
    Disagreement,
}

impl SolanaRpc {
    /// Expects the endpoints to serve the cluster whose genesis hash is `configured`, else
    /// the one [`known_genesis_hash`] gives for `cluster`, else the one every endpoint answers
    /// alike, once they all have.
    pub fn expecting_cluster(self, cluster: &str, configured: Option<&str>) -> Self {
        if let Some(hash) = configured.or_else(|| known_genesis_hash(cluster)) {
            let _ = self.1.0.set(hash.to_owned());
        }
        self
    }

    /// What every configured endpoint answers of its genesis hash, all asked at once (one
    /// that never answers costs one timeout, not one per endpoint).
    async fn agreed_genesis(&self) -> Agreement {
        let urls = self.0.urls();
        let answers = futures::future::join_all(
            urls.iter()
                .map(|url| self.0.read_from(url, "getGenesisHash", json!([]))),
        )
        .await;
        // Every hash answered, whatever failed: two that differ are a disagreement even
        // beside an endpoint that did not answer (or answered no hash).
        let mut answered = std::collections::BTreeSet::new();
        let mut unanswered = false;
        for answer in answers {
            match answer.ok().as_ref().and_then(Value::as_str) {
                Some(hash) if is_genesis_hash(hash) => {
                    answered.insert(hash.to_owned());
                }
                _ => unanswered = true,
            }
        }
        if answered.len() > 1 {
            tracing::error!(
                "the cluster's endpoints answer different genesis hashes: configure \
                 genesis_hash; until then nothing they answer is taken"
            );
            return Agreement::Disagree;
        }
        match answered.pop_first() {
            Some(hash) if !unanswered => Agreement::Agreed(hash),
            _ => Agreement::Unknown,
        }
    }

    /// The genesis hash reads of the cluster are checked against: configured, known by name,
    /// or pinned once every endpoint answered alike; tried again [`PIN_AGAIN_AFTER`] a try
    /// that did not pin it (the try's time is taken as it starts: concurrent reads do not
    /// wait on it).
    async fn expected_genesis(&self) -> Expected {
        if let Some(pinned) = self.1.0.get() {
            return Expected::Hash(pinned.clone());
        }
        // A disagreement once seen stands until every endpoint answers alike: while one of
        // them does not answer, the one that does may be the other cluster's.
        let disagreed = {
            let mut tried = self.1.1.lock().unwrap_or_else(|p| p.into_inner());
            let disagreed = tried.is_some_and(|(_, disagreed)| disagreed);
            if tried.is_some_and(|(at, _)| at.elapsed() < PIN_AGAIN_AFTER) {
                return match disagreed {
                    true => Expected::Disagreement,
                    false => Expected::Unknown,
                };
            }
            *tried = Some((std::time::Instant::now(), disagreed));
            disagreed
        };
        match self.agreed_genesis().await {
            Agreement::Agreed(agreed) => {
                tracing::info!(genesis = %agreed, "cluster pinned to the genesis hash all its endpoints answer");
                Expected::Hash(self.1.0.get_or_init(|| agreed).clone())
            }
            Agreement::Disagree => {
                *self.1.1.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some((std::time::Instant::now(), true));
                Expected::Disagreement
            }
            Agreement::Unknown if disagreed => Expected::Disagreement,
            Agreement::Unknown => Expected::Unknown,
        }
    }

    /// Whether `endpoint` serves this cluster (its `getGenesisHash`, kept for a pass by a
    /// pass cache). Unreadable: not known to, so no.
    pub async fn serves_cluster(&self, endpoint: &impl sigcast_jsonrpc::Endpoint) -> bool {
        let Ok(value) = endpoint.request("getGenesisHash", json!([])).await else {
            return false;
        };
        let Some(answered) = value.as_str() else {
            return false;
        };
        // Pinned, or tried again at most once a try period: a pass checks every operation.
        let Expected::Hash(expected) = self.expected_genesis().await else {
            return false;
        };
        if expected != answered {
            tracing::warn!(
                endpoint = endpoint.label(),
                answered,
                expected = expected.as_str(),
                "endpoint serves another cluster; its answers are not evidence"
            );
            return false;
        }
        true
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
        Ok(Self(RpcPool::new(urls, timeout)?, Genesis::default()))
    }

    /// A hedged read of `method` whose answer `parse` accepts, from an endpoint serving this
    /// cluster: another cluster's blockhash is valid nowhere on this one (the transaction
    /// would never land, and its expiry is counted in another chain's heights), and its nonce
    /// account is another account. An endpoint of another cluster, or an answer `parse`
    /// refuses, counts against the endpoint's rank. While the cluster's genesis hash cannot be
    /// told (not configured, and an endpoint down before all answered alike), any endpoint is
    /// read, as before the check: signing waits on no endpoint that is down.
    async fn read_of_cluster<T>(
        &self,
        method: &'static str,
        params: Value,
        parse: impl Fn(Value) -> std::result::Result<T, Value> + Copy,
    ) -> Result<T> {
        let expected = match self.expected_genesis().await {
            Expected::Hash(hash) => Some(hash),
            Expected::Unknown => None,
            Expected::Disagreement => {
                return Err(sigcast_jsonrpc::Error::Shared(format!(
                    "{method}: the cluster's endpoints answer different genesis hashes (one \
                     serves another cluster): configure genesis_hash"
                )));
            }
        };
        let (params, expected) = (&params, expected.as_deref());
        self.0
            .hedged(method, |endpoint| async move {
                if let Some(expected) = expected {
                    endpoint
                        .request_as("getGenesisHash", json!([]), |answered| {
                            match answered.as_str() == Some(expected) {
                                true => Ok(()),
                                false => Err(answered),
                            }
                        })
                        .await?;
                }
                endpoint.request_as(method, params.clone(), parse).await
            })
            .await
    }

    /// The latest blockhash at `confirmed` commitment, its last valid block height, and the
    /// slot it was read at; from an endpoint serving the cluster.
    pub async fn latest_blockhash(&self) -> Result<LatestBlockhash> {
        // An answer that is not one counts against its endpoint (see `RpcPool::read_as`).
        self.read_of_cluster(
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

    /// [`SolanaRpc::nonce`], with the slot it was read at; from an endpoint serving the
    /// cluster.
    pub async fn nonce_and_slot(
        &self,
        account: &[u8; 32],
    ) -> Result<(Option<crate::NonceState>, u64)> {
        let (data, slot) = self
            .read_of_cluster("getAccountInfo", account_params(account), |value| {
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

    /// Sends a signed transaction to one endpoint, once, without the node's own retries: the
    /// best for its first send, the next in rank for each next (`turn`: earlier sends of the
    /// same bytes).
    pub async fn send_transaction(&self, wire: &[u8], turn: u32) -> SendAttempt<String> {
        let encoded = base64::engine::general_purpose::STANDARD.encode(wire);
        let params =
            json!([encoded, { "encoding": "base64", "skipPreflight": true, "maxRetries": 0 }]);
        let sent = self.0.send("sendTransaction", params, turn).await;
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
