//! A simulated EVM chain: accounts' nonces, a mempool that replaces by fee, blocks with a gas
//! limit, and reorganisations of the last blocks. Blocks hold the signed bytes sent to it,
//! decoded with the product's own decoder.

use rand::Rng;
use rand::rngs::StdRng;
use sigcast_evm::{Address, Fees, decode_signed};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// A transaction on the chain or in its pool.
#[derive(Debug, Clone)]
pub(crate) struct Tx {
    /// 0x-hex, lowercase.
    pub(crate) hash: String,
    /// Who signed it.
    pub(crate) from: Address,
    /// Its nonce.
    pub(crate) nonce: u64,
    /// Its fee cap per gas.
    pub(crate) max_fee: u128,
    /// Its tip cap per gas.
    pub(crate) tip: u128,
}

/// A block.
#[derive(Debug)]
pub(crate) struct Block {
    /// Its number.
    pub(crate) number: u64,
    /// Its hash (made up, unique).
    pub(crate) hash: String,
    /// Its transactions, in order.
    pub(crate) txs: Vec<Tx>,
    /// Each sender's transaction count after this block.
    pub(crate) nonces: HashMap<Address, u64>,
    /// The base fee when it was made, as its header shows.
    pub(crate) base_fee: u128,
}

/// The canonical chain and the pool.
pub(crate) struct Chain {
    /// Canonical blocks; `blocks[0]` is genesis.
    pub(crate) blocks: Vec<Arc<Block>>,
    /// Pending transactions by (sender, nonce).
    pub(crate) pool: BTreeMap<(Address, u64), Tx>,
    /// The base fee, per gas.
    pub(crate) base_fee: u128,
    /// Most transactions a block holds.
    pub(crate) gas_limit: usize,
    made: u64,
}

impl Chain {
    /// A chain with only its genesis block.
    pub(crate) fn new(gas_limit: usize) -> Self {
        let mut chain = Self {
            blocks: Vec::new(),
            pool: BTreeMap::new(),
            base_fee: 1_000_000_000,
            gas_limit,
            made: 0,
        };
        let genesis = chain.block(0, Vec::new(), HashMap::new());
        chain.blocks.push(Arc::new(genesis));
        chain
    }

    fn block(&mut self, number: u64, txs: Vec<Tx>, mut nonces: HashMap<Address, u64>) -> Block {
        self.made += 1;
        for tx in &txs {
            nonces.insert(tx.from, tx.nonce + 1);
        }
        Block {
            number,
            hash: format!("0x{:064x}", self.made * 1_000_003 + number),
            txs,
            nonces,
            base_fee: self.base_fee,
        }
    }

    /// The head block.
    pub(crate) fn head(&self) -> &Arc<Block> {
        self.blocks.last().expect("genesis")
    }

    /// The account's transaction count after the head.
    pub(crate) fn nonce(&self, account: &Address) -> u64 {
        self.head().nonces.get(account).copied().unwrap_or(0)
    }

    /// Takes a signed transaction into the pool, as a node's `eth_sendRawTransaction` does.
    /// The error is the node's words.
    pub(crate) fn submit(&mut self, raw: &[u8]) -> Result<String, String> {
        let decoded = decode_signed(raw).ok_or("rlp: invalid transaction")?;
        let (max_fee, tip) = match decoded.params.fees {
            Fees::Eip1559 {
                max_fee_per_gas,
                max_priority_fee_per_gas,
            } => (max_fee_per_gas, max_priority_fee_per_gas),
            Fees::Legacy { gas_price } => (gas_price, gas_price),
        };
        let tx = Tx {
            hash: decoded.hash.to_string(),
            from: decoded.from,
            nonce: decoded.params.nonce,
            max_fee,
            tip,
        };
        if tx.nonce < self.nonce(&tx.from) {
            return Err("nonce too low".into());
        }
        if let Some(pending) = self.pool.get(&(tx.from, tx.nonce)) {
            if pending.hash == tx.hash {
                return Err("already known".into());
            }
            if tx.max_fee < pending.max_fee + pending.max_fee / 10
                || tx.tip < pending.tip + pending.tip / 10
            {
                return Err("replacement transaction underpriced".into());
            }
        }
        if tx.max_fee < self.base_fee {
            return Err("max fee per gas less than block base fee".into());
        }
        let hash = tx.hash.clone();
        self.pool.insert((tx.from, tx.nonce), tx);
        Ok(hash)
    }

    /// Mines one block from the pool: each sender's transactions in nonce order from its next
    /// nonce, those paying the base fee, up to the gas limit.
    pub(crate) fn mine(&mut self, rng: &mut StdRng) {
        let parent = self.head().clone();
        let mut nonces = parent.nonces.clone();
        let mut txs = Vec::new();
        let mut senders: Vec<Address> = self.pool.keys().map(|(a, _)| *a).collect();
        senders.dedup();
        // A random order of senders: which account gets block space first varies.
        for i in (1..senders.len()).rev() {
            senders.swap(i, rng.gen_range(0..=i));
        }
        for sender in senders {
            loop {
                if txs.len() >= self.gas_limit {
                    break;
                }
                let next = nonces.get(&sender).copied().unwrap_or(0);
                let Some(tx) = self.pool.get(&(sender, next)) else {
                    break;
                };
                if tx.max_fee < self.base_fee {
                    break;
                }
                let tx = self.pool.remove(&(sender, next)).expect("just seen");
                nonces.insert(sender, next + 1);
                txs.push(tx);
            }
        }
        // Stale transactions (their nonce used) leave the pool.
        self.pool
            .retain(|(sender, nonce), _| *nonce >= nonces.get(sender).copied().unwrap_or(0));
        let block = self.block(parent.number + 1, txs, parent.nonces.clone());
        self.blocks.push(Arc::new(block));
    }

    /// Replaces the last `depth` blocks with `depth + 1` new ones. Each transaction of the
    /// dropped blocks goes back to the pool with probability `requeue` (nodes do not always
    /// re-add them), and `extra` (another sender's transactions, say) is added to the pool
    /// first, so the new blocks may hold something else at the same nonces.
    pub(crate) fn reorg(&mut self, depth: usize, requeue: f64, extra: Vec<Tx>, rng: &mut StdRng) {
        let depth = depth.min(self.blocks.len() - 1);
        let dropped: Vec<Arc<Block>> = self.blocks.split_off(self.blocks.len() - depth);
        for tx in extra {
            self.pool.insert((tx.from, tx.nonce), tx);
        }
        for block in dropped {
            for tx in &block.txs {
                if rng.gen_bool(requeue) {
                    self.pool
                        .entry((tx.from, tx.nonce))
                        .or_insert_with(|| tx.clone());
                }
            }
        }
        for _ in 0..=depth {
            self.mine(rng);
        }
    }

    /// Drops a random pending transaction, as a node evicting from its pool does.
    pub(crate) fn evict(&mut self, rng: &mut StdRng) {
        if self.pool.is_empty() {
            return;
        }
        let key = *self
            .pool
            .keys()
            .nth(rng.gen_range(0..self.pool.len()))
            .expect("in range");
        self.pool.remove(&key);
    }
}
