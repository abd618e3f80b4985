//! A simulated Solana cluster: slots (some skipped) and block heights, a blockhash per block
//! that a transaction may carry until `max_age` blocks later, durable-nonce accounts that a
//! landing advances, a leader's queue of transactions, executions that fail (fee paid, nonce
//! advanced, nothing moved), and forks that drop the unconfirmed tip. The transactions are the
//! signer's real wire bytes, decoded with the Solana crates.

use rand::Rng;
use rand::rngs::StdRng;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Blocks between the tip and the last finalized block.
pub(crate) const FINAL_DEPTH: usize = 4;

/// A transaction as the cluster reads it.
#[derive(Debug, Clone)]
pub(crate) struct SolTx {
    /// Its first signature, base58.
    pub(crate) signature: String,
    /// Its blockhash field: a recent blockhash, or a durable nonce's value.
    pub(crate) blockhash: [u8; 32],
    /// The nonce account its first instruction advances, if it carries a durable nonce.
    pub(crate) nonce_account: Option<[u8; 32]>,
    /// Whether it moves lamports (a cancel, or another holder's advance, does not).
    pub(crate) transfers: bool,
}

/// A transaction in a block.
#[derive(Debug, Clone)]
pub(crate) struct Landed {
    /// The transaction.
    pub(crate) tx: SolTx,
    /// Its execution error: it landed all the same (fee paid, nonce advanced, nothing moved).
    pub(crate) err: Option<String>,
}

/// A block of the fork the cluster is on.
#[derive(Debug)]
pub(crate) struct SolBlock {
    pub(crate) slot: u64,
    pub(crate) height: u64,
    pub(crate) hash: [u8; 32],
    pub(crate) txs: Vec<Landed>,
    /// Every nonce account's value after this block.
    pub(crate) nonces: BTreeMap<[u8; 32], [u8; 32]>,
}

/// The cluster.
pub(crate) struct Cluster {
    /// The fork it is on, from genesis.
    pub(crate) blocks: Vec<Arc<SolBlock>>,
    /// The last slot, with a block or skipped.
    pub(crate) slot: u64,
    /// Transactions the leaders hold.
    pub(crate) queue: Vec<SolTx>,
    /// Durable-nonce accounts and their authorities.
    pub(crate) authorities: BTreeMap<[u8; 32], [u8; 32]>,
    /// Blocks a blockhash lives for.
    pub(crate) max_age: u64,
    /// Most transactions per block.
    pub(crate) per_block: usize,
    /// Share of transfers whose execution fails.
    pub(crate) fail_rate: f64,
    hashes: u64,
    /// The height of the last tip abandoned.
    forked_height: u64,
}

impl Cluster {
    /// A cluster at genesis with `nonce_accounts` (account, authority) initialized.
    pub(crate) fn new(
        nonce_accounts: &[([u8; 32], [u8; 32])],
        max_age: u64,
        per_block: usize,
        fail_rate: f64,
    ) -> Self {
        let mut cluster = Self {
            blocks: Vec::new(),
            slot: 0,
            queue: Vec::new(),
            authorities: nonce_accounts.iter().copied().collect(),
            max_age,
            per_block,
            fail_rate,
            hashes: 0,
            forked_height: 0,
        };
        let hash = cluster.new_hash();
        let nonces = nonce_accounts
            .iter()
            .map(|(account, _)| (*account, derived(&hash, account)))
            .collect();
        cluster.blocks.push(Arc::new(SolBlock {
            slot: 0,
            height: 0,
            hash,
            txs: Vec::new(),
            nonces,
        }));
        cluster
    }

    fn new_hash(&mut self) -> [u8; 32] {
        self.hashes += 1;
        let mut hash = [0u8; 32];
        hash[..8].copy_from_slice(&self.hashes.to_be_bytes());
        hash[8] = 0x5a;
        hash
    }

    /// The tip.
    pub(crate) fn tip(&self) -> &Arc<SolBlock> {
        self.blocks.last().expect("genesis")
    }

    /// Whether `tx` could land in the next block: its blockhash lives (or its nonce value is
    /// the account's) and it has not landed on this fork.
    pub(crate) fn could_land(&self, tx: &SolTx) -> bool {
        self.lands_after(tx, &self.tip().nonces, &[])
    }

