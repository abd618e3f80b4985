//! How recent EVM blocks' transactions executed, read from a node once for every broadcaster
//! replica. Replicas divide the work by account, so every block holds operations of each of
//! them; without this each one read every block's whole receipt list from the node.
//!
//! Layout under the root subspace:
//! - `("block_outcomes", chain, number, hash)` → either `R` and a replica's id (8 bytes): that
//!   replica is reading the block's receipt list now; or `O`, the digest of the block's
//!   transaction hashes in block order (32 bytes), and one byte per transaction in that
//!   order, 1 where it succeeded and 0 where it reverted: the outcomes, as that list showed
//!   them. Each outcome published clears the chain's blocks more than [`KEEP_BLOCKS`] below
//!   it.
//!
//! Outcomes are taken only with a header of the block, read by its hash, whose transactions
//! give the same digest (see `sigcast_evm::evidence`).

use crate::kv::{KvRead, KvTransaction};
use crate::tuple::Subspace;
use crate::{Error, Result};

/// Blocks below the newest published whose outcomes are kept: more than a replica walks down
/// from its head (24 blocks).
pub const KEEP_BLOCKS: u64 = 64;

/// Most transactions of a block whose outcomes are kept: one byte each, within a value's
/// 100,000 bytes. A larger block is read by each replica from its node, as without this.
pub const MAX_TRANSACTIONS: usize = 90_000;

/// The digest's length.
const DIGEST: usize = 32;

const READING: u8 = b'R';
const OUTCOMES: u8 = b'O';

/// What the store holds of a block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// A replica is reading its list (that replica's id).
    Reading(u64),
    /// Outcomes: the digest of the transactions' hashes in block order, and whether each
    /// succeeded, in that order.
    Outcomes([u8; DIGEST], Vec<bool>),
}

/// A block of a chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block<'a> {
    /// CAIP-2 chain.
    pub chain: &'a str,
    /// Its number.
    pub number: u64,
    /// Its hash, as `0x`-prefixed lowercase hex.
    pub hash: &'a str,
}

fn key(root: &Subspace, block: Block<'_>) -> Vec<u8> {
    root.pack(&("block_outcomes", block.chain, block.number, block.hash))
}

fn corrupt(key: &[u8], reason: &str) -> Error {
    Error::Corrupt {
        what: "block outcomes",
        key: key.iter().map(|b| format!("{b:02x}")).collect(),
        reason: reason.into(),
    }
}

fn decode(key: &[u8], value: &[u8]) -> Result<Seen> {
    match value.split_first() {
        Some((&READING, id)) => {
            let id: [u8; 8] = id
                .try_into()
                .map_err(|_| corrupt(key, "a reader's id is not 8 bytes"))?;
            Ok(Seen::Reading(u64::from_be_bytes(id)))
        }
        Some((&OUTCOMES, value)) => {
            let (digest, outcomes) = value
                .split_first_chunk::<DIGEST>()
                .ok_or_else(|| corrupt(key, "shorter than a digest"))?;
            outcomes
                .iter()
                .map(|&byte| match byte {
                    0 => Ok(false),
                    1 => Ok(true),
                    _ => Err(corrupt(key, "an outcome is neither 0 nor 1")),
                })
                .collect::<Result<_>>()
                .map(|outcomes| Seen::Outcomes(*digest, outcomes))
        }
        _ => Err(corrupt(key, "neither a reader nor outcomes")),
    }
}

/// What the store holds of `block`.
pub fn seen(tx: &mut dyn KvRead, root: &Subspace, block: Block<'_>) -> Result<Option<Seen>> {
    let key = key(root, block);
    tx.get(&key)?.map(|value| decode(&key, &value)).transpose()
}

/// Claims `block`'s list for `replica` to read, unless another replica reads it or its
/// outcomes are in: returns what was there, `None` when the claim is made (or was already
/// `replica`'s).
pub fn claim(
    tx: &mut dyn KvTransaction,
    root: &Subspace,
    block: Block<'_>,
    replica: u64,
) -> Result<Option<Seen>> {
    match seen(tx, root, block)? {
        Some(Seen::Reading(id)) if id == replica => Ok(None),
        Some(other) => Ok(Some(other)),
        None => {
            let mut value = vec![READING];
            value.extend_from_slice(&replica.to_be_bytes());
            tx.set(&key(root, block), &value)?;
            Ok(None)
        }
    }
}

/// Publishes `block`'s outcomes as `replica` read them from its list (`digest` of its
/// transactions' hashes in block order, and whether each succeeded), and clears the chain's
/// blocks more than [`KEEP_BLOCKS`] below it. Outcomes already published stay as they are;
/// those of a block of more than [`MAX_TRANSACTIONS`] are not kept (the replica's claim is
/// given up).
pub fn publish(
    tx: &mut dyn KvTransaction,
    root: &Subspace,
    block: Block<'_>,
    replica: u64,
    digest: &[u8; DIGEST],
    outcomes: &[bool],
) -> Result<()> {
    if outcomes.len() > MAX_TRANSACTIONS {
        return give_up(tx, root, block, replica);
    }
    if !matches!(seen(tx, root, block)?, Some(Seen::Outcomes(..))) {
        let mut value = Vec::with_capacity(1 + DIGEST + outcomes.len());
        value.push(OUTCOMES);
        value.extend_from_slice(digest);
        value.extend(outcomes.iter().map(|&success| u8::from(success)));
        tx.set(&key(root, block), &value)?;
    }
    if let Some(below) = block.number.checked_sub(KEEP_BLOCKS) {
        tx.clear_range(
            &root.pack(&("block_outcomes", block.chain, 0_u64)),
            &root.pack(&("block_outcomes", block.chain, below)),
        )?;
    }
    Ok(())
}

/// Gives up `replica`'s claim on `block` (its list could not be read there), so that the
/// others read it without waiting for outcomes that will not come.
pub fn give_up(
    tx: &mut dyn KvTransaction,
    root: &Subspace,
    block: Block<'_>,
    replica: u64,
) -> Result<()> {
    if seen(tx, root, block)? == Some(Seen::Reading(replica)) {
        tx.clear(&key(root, block))?;
    }
    Ok(())
}
