//! How recent EVM blocks' transactions executed, read from a node once for every broadcaster
//! replica. Replicas divide the work by account, so every block holds operations of each of
//! them; without this each one read every block's whole receipt list from the node.
//!
//! Layout under the root subspace:
//! - `("block_outcomes", chain, number, hash)` → either `R` and a replica's id (8 bytes): that
//!   replica is reading the block's receipt list now; or `O` and one byte per transaction of
//!   the block, in block order, 1 where it succeeded and 0 where it reverted: the outcomes, as
//!   that list showed them. Only the newest [`KEEP_BLOCKS`] blocks of a chain stay: each
//!   outcome published clears the older ones.
//!
//! Outcomes are taken only with the block's header, read by its hash, which names the
//! transactions in that order (see `sigcast_evm::evidence`).

use crate::kv::{KvRead, KvTransaction};
use crate::tuple::Subspace;
use crate::{Error, Result};

/// Blocks below the newest published whose outcomes are kept: more than any replica walks
/// down from its head.
pub const KEEP_BLOCKS: u64 = 64;

/// Most transactions of a block whose outcomes are kept: one byte each, within a value's
/// 100,000 bytes. A larger block is read by each replica from its node, as without this.
pub const MAX_TRANSACTIONS: usize = 90_000;

const READING: u8 = b'R';
const OUTCOMES: u8 = b'O';

/// What the store holds of a block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// A replica is reading its list (that replica's id).
    Reading(u64),
    /// Whether each transaction succeeded, in block order.
    Outcomes(Vec<bool>),
}

fn key(root: &Subspace, chain: &str, number: u64, hash: &str) -> Vec<u8> {
    root.pack(&("block_outcomes", chain, number, hash))
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
        Some((&OUTCOMES, outcomes)) => outcomes
            .iter()
            .map(|&byte| match byte {
                0 => Ok(false),
                1 => Ok(true),
                _ => Err(corrupt(key, "an outcome is neither 0 nor 1")),
            })
            .collect::<Result<_>>()
            .map(Seen::Outcomes),
        _ => Err(corrupt(key, "neither a reader nor outcomes")),
    }
}

/// What the store holds of the chain's block `number` with `hash`.
pub fn seen(
    tx: &mut dyn KvRead,
    root: &Subspace,
    chain: &str,
    number: u64,
    hash: &str,
) -> Result<Option<Seen>> {
    let key = key(root, chain, number, hash);
    tx.get(&key)?.map(|value| decode(&key, &value)).transpose()
}

/// Claims the block's list for `replica` to read, unless another replica reads it or its
/// outcomes are in: returns what was there, `None` when the claim is made (or was already
/// `replica`'s).
pub fn claim(
    tx: &mut dyn KvTransaction,
    root: &Subspace,
    chain: &str,
    number: u64,
    hash: &str,
    replica: u64,
) -> Result<Option<Seen>> {
    match seen(tx, root, chain, number, hash)? {
        Some(Seen::Reading(id)) if id == replica => Ok(None),
        Some(other) => Ok(Some(other)),
        None => {
            let mut value = vec![READING];
            value.extend_from_slice(&replica.to_be_bytes());
            tx.set(&key(root, chain, number, hash), &value)?;
            Ok(None)
        }
    }
}

/// Publishes the block's outcomes, read from its list, and clears the chain's blocks more
/// than [`KEEP_BLOCKS`] below it. Outcomes already published stay as they are.
pub fn publish(
    tx: &mut dyn KvTransaction,
    root: &Subspace,
    chain: &str,
    number: u64,
    hash: &str,
    outcomes: &[bool],
) -> Result<()> {
    if outcomes.len() > MAX_TRANSACTIONS {
        return Ok(());
    }
    if !matches!(
        seen(tx, root, chain, number, hash)?,
        Some(Seen::Outcomes(_))
    ) {
        let mut value = Vec::with_capacity(outcomes.len() + 1);
        value.push(OUTCOMES);
        value.extend(outcomes.iter().map(|&success| u8::from(success)));
        tx.set(&key(root, chain, number, hash), &value)?;
    }
    if let Some(below) = number.checked_sub(KEEP_BLOCKS) {
        tx.clear_range(
            &root.pack(&("block_outcomes", chain, 0_u64)),
            &root.pack(&("block_outcomes", chain, below)),
        )?;
    }
    Ok(())
}

/// Gives up `replica`'s claim on the block (its list could not be read there), so that the
/// others read it without waiting for outcomes that will not come.
pub fn give_up(
    tx: &mut dyn KvTransaction,
    root: &Subspace,
    chain: &str,
    number: u64,
    hash: &str,
    replica: u64,
) -> Result<()> {
    if seen(tx, root, chain, number, hash)? == Some(Seen::Reading(replica)) {
        tx.clear(&key(root, chain, number, hash))?;
    }
    Ok(())
}
