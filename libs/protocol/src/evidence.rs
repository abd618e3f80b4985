//! What the chain showed, as plain data: one view per endpoint, every field of a view read
//! from that endpoint alone, `None` where it could not be read.

use std::fmt;

/// A block as one endpoint showed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockRef {
    /// Its number (EVM) or height (Solana).
    pub number: u64,
    /// Its hash: the lowercase 0x-hex of its 32 bytes.
    pub hash: String,
}

/// What one endpoint showed of an EVM operation's nonce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvmView {
    /// The endpoint (scheme://host:port).
    pub endpoint: String,
    /// Its head when the reads began.
    pub head: BlockRef,
    /// The account's transaction count at `head`; `None` where it could not be read.
    pub account_nonce: Option<u64>,
    /// The base fee per gas of the head block, in wei (EIP-1559); `None` where its header
    /// carries none.
    pub base_fee: Option<u128>,
    /// The transaction that used the operation's nonce, found by a receipt of one of its
    /// attempts or in the block where the account's nonce passed it; `None` where none was
    /// found (which proves nothing).
    pub landed: Option<EvmLanded>,
}

/// A transaction of the account at the operation's nonce, seen in a block: positive proof
/// of what used the nonce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvmLanded {
    /// Its hash (0x-hex, lowercase).
    pub tx: String,
    /// The block that holds it.
    pub block: BlockRef,
    /// The hash of the endpoint's canonical block at that number, read after the inclusion
    /// was seen: equal to `block.hash` when the inclusion is on its canonical chain.
    pub canonical_hash: Option<String>,
    /// Its execution status (receipt `status`), where its receipt was read.
    pub success: Option<bool>,
    /// A block above `block` that the endpoint linked to it parent hash by parent hash: the
    /// depth proven on one chain. A head and an inclusion read apart prove none: nodes behind
    /// one URL (a load balancer) may each answer from a chain of their own, the head from one
    /// that never held the block. `None` where no link was read (depth 1 needs none).
    pub descendant: Option<BlockRef>,
}

impl EvmLanded {
    /// Whether its block is the endpoint's canonical block at that number.
    pub fn is_canonical(&self) -> bool {
        self.canonical_hash.as_deref() == Some(self.block.hash.as_str())
    }
}

/// Solana commitment levels sigcast reads at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Commitment {
    /// Processed by the node, may be rolled back.
    Processed,
    /// Voted on by a supermajority.
    Confirmed,
    /// Rooted: no fork can remove it.
    Finalized,
}

impl Commitment {
    /// The RPC name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Processed => "processed",
            Self::Confirmed => "confirmed",
            Self::Finalized => "finalized",
        }
    }

    /// Parses an RPC name; anything unknown is the weakest, `processed`.
    pub fn parse(text: &str) -> Self {
        match text {
            "finalized" => Self::Finalized,
            "confirmed" => Self::Confirmed,
            _ => Self::Processed,
        }
    }
}

impl fmt::Display for Commitment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A landed Solana transaction's status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureStatus {
    /// The slot it landed in.
    pub slot: u64,
    /// Its execution error, if it failed (it landed all the same: fee paid, not retried).
    pub err: Option<String>,
    /// How final its landing is.
    pub confirmation: Commitment,
}

/// What one endpoint showed of a Solana operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SolanaView {
    /// The endpoint (scheme://host:port).
    pub endpoint: String,
    /// The commitment of `block_height` and `nonce_value`.
    pub commitment: Commitment,
    /// The block height at `commitment`.
    pub block_height: Option<u64>,
    /// The slot `block_height` is of (read with it, `getEpochInfo`).
    pub height_slot: Option<u64>,
    /// The oldest slot the endpoint's history reaches (the later of `minimumLedgerSlot` and
    /// `getFirstAvailableBlock`), read after `statuses`: statuses of transactions before it
    /// may be forgotten, also while they were being read.
    pub first_available_slot: Option<u64>,
    /// The durable-nonce account's value (base58) at `commitment`, for an operation that uses
    /// one; `Some(None)` when the account is missing or not an initialized nonce.
    pub nonce_value: Option<Option<String>>,
    /// The slot `nonce_value` was read at (its answer's context). A value other than the
    /// signed one proves an advance past it only if read at or after the signing slot: read
    /// earlier, at a more final commitment than the signature's, it may be an older value.
    pub nonce_slot: Option<u64>,
    /// The statuses of the operation's attempts' signatures, in attempt order, read after the
    /// height and the nonce account, searching the whole history. `None` unless the endpoint answered
    /// exactly one entry per signature asked.
    pub statuses: Option<Vec<Option<SignatureStatus>>>,
    /// The slot the node that answered `statuses` had reached (its answer's context). A node
    /// that had not reached the slot the expiry or the advance was read at may not know of a
    /// landing before it, and behind one URL (a load balancer) the statuses may come from
    /// another node than the height.
    pub statuses_slot: Option<u64>,
}

/// Everything read for one decision.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Evidence {
    /// Nothing read (yet).
    #[default]
    None,
    /// EVM views, one per endpoint read.
    Evm(Vec<EvmView>),
    /// Solana views, one per endpoint read.
    Solana(Vec<SolanaView>),
}

impl Evidence {
    /// How many endpoints were read.
    pub fn endpoints_read(&self) -> usize {
        match self {
            Self::None => 0,
            Self::Evm(views) => views.len(),
            Self::Solana(views) => views.len(),
        }
    }
}
