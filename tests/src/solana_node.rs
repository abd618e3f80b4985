//! A Solana JSON-RPC node for tests and local development (`sigcast-solana-dev`): the real
//! Solana runtime (crate `litesvm`) behind the RPC methods sigcast uses, and `requestAirdrop`,
//! with slots advancing on a timer so blockhashes really expire. State lives in memory only.
//!
//! litesvm itself accepts only its latest blockhash; this node keeps the validator's window
//! instead: a blockhash is valid until its `lastValidBlockHeight` (150 slots after it), the
//! block height being the slot here. Like a validator with `skipPreflight`, a transaction
//! whose blockhash is unknown or expired gets its signature back and never lands.
//! A durable-nonce transaction lands only while its nonce account holds the value it carries,
//! once per account per slot, as on a validator.
//! A transaction that fails in execution lands with its error (litesvm does not charge its
//! fee, unlike a validator).

use base64::Engine;
use litesvm::LiteSVM;
use serde_json::{Value, json};
use solana_hash::Hash;
use solana_pubkey::Pubkey;
use solana_signature::Signature;
use solana_transaction::versioned::VersionedTransaction;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};

/// Slots a blockhash stays valid, as on mainnet.
const BLOCKHASH_LIFETIME: u64 = 150;
/// Fee per signature.
const LAMPORTS_PER_SIGNATURE: u64 = 5_000;

struct Chain {
    svm: LiteSVM,
    slot: u64,
    /// Recent blockhashes and their last valid block height, newest last.
    blockhashes: VecDeque<(Hash, u64)>,
    /// Landed transactions: slot and error.
    statuses: HashMap<Signature, (u64, Option<String>)>,
    /// Nonce accounts advanced in the current slot: a second advance waits for the next one.
    nonces_advanced: HashSet<Pubkey>,
    /// The oldest slot this node's history reaches (`minimumLedgerSlot`,
    /// `getFirstAvailableBlock`): a pruned node answers a later one.
    first_available_slot: u64,
    /// Its genesis hash (`getGenesisHash`): each node a cluster of its own.
    genesis: Hash,
}

impl Chain {
    fn tick(&mut self) {
        self.slot += 1;
        self.nonces_advanced.clear();
        self.svm.warp_to_slot(self.slot);
        self.svm.expire_blockhash();
        self.blockhashes
            .push_back((self.svm.latest_blockhash(), self.slot + BLOCKHASH_LIFETIME));
        while self.blockhashes.len() > 4 * BLOCKHASH_LIFETIME as usize {
            self.blockhashes.pop_front();
        }
    }

    fn blockhash_valid(&self, hash: &Hash) -> bool {
        self.blockhashes
            .iter()
            .any(|(h, last_valid)| h == hash && *last_valid >= self.slot)
    }

    fn context(&self, value: Value) -> Value {
        json!({ "context": { "slot": self.slot }, "value": value })
    }
}

/// A running node; stops when dropped.
pub struct SolanaNode {
    /// Its JSON-RPC URL.
    pub url: String,
    /// Its address.
    pub addr: std::net::SocketAddr,
    chain: Arc<Mutex<Chain>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl SolanaNode {
    /// Starts a node on a free loopback port, producing a slot every `slot_time`.
    pub async fn start(slot_time: Duration) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::serve_on(listener, slot_time)
    }

