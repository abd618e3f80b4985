//! Simulated JSON-RPC endpoints of the chain. Each keeps its own copy of the chain, synced
//! from the canonical one now and then (so it may lag, freeze, or still show blocks a reorg
//! removed), answers the reads the product's evidence readers make from that copy, and
//! forwards sends to the pool — or loses them, before or after the pool took them. Faults
//! that real nodes show: receipts indexed after the block's state is visible, receipts and
//! old state pruned.

use crate::chain::{Block, Chain};
use serde_json::{Value, json};
use sigcast_evm::Address;
use sigcast_jsonrpc::{Endpoint, RpcError};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// How an endpoint misbehaves now.
#[derive(Debug, Clone, Default)]
pub(crate) struct NodeFaults {
    /// Stays this many blocks behind the canonical head when it syncs.
    pub(crate) lag: u64,
    /// Does not sync at all.
    pub(crate) frozen: bool,
    /// Answers nothing (connection refused).
    pub(crate) down: bool,
    /// Receipts of its last this-many blocks are not readable yet, while their state is
    /// (state shows before receipts: an indexer behind, anvil under load).
    pub(crate) receipts_behind_state: u64,
    /// Each answer takes up to this long (simulated ms): the chain moves during a read.
    pub(crate) slow_ms: u64,
    /// Receipts of blocks this far below its head are pruned.
    pub(crate) receipts_kept: Option<u64>,
    /// State (the nonce at a block) this far below its head is pruned.
    pub(crate) state_kept: Option<u64>,
    /// Share of sends lost before they reach the pool (the client sees a reset).
    pub(crate) lose_before: f64,
    /// Share of sends taken by the pool whose reply is lost.
    pub(crate) lose_after: f64,
}

/// One endpoint's state.
pub(crate) struct NodeState {
    /// Its copy of the chain.
    pub(crate) blocks: Vec<Arc<Block>>,
    receipts: HashMap<String, (u64, usize)>,
    /// Its faults.
    pub(crate) faults: NodeFaults,
    /// Draws for lost sends.
    pub(crate) rng: rand::rngs::StdRng,
}

impl NodeState {
    /// A node that has synced nothing yet.
    pub(crate) fn new(chain: &Chain, rng: rand::rngs::StdRng) -> Self {
        let mut node = Self {
            blocks: Vec::new(),
            receipts: HashMap::new(),
            faults: NodeFaults::default(),
            rng,
        };
        node.sync(chain);
        node
    }

    /// Catches up with the canonical chain, less its lag; nothing when frozen.
    pub(crate) fn sync(&mut self, chain: &Chain) {
        if self.faults.frozen {
            return;
        }
        let target = (chain.blocks.len() as u64).saturating_sub(self.faults.lag + 1);
        // Keep the common prefix, then copy the canonical blocks after it.
        let mut common = 0;
        while common < self.blocks.len()
            && common < chain.blocks.len()
            && Arc::ptr_eq(&self.blocks[common], &chain.blocks[common])
        {
            common += 1;
        }
        let keep = common.min(target as usize + 1);
        if keep < self.blocks.len() {
            for block in self.blocks.drain(keep..) {
                for tx in &block.txs {
                    self.receipts.remove(&tx.hash);
                }
            }
        }
        while (self.blocks.len() as u64) <= target {
            let block = chain.blocks[self.blocks.len()].clone();
            for (i, tx) in block.txs.iter().enumerate() {
                self.receipts.insert(tx.hash.clone(), (block.number, i));
            }
            self.blocks.push(block);
        }
    }

    fn head(&self) -> &Arc<Block> {
        self.blocks.last().expect("genesis")
    }

    fn block_json(block: &Block, parent: &str, full: bool) -> Value {
        let txs: Vec<Value> = block
            .txs
            .iter()
            .map(|tx| {
                if full {
                    json!({
                        "hash": tx.hash,
                        "from": format!("{:#x}", tx.from),
                        "nonce": format!("0x{:x}", tx.nonce),
                    })
                } else {
                    json!(tx.hash)
                }
            })
            .collect();
        json!({
            "number": format!("0x{:x}", block.number),
            "hash": block.hash,
            "parentHash": parent,
            "baseFeePerGas": format!("0x{:x}", block.base_fee),
            "transactions": txs,
        })
    }

    /// The hash of the block before `block` in this node's chain.
    fn parent_of(&self, block: &Block) -> String {
        (block.number as usize)
            .checked_sub(1)
            .and_then(|parent| self.blocks.get(parent))
            .map_or_else(|| format!("0x{}", "00".repeat(32)), |b| b.hash.clone())
    }

    fn block_number(&self, tag: &Value) -> Option<u64> {
        match tag.as_str()? {
            "latest" | "pending" => Some(self.head().number),
            hex => u64::from_str_radix(hex.strip_prefix("0x")?, 16).ok(),
        }
    }

