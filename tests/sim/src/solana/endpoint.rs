//! Simulated JSON-RPC endpoints of the Solana cluster. Each keeps its own copy of the fork,
//! synced now and then (so it may lag or freeze), answers the reads the product makes — block
//! height, nonce accounts, signature statuses and the latest blockhash at a commitment, the
//! first slot its history reaches — and forwards sends to the leaders, or loses them before or
//! after they were taken. Faults real nodes show: a history pruned to its last slots (statuses
//! older than it come back null), statuses of its newest blocks not indexed yet, an answer
//! with fewer statuses than asked, one of the two history methods unsupported.

use super::cluster::{Cluster, FINAL_DEPTH, SolBlock, SolTx};
use crate::node::{answer_delay, lossy_send, refused};
use base64::Engine;
use serde_json::{Value, json};
use sigcast_jsonrpc::{Endpoint, RpcError};
use std::sync::{Arc, Mutex};

/// How an endpoint misbehaves now.
#[derive(Debug, Clone, Default)]
pub(crate) struct SolFaults {
    /// Stays this many blocks behind the cluster's tip when it syncs.
    pub(crate) lag: usize,
    /// Does not sync at all.
    pub(crate) frozen: bool,
    /// Answers nothing.
    pub(crate) down: bool,
    /// Each answer takes up to this long (simulated ms).
    pub(crate) slow_ms: u64,
    /// Its history keeps only the slots this far below its tip (what it pruned stays pruned
    /// when this fault ends).
    pub(crate) history_slots: Option<u64>,
    /// Statuses of its newest this-many blocks are not indexed yet (fewer than the finality
    /// depth: a rooted block's statuses are always there).
    pub(crate) statuses_behind: usize,
    /// Answers one status fewer than asked.
    pub(crate) short_statuses: bool,
    /// Behind its one URL (a load balancer), its statuses come from another node this many
    /// blocks behind, at times past the finality depth; that node's answer says how far it
    /// got (its context slot).
    pub(crate) balanced_behind: usize,
    /// Does not support `minimumLedgerSlot` (answers only `getFirstAvailableBlock`).
    pub(crate) no_minimum_ledger_slot: bool,
    /// Share of sends lost before they reach the leaders.
    pub(crate) lose_before: f64,
    /// Share of sends taken whose reply is lost.
    pub(crate) lose_after: f64,
}

/// One endpoint's state.
pub(crate) struct SolNode {
    blocks: Vec<Arc<SolBlock>>,
    /// The first slot it keeps: a node prunes forward only, and what it pruned stays gone.
    pruned_to: u64,
    max_age: u64,
    authorities: std::collections::BTreeMap<[u8; 32], [u8; 32]>,
    pub(crate) faults: SolFaults,
    rng: rand::rngs::StdRng,
}

impl SolNode {
    /// Catches up with the cluster, less its lag; nothing when frozen.
    pub(crate) fn sync(&mut self, cluster: &Cluster) {
        if self.faults.frozen {
            return;
        }
        let target = cluster.blocks.len().saturating_sub(self.faults.lag).max(1);
        self.blocks = cluster.blocks[..target].to_vec();
    }

    fn at(&self, commitment: &str) -> &Arc<SolBlock> {
        let behind = match commitment {
            "processed" => 0,
            "finalized" => FINAL_DEPTH,
            _ => 1,
        };
        &self.blocks[self.blocks.len().saturating_sub(behind + 1)]
    }

    /// Prunes its history to its last `history_slots` slots, if it keeps so few now.
    fn prune(&mut self) {
        let tip = self.blocks.last().expect("genesis").slot;
        if let Some(kept) = self.faults.history_slots {
            self.pruned_to = self.pruned_to.max(tip.saturating_sub(kept));
        }
    }

    fn first_available_slot(&self) -> u64 {
        self.pruned_to
    }

    /// How many of its blocks the node answering statuses has indexed.
    fn statuses_indexed(&self) -> usize {
        let behind = self.faults.statuses_behind.max(self.faults.balanced_behind);
        self.blocks.len().saturating_sub(behind).max(1)
    }

    fn status(&self, signature: &str) -> Value {
        let first = self.first_available_slot();
        let indexed = self.statuses_indexed();
        let confirmed = self.at("confirmed").slot;
        let finalized = self.at("finalized").slot;
        for block in &self.blocks[..indexed] {
            if block.slot < first {
                continue;
            }
            if let Some(landed) = block.txs.iter().find(|l| l.tx.signature == signature) {
                let confirmation = if block.slot <= finalized {
                    "finalized"
                } else if block.slot <= confirmed {
                    "confirmed"
                } else {
                    "processed"
                };
                let err: Value = match &landed.err {
                    Some(e) => serde_json::from_str(e).unwrap_or(Value::Null),
                    None => Value::Null,
                };
                return json!({
                    "slot": block.slot,
                    "confirmations": null,
                    "err": err,
                    "confirmationStatus": confirmation,
                });
            }
        }
        Value::Null
    }