    /// Starts a node answering on `listener`, producing a slot every `slot_time`.
    pub fn serve_on(listener: TcpListener, slot_time: Duration) -> Self {
        let svm = LiteSVM::new()
            .with_blockhash_check(false)
            .with_transaction_history(0);
        let mut chain = Chain {
            svm,
            slot: 0,
            blockhashes: VecDeque::new(),
            statuses: HashMap::new(),
            nonces_advanced: HashSet::new(),
            first_available_slot: 0,
            genesis: Hash::new_from_array(rand::random()),
        };
        chain.tick();
        let chain = Arc::new(Mutex::new(chain));
        let addr = listener.local_addr().expect("a bound listener");
        let ticker = {
            let chain = chain.clone();
            tokio::spawn(async move {
                let mut interval = tokio::time::interval(slot_time);
                loop {
                    interval.tick().await;
                    chain.lock().unwrap().tick();
                }
            })
        };
        let server = {
            let chain = chain.clone();
            tokio::spawn(async move {
                // Connections live in the server's task set: a node dropped stops answering
                // on the connections kept alive too, as a node that went down would.
                let mut connections = tokio::task::JoinSet::new();
                while let Ok((stream, _)) = listener.accept().await {
                    while connections.try_join_next().is_some() {}
                    connections.spawn(serve(stream, chain.clone()));
                }
            })
        };
        Self {
            url: format!("http://{addr}"),
            addr,
            chain,
            tasks: vec![ticker, server],
        }
    }

    /// Credits `lamports` to `account`.
    pub fn airdrop(&self, account: [u8; 32], lamports: u64) {
        let mut chain = self.chain.lock().unwrap();
        chain
            .svm
            .airdrop(&Pubkey::new_from_array(account), lamports)
            .expect("airdrop");
    }

    /// Overwrites a nonce account's value, as if someone else had advanced it.
    pub fn set_nonce_value(&self, account: [u8; 32], value: [u8; 32]) {
        let mut chain = self.chain.lock().unwrap();
        let key = Pubkey::new_from_array(account);
        let mut data = chain.svm.get_account(&key).expect("nonce account");
        data.data[40..72].copy_from_slice(&value);
        chain.svm.set_account(key, data).expect("set nonce account");
    }

    /// Forgets history before `slot`, as a node with limited retention does: it then answers
    /// that its history starts there.
    pub fn prune_history_before(&self, slot: u64) {
        self.chain.lock().unwrap().first_available_slot = slot;
    }

    /// Its genesis hash (base58), which names its cluster.
    pub fn genesis_hash(&self) -> String {
        self.chain.lock().unwrap().genesis.to_string()
    }

    /// The current slot (= block height).
    pub fn slot(&self) -> u64 {
        self.chain.lock().unwrap().slot
    }
}

impl Drop for SolanaNode {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Serves one connection, HTTP/1.1 with keep-alive, as a validator's RPC does: a node that
/// closed every connection after one answer made each client pay a TCP handshake per request
/// (a sixth of the broadcaster's CPU in a Solana benchmark), which no real node asks.
async fn serve(stream: TcpStream, chain: Arc<Mutex<Chain>>) {
    use http_body_util::{BodyExt, Full};
    use hyper::body::{Bytes, Incoming};
    use hyper::{Request, Response, header};
    let _ = stream.set_nodelay(true);
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let chain = chain.clone();
        async move {
            let body = request.into_body().collect().await?.to_bytes();
            let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let id = request.get("id").cloned().unwrap_or(Value::Null);
            let method = request
                .get("method")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let params = request.get("params").cloned().unwrap_or(json!([]));
            let reply = match handle(&mut chain.lock().unwrap(), method, &params) {
                Ok(result) => json!({ "jsonrpc": "2.0", "id": id, "result": result }),
                Err((code, message)) => {
                    json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } })
                }
            };
            let response = Response::builder()
                .header(header::CONTENT_TYPE, "application/json")
                .body(Full::new(Bytes::from(reply.to_string())))
                .expect("static response parts");
            Ok::<_, hyper::Error>(response)
        }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
        .await;
}

type RpcResult = Result<Value, (i64, String)>;

fn invalid(message: impl Into<String>) -> (i64, String) {
    (-32602, message.into())
}

fn pubkey_param(params: &Value, index: usize) -> Result<Pubkey, (i64, String)> {
    let text = params
        .get(index)
        .and_then(Value::as_str)
        .ok_or_else(|| invalid("missing pubkey"))?;
    let bytes: [u8; 32] = bs58::decode(text)
        .into_vec()
        .ok()
        .and_then(|v| v.try_into().ok())
        .ok_or_else(|| invalid(format!("invalid pubkey {text}")))?;
    Ok(Pubkey::new_from_array(bytes))
}