    /// Whether `tx` could land in the block after the tip, with `nonces` and `landed` so far
    /// in that block.
    fn lands_after(
        &self,
        tx: &SolTx,
        nonces: &BTreeMap<[u8; 32], [u8; 32]>,
        landed: &[Landed],
    ) -> bool {
        let next_height = self.tip().height + 1;
        let lives = match tx.nonce_account {
            Some(account) => nonces.get(&account) == Some(&tx.blockhash),
            None => self
                .blocks
                .iter()
                .rev()
                .take_while(|b| b.height + self.max_age >= next_height)
                .any(|b| b.hash == tx.blockhash),
        };
        lives
            && self.landed(&tx.signature).is_none()
            && !landed.iter().any(|l| l.tx.signature == tx.signature)
    }

    /// Where a signature landed on this fork: (slot, error).
    pub(crate) fn landed(&self, signature: &str) -> Option<(u64, Option<String>)> {
        self.blocks.iter().find_map(|b| {
            b.txs
                .iter()
                .find(|t| t.tx.signature == signature)
                .map(|t| (b.slot, t.err.clone()))
        })
    }

    /// Takes a transaction for the leaders: refused with the message a node gives if it
    /// cannot land.
    pub(crate) fn submit(&mut self, tx: SolTx) -> Result<String, String> {
        if self.landed(&tx.signature).is_some() {
            return Err(
                "Transaction simulation failed: This transaction has already been processed".into(),
            );
        }
        if !self.could_land(&tx) {
            return Err("Transaction simulation failed: Blockhash not found".into());
        }
        let signature = tx.signature.clone();
        if !self.queue.iter().any(|q| q.signature == signature) {
            self.queue.push(tx);
        }
        Ok(signature)
    }

    /// The next slot: skipped, or a block with what the leader takes from its queue.
    pub(crate) fn produce(&mut self, rng: &mut StdRng) {
        self.slot += 1;
        if rng.gen_bool(0.1) {
            return; // a skipped slot: no block, no height
        }
        let hash = self.new_hash();
        let mut nonces = self.tip().nonces.clone();
        let mut txs: Vec<Landed> = Vec::new();
        let mut queue = std::mem::take(&mut self.queue);
        for i in (1..queue.len()).rev() {
            queue.swap(i, rng.gen_range(0..=i));
        }
        let mut kept = Vec::new();
        for tx in queue {
            if !self.lands_after(&tx, &nonces, &txs) {
                // Expired, its nonce advanced, or landed: it never can; the leader drops it.
                continue;
            }
            if txs.len() >= self.per_block {
                kept.push(tx);
                continue;
            }
            if let Some(account) = tx.nonce_account {
                nonces.insert(account, derived(&hash, &account));
            }
            let err = (tx.transfers && rng.gen_bool(self.fail_rate))
                .then(|| r#"{"InstructionError":[2,{"Custom":1}]}"#.to_owned());
            txs.push(Landed { tx, err });
        }
        self.queue = kept;
        let height = self.tip().height + 1;
        self.blocks.push(Arc::new(SolBlock {
            slot: self.slot,
            height,
            hash,
            txs,
            nonces,
        }));
    }

    /// The unconfirmed tip is abandoned for another fork; its transactions go back to the
    /// leaders' queue, or are lost.
    pub(crate) fn fork(&mut self, rng: &mut StdRng) {
        // Only a tip made since the last fork: the block under an abandoned tip was shown as
        // confirmed, and optimistic confirmation is final here.
        if self.blocks.len() <= FINAL_DEPTH + 1 || self.tip().height < self.forked_height {
            return;
        }
        self.forked_height = self.tip().height;
        let dropped = self.blocks.pop().expect("more than genesis");
        for landed in &dropped.txs {
            if rng.gen_bool(0.7) {
                self.queue.push(landed.tx.clone());
            }
        }
    }

    /// The leaders lose part of their queue.
    pub(crate) fn drop_queued(&mut self, rng: &mut StdRng) {
        self.queue.retain(|_| rng.gen_bool(0.5));
    }
}

/// A nonce account's value after a block advanced it: derived from the block's hash and the
/// account, so two accounts advanced in one block differ, and no value comes twice.
fn derived(block: &[u8; 32], account: &[u8; 32]) -> [u8; 32] {
    let mut value = [0u8; 32];
    for i in 0..32 {
        value[i] = block[i] ^ account[(i + 7) % 32].rotate_left(3) ^ 0xa5;
    }
    value
}