    /// One JSON-RPC read.
    fn read(&self, method: &str, params: &Value) -> Result<Value, String> {
        let head = self.head().number;
        match method {
            "eth_chainId" => Ok(json!("0x7a69")),
            "eth_blockNumber" => Ok(json!(format!("0x{head:x}"))),
            "eth_getBlockByNumber" => {
                let number = self.block_number(&params[0]).ok_or("bad block tag")?;
                let full = params[1].as_bool().unwrap_or(false);
                Ok(self.blocks.get(number as usize).map_or(Value::Null, |b| {
                    Self::block_json(b, &self.parent_of(b), full)
                }))
            }
            "eth_getBlockByHash" => {
                let hash = params[0].as_str().ok_or("bad hash")?.to_ascii_lowercase();
                let full = params[1].as_bool().unwrap_or(false);
                Ok(self
                    .blocks
                    .iter()
                    .find(|b| b.hash.to_ascii_lowercase() == hash)
                    .map_or(Value::Null, |b| {
                        Self::block_json(b, &self.parent_of(b), full)
                    }))
            }
            "eth_getTransactionCount" => {
                let account: Address = params[0]
                    .as_str()
                    .and_then(|a| a.parse().ok())
                    .ok_or("bad address")?;
                let number = self.block_number(&params[1]).ok_or("bad block tag")?;
                if number > head {
                    return Err("header not found".into());
                }
                if self
                    .faults
                    .state_kept
                    .is_some_and(|kept| number + kept < head)
                {
                    return Err("missing trie node".into());
                }
                let nonce = self.blocks[number as usize]
                    .nonces
                    .get(&account)
                    .copied()
                    .unwrap_or(0);
                Ok(json!(format!("0x{nonce:x}")))
            }
            "eth_getTransactionReceipt" => {
                let hash = params[0].as_str().ok_or("bad hash")?.to_ascii_lowercase();
                let Some(&(number, _)) = self.receipts.get(&hash) else {
                    return Ok(Value::Null);
                };
                let behind = number + self.faults.receipts_behind_state > head;
                let pruned = self
                    .faults
                    .receipts_kept
                    .is_some_and(|kept| number + kept < head);
                if behind || pruned {
                    return Ok(Value::Null);
                }
                let block = &self.blocks[number as usize];
                Ok(json!({
                    "transactionHash": hash,
                    "blockNumber": format!("0x{number:x}"),
                    "blockHash": block.hash,
                    "status": "0x1",
                }))
            }
            "eth_getBlockReceipts" => {
                // Indexed as receipts one by one are: nothing while they lag behind state or
                // once pruned (null, as a node answers for a block it has no receipts of).
                let number = self.block_number(&params[0]).ok_or("bad block tag")?;
                let behind = number + self.faults.receipts_behind_state > head;
                let pruned = self
                    .faults
                    .receipts_kept
                    .is_some_and(|kept| number + kept < head);
                let Some(block) = self
                    .blocks
                    .get(number as usize)
                    .filter(|_| !behind && !pruned)
                else {
                    return Ok(Value::Null);
                };
                Ok(Value::Array(
                    block
                        .txs
                        .iter()
                        .map(|tx| {
                            json!({
                                "transactionHash": tx.hash,
                                "blockNumber": format!("0x{number:x}"),
                                "blockHash": block.hash,
                                "status": "0x1",
                            })
                        })
                        .collect(),
                ))
            }
            "eth_getTransactionByHash" => {
                // Indexed with the block, ahead of receipts on a node that shows state before
                // receipts — except on one whose receipts are pruned too, where the index lags
                // with them (so that the search of blocks runs for our own transactions);
                // forgotten where receipts are pruned.
                let hash = params[0].as_str().ok_or("bad hash")?.to_ascii_lowercase();
                let Some(&(number, index)) = self.receipts.get(&hash) else {
                    return Ok(Value::Null);
                };
                let pruned = self
                    .faults
                    .receipts_kept
                    .is_some_and(|kept| number + kept < head);
                let behind = self.faults.receipts_kept.is_some()
                    && number + self.faults.receipts_behind_state > head;
                if behind || pruned {
                    return Ok(Value::Null);
                }
                let block = &self.blocks[number as usize];
                let tx = &block.txs[index];
                Ok(json!({
                    "hash": hash,
                    "from": format!("{:#x}", tx.from),
                    "nonce": format!("0x{:x}", tx.nonce),
                    "blockNumber": format!("0x{number:x}"),
                    "blockHash": block.hash,
                }))
            }
            other => Err(format!("the method {other} does not exist")),
        }
    }
}

/// One endpoint, as the product's readers and senders reach it.
#[derive(Clone)]
pub(crate) struct SimEndpoint {
    label: String,
    /// Its state.
    pub(crate) node: Arc<Mutex<NodeState>>,
    chain: Arc<Mutex<Chain>>,
    /// Another node behind the same URL (a load balancer), which answers about half its
    /// reads, each drawn: its head, a receipt or a block may come from either, the two on
    /// chains of their own when one lags, froze or still holds what a reorg removed.
    balanced: Option<Balanced>,
}