fn handle(chain: &mut Chain, method: &str, params: &Value) -> RpcResult {
    match method {
        "getSlot" | "getBlockHeight" => Ok(json!(chain.slot)),
        "getEpochInfo" => Ok(json!({
            "absoluteSlot": chain.slot,
            "blockHeight": chain.slot,
            "epoch": 0,
            "slotIndex": chain.slot,
            "slotsInEpoch": 432_000,
        })),
        "getGenesisHash" => Ok(json!(chain.genesis.to_string())),
        "minimumLedgerSlot" | "getFirstAvailableBlock" => Ok(json!(chain.first_available_slot)),
        "getLatestBlockhash" => {
            let (hash, last_valid) = *chain.blockhashes.back().expect("a blockhash");
            Ok(chain.context(
                json!({ "blockhash": hash.to_string(), "lastValidBlockHeight": last_valid }),
            ))
        }
        "isBlockhashValid" => {
            let text = params
                .get(0)
                .and_then(Value::as_str)
                .ok_or_else(|| invalid("missing blockhash"))?;
            let hash: Hash = text.parse().map_err(|_| invalid("invalid blockhash"))?;
            Ok(chain.context(json!(chain.blockhash_valid(&hash))))
        }
        "getBalance" => {
            let key = pubkey_param(params, 0)?;
            Ok(chain.context(json!(chain.svm.get_balance(&key).unwrap_or(0))))
        }
        "getAccountInfo" => {
            let key = pubkey_param(params, 0)?;
            let value = chain.svm.get_account(&key).map(|account| {
                json!({
                    "lamports": account.lamports,
                    "owner": account.owner.to_string(),
                    "data": [base64::engine::general_purpose::STANDARD.encode(&account.data), "base64"],
                    "executable": account.executable,
                    "rentEpoch": account.rent_epoch,
                    "space": account.data.len(),
                })
            });
            Ok(chain.context(value.unwrap_or(Value::Null)))
        }
        "getMinimumBalanceForRentExemption" => {
            let size = params
                .get(0)
                .and_then(Value::as_u64)
                .ok_or_else(|| invalid("missing data length"))?;
            Ok(json!(
                chain.svm.minimum_balance_for_rent_exemption(size as usize)
            ))
        }
        "getFeeForMessage" => {
            let text = params
                .get(0)
                .and_then(Value::as_str)
                .ok_or_else(|| invalid("missing message"))?;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(text)
                .map_err(|_| invalid("message not base64"))?;
            // The first byte of a legacy message header is its number of required signatures.
            let signatures = u64::from(*bytes.first().ok_or_else(|| invalid("empty message"))?);
            Ok(chain.context(json!(signatures * LAMPORTS_PER_SIGNATURE)))
        }
        "getSignatureStatuses" => {
            let signatures = params
                .get(0)
                .and_then(Value::as_array)
                .ok_or_else(|| invalid("missing signatures"))?;
            let statuses: Vec<Value> = signatures
                .iter()
                .map(|s| {
                    let signature: Option<Signature> = s.as_str().and_then(|s| s.parse().ok());
                    match signature.and_then(|s| chain.statuses.get(&s)) {
                        Some((slot, err)) => json!({
                            "slot": slot,
                            "confirmations": null,
                            "err": err.as_ref().map(|e| json!(e)),
                            "status": if err.is_some() { json!({ "Err": err }) } else { json!({ "Ok": null }) },
                            "confirmationStatus": "finalized",
                        }),
                        None => Value::Null,
                    }
                })
                .collect();
            Ok(chain.context(json!(statuses)))
        }
        "sendTransaction" => send_transaction(chain, params),
        "requestAirdrop" => {
            let key = pubkey_param(params, 0)?;
            let lamports = params
                .get(1)
                .and_then(Value::as_u64)
                .ok_or_else(|| invalid("missing lamports"))?;
            let landed = chain
                .svm
                .airdrop(&key, lamports)
                .map_err(|e| (-32603, format!("airdrop failed: {:?}", e.err)))?;
            let slot = chain.slot;
            chain.statuses.insert(landed.signature, (slot, None));
            Ok(json!(landed.signature.to_string()))
        }
        other => Err((-32601, format!("Method not found: {other}"))),
    }
}