    fn read(&self, method: &str, params: &Value, tip_slot: u64) -> Result<Value, String> {
        let commitment = |i: usize| {
            params[i]["commitment"]
                .as_str()
                .unwrap_or("finalized")
                .to_owned()
        };
        let context = json!({ "slot": tip_slot });
        match method {
            "minimumLedgerSlot" if self.faults.no_minimum_ledger_slot => {
                Err("Method not found".into())
            }
            "minimumLedgerSlot" | "getFirstAvailableBlock" => {
                Ok(json!(self.first_available_slot()))
            }
            "getBlockHeight" => Ok(json!(self.at(&commitment(0)).height)),
            "getEpochInfo" => {
                let block = self.at(&commitment(0));
                Ok(json!({ "absoluteSlot": block.slot, "blockHeight": block.height }))
            }
            "getLatestBlockhash" => {
                let block = self.at(&commitment(0));
                Ok(json!({ "context": context, "value": {
                    "blockhash": bs58::encode(block.hash).into_string(),
                    "lastValidBlockHeight": block.height + self.max_age,
                }}))
            }
            "getAccountInfo" => {
                let account = params[0]
                    .as_str()
                    .and_then(|a| bs58::decode(a).into_vec().ok())
                    .and_then(|a| <[u8; 32]>::try_from(a).ok())
                    .ok_or("invalid pubkey")?;
                let block = self.at(&commitment(1));
                let value = match (block.nonces.get(&account), self.authorities.get(&account)) {
                    (Some(value), Some(authority)) => {
                        let mut data = vec![0u8; sigcast_solana::NONCE_ACCOUNT_SIZE];
                        data[0] = 1;
                        data[4] = 1;
                        data[8..40].copy_from_slice(authority);
                        data[40..72].copy_from_slice(value);
                        json!({
                            "data": [base64::engine::general_purpose::STANDARD.encode(data), "base64"],
                            "lamports": 1_447_680,
                            "owner": "11111111111111111111111111111111",
                            "executable": false,
                        })
                    }
                    _ => Value::Null,
                };
                Ok(json!({ "context": { "slot": block.slot }, "value": value }))
            }
            "getSignatureStatuses" => {
                let mut statuses: Vec<Value> = params[0]
                    .as_array()
                    .ok_or("no signatures")?
                    .iter()
                    .map(|s| self.status(s.as_str().unwrap_or_default()))
                    .collect();
                if self.faults.short_statuses {
                    statuses.pop();
                }
                // The node behind the balancer says the slot it had reached; a node whose
                // index lags says its own tip.
                let context = match self.faults.balanced_behind {
                    0 => context,
                    _ => json!({ "slot": self.blocks[self.statuses_indexed() - 1].slot }),
                };
                Ok(json!({ "context": context, "value": statuses }))
            }
            other => Err(format!("Method not found: {other}")),
        }
    }
}

/// One endpoint.
pub(crate) struct SolEndpoint {
    label: String,
    pub(crate) node: Mutex<SolNode>,
    cluster: Arc<Mutex<Cluster>>,
}

impl SolEndpoint {
    /// Endpoint number `index` of `cluster`.
    pub(crate) fn new(index: usize, cluster: Arc<Mutex<Cluster>>, rng: rand::rngs::StdRng) -> Self {
        let (max_age, authorities) = {
            let cluster = cluster.lock().unwrap();
            (cluster.max_age, cluster.authorities.clone())
        };
        let mut node = SolNode {
            blocks: Vec::new(),
            pruned_to: 0,
            max_age,
            authorities,
            faults: SolFaults::default(),
            rng,
        };
        node.sync(&cluster.lock().unwrap());
        Self {
            label: format!("http://solana-{index}:8899"),
            node: Mutex::new(node),
            cluster,
        }
    }

    fn answer(&self, method: &str, params: &Value) -> Result<Value, RpcError> {
        let endpoint = self.label.clone();
        let mut node = self.node.lock().unwrap();
        if node.faults.down {
            return Err(refused(&endpoint));
        }
        let node_error = |message: String| RpcError::Node {
            endpoint: endpoint.clone(),
            code: -32002,
            message,
        };
        if method == "sendTransaction" {
            let tx = params[0]
                .as_str()
                .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
                .and_then(|wire| decode(&wire, true))
                .ok_or_else(|| node_error("failed to deserialize transaction".into()))?;
            let losses = (node.faults.lose_before, node.faults.lose_after);
            let taken = lossy_send(&endpoint, &mut node.rng, losses, || {
                self.cluster.lock().unwrap().submit(tx)
            })?;
            return taken.map(Value::String).map_err(node_error);
        }
        node.prune();
        let tip_slot = node.blocks.last().expect("genesis").slot;
        node.read(method, params, tip_slot).map_err(node_error)
    }
}

impl Endpoint for SolEndpoint {
    fn label(&self) -> &str {
        &self.label
    }

    async fn request(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        let delay = {
            let mut node = self.node.lock().unwrap();
            let slow_ms = node.faults.slow_ms;
            answer_delay(slow_ms, &mut node.rng)
        };
        crate::exec::take_time(delay).await;
        self.answer(method, &params)
    }
}

/// A signed transaction's wire bytes as the cluster reads them; `None` if they do not parse
/// or (when `verify`) a signature does not verify.
pub(crate) fn decode(wire: &[u8], verify: bool) -> Option<SolTx> {
    let tx = sigcast_solana::from_wire(wire)?;
    if verify && !sigcast_solana::verify(&tx) {
        return None;
    }
    let message = &tx.message;
    let system = |index: u8| {
        message
            .account_keys
            .get(usize::from(index))
            .is_some_and(|k| k.to_bytes() == [0u8; 32])
    };
    let first = message.instructions.first()?;
    let nonce_account = (system(first.program_id_index) && first.data == 4u32.to_le_bytes())
        .then(|| {
            let index = *first.accounts.first()?;
            Some(message.account_keys.get(usize::from(index))?.to_bytes())
        })
        .flatten();
    let transfers = message
        .instructions
        .iter()
        .any(|ix| system(ix.program_id_index) && ix.data.starts_with(&2u32.to_le_bytes()));
    Some(SolTx {
        signature: bs58::encode(tx.signatures.first()?.as_ref()).into_string(),
        blockhash: message.recent_blockhash.to_bytes(),
        nonce_account,
        transfers,
    })
}