/// The other node behind a balanced endpoint's URL, and the draws that route reads to it.
#[derive(Clone)]
struct Balanced {
    node: Arc<Mutex<NodeState>>,
    route: Arc<Mutex<rand::rngs::StdRng>>,
}

impl SimEndpoint {
    /// Endpoint number `index` of `chain`.
    pub(crate) fn new(index: usize, chain: Arc<Mutex<Chain>>, rng: rand::rngs::StdRng) -> Self {
        let node = NodeState::new(&chain.lock().unwrap(), rng);
        Self {
            label: format!("http://node-{index}:8545"),
            node: Arc::new(Mutex::new(node)),
            chain,
            balanced: None,
        }
    }

    /// Puts `other`'s node behind this endpoint's URL too, reads routed by `route`.
    pub(crate) fn balance_with(&mut self, other: &SimEndpoint, route: rand::rngs::StdRng) {
        self.balanced = Some(Balanced {
            node: other.node.clone(),
            route: Arc::new(Mutex::new(route)),
        });
    }

    /// The endpoint's answer to `method` without parameters, at once: the signer's questions at
    /// start and before a chain's first signature, which take no simulated time and draw
    /// nothing (a seed's run changes only where they refuse a signature).
    pub(crate) fn answer_at_once(&self, method: &str) -> Result<Value, RpcError> {
        self.answer(method, &Value::Array(Vec::new()))
    }

    /// How long the endpoint takes to answer a request made now (drawn from its generator).
    pub(crate) fn answer_delay(&self) -> u64 {
        let mut node = self.node.lock().unwrap();
        let slow_ms = node.faults.slow_ms;
        answer_delay(slow_ms, &mut node.rng)
    }

    /// The endpoint's answer to a request, as it stands now.
    pub(crate) fn answer(&self, method: &str, params: &Value) -> Result<Value, RpcError> {
        let endpoint = self.label.clone();
        let mut node = self.node.lock().unwrap();
        if node.faults.down {
            return Err(refused(&endpoint));
        }
        if method == "eth_sendRawTransaction" {
            let raw = params[0]
                .as_str()
                .and_then(|h| sigcast_evm::hex::decode(h.strip_prefix("0x")?).ok())
                .unwrap_or_default();
            let losses = (node.faults.lose_before, node.faults.lose_after);
            let taken = lossy_send(&endpoint, &mut node.rng, losses, || {
                self.chain.lock().unwrap().submit(&raw)
            })?;
            return taken.map(Value::String).map_err(|message| RpcError::Node {
                endpoint,
                code: -32000,
                message,
            });
        }
        let other = self.balanced.as_ref().and_then(|balanced| {
            use rand::Rng;
            let routed = balanced.route.lock().unwrap().gen_bool(0.5);
            routed.then_some(&balanced.node)
        });
        let answered = match other {
            Some(other) => {
                drop(node);
                let other = other.lock().unwrap();
                if other.faults.down {
                    return Err(refused(&endpoint));
                }
                other.read(method, params)
            }
            None => node.read(method, params),
        };
        answered.map_err(|message| RpcError::Node {
            endpoint,
            code: -32000,
            message,
        })
    }
}

/// A send over a connection that may fail: lost before the node took it (`lose_before`), or
/// taken by `submit` with the reply lost (`lose_after`); the client sees a reset either way.
pub(crate) fn lossy_send<T>(
    endpoint: &str,
    rng: &mut rand::rngs::StdRng,
    (lose_before, lose_after): (f64, f64),
    submit: impl FnOnce() -> T,
) -> Result<T, RpcError> {
    use rand::Rng;
    let reset = || RpcError::Transport {
        endpoint: endpoint.to_owned(),
        message: "connection reset".into(),
        maybe_delivered: true,
    };
    if rng.gen_bool(lose_before) {
        return Err(reset());
    }
    let taken = submit();
    if rng.gen_bool(lose_after) {
        return Err(reset());
    }
    Ok(taken)
}

/// The longest a healthy endpoint takes to answer (simulated ms).
pub(crate) const HEALTHY_MS: u64 = 5;

/// How long an answer takes (simulated ms): up to `slow_ms`, at least up to [`HEALTHY_MS`].
pub(crate) fn answer_delay(slow_ms: u64, rng: &mut rand::rngs::StdRng) -> u64 {
    use rand::Rng;
    rng.gen_range(0..=slow_ms.max(HEALTHY_MS))
}

/// The answer of an endpoint that is down.
pub(crate) fn refused(endpoint: &str) -> RpcError {
    RpcError::Transport {
        endpoint: endpoint.to_owned(),
        message: "connection refused".into(),
        maybe_delivered: false,
    }
}

impl Endpoint for SimEndpoint {
    fn label(&self) -> &str {
        &self.label
    }

    async fn request(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        // A request takes time: the world may change before it is answered.
        crate::exec::take_time(self.answer_delay()).await;
        self.answer(method, &params)
    }
}