fn send_transaction(chain: &mut Chain, params: &Value) -> RpcResult {
    let encoded = params
        .get(0)
        .and_then(Value::as_str)
        .ok_or_else(|| invalid("missing transaction"))?;
    let encoding = params
        .get(1)
        .and_then(|c| c.get("encoding"))
        .and_then(Value::as_str)
        .unwrap_or("base58");
    let bytes = match encoding {
        "base64" => base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .map_err(|_| invalid("not base64"))?,
        _ => bs58::decode(encoded)
            .into_vec()
            .map_err(|_| invalid("not base58"))?,
    };
    // As a validator's RPC decodes it: a transaction past one packet is refused.
    if bytes.len() > sigcast_domain::SOLANA_PACKET_BYTES {
        return Err(invalid(format!(
            "base64 encoded solana_transaction::Transaction too large: {} bytes (max: \
             encoded/raw 1644/{})",
            bytes.len(),
            sigcast_domain::SOLANA_PACKET_BYTES
        )));
    }
    let tx: VersionedTransaction =
        wincode::deserialize(&bytes).map_err(|e| invalid(format!("failed to deserialize: {e}")))?;
    let signature = *tx
        .signatures
        .first()
        .ok_or_else(|| invalid("no signature"))?;
    if chain.statuses.contains_key(&signature) {
        return Err((
            -32002,
            "Transaction simulation failed: This transaction has already been processed".into(),
        ));
    }
    let lands = match durable_nonce_account(&tx) {
        // A validator's check of a durable-nonce transaction: the account holds the value the
        // transaction carries, and was not already advanced in this slot.
        Some(account) => {
            chain
                .svm
                .get_account(&account)
                .and_then(|a| a.data.get(40..72).map(<[u8]>::to_vec))
                .is_some_and(|value| value == tx.message.recent_blockhash().to_bytes())
                && !chain.nonces_advanced.contains(&account)
        }
        None => chain.blockhash_valid(tx.message.recent_blockhash()),
    };
    if !lands {
        // As a validator with skipPreflight: accepted, never lands.
        return Ok(json!(signature.to_string()));
    }
    if let Some(account) = durable_nonce_account(&tx) {
        chain.nonces_advanced.insert(account);
    }
    match chain.svm.send_transaction(tx) {
        Ok(_) => {
            chain.statuses.insert(signature, (chain.slot, None));
            Ok(json!(signature.to_string()))
        }
        Err(failed) => {
            let error = format!("{:?}", failed.err);
            if error.contains("Signature")
                || error.contains("Sanitize")
                || error.contains("AccountNotFound")
            {
                // Refused before execution: never lands.
                return Err((-32002, format!("Transaction simulation failed: {error}")));
            }
            chain.statuses.insert(signature, (chain.slot, Some(error)));
            Ok(json!(signature.to_string()))
        }
    }
}

/// The nonce account of a durable-nonce transaction: its first instruction advances that
/// account (system instruction 4), and its "blockhash" is the account's nonce value.
fn durable_nonce_account(tx: &VersionedTransaction) -> Option<Pubkey> {
    let message = &tx.message;
    let first = message.instructions().first()?;
    let keys = message.static_account_keys();
    let advances = keys.get(usize::from(first.program_id_index)) == Some(&Pubkey::default())
        && first.data.get(..4) == Some(&4u32.to_le_bytes()[..]);
    advances
        .then(|| keys.get(usize::from(*first.accounts.first()?)).copied())
        .flatten()
}
