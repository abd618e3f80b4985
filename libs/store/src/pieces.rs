//! Values larger than one store value may hold, split into pieces.
//!
//! FoundationDB refuses values over 100,000 bytes, and an operation record (a contract call
//! with 128 KiB of calldata, or one that grew by many attempts) or a signed payload can be
//! larger. Such a value is stored as an empty value at its own key and its bytes under
//! `("piece", key, n)`; a smaller one is stored as is. Stored records and payloads are never
//! empty, so an empty value always means "in pieces".

use crate::kv::{KvRead, KvTransaction};
use crate::tuple::Subspace;
use crate::{Error, Result};

/// Largest piece: under FoundationDB's value limit with room to spare.
pub(crate) const PIECE: usize = 90_000;

fn pieces(root: &Subspace, key: &[u8]) -> Subspace {
    root.subspace(&("piece", key))
}

/// Writes `value` at `key`, in pieces if it is large, replacing whatever was there.
pub(crate) fn set(
    tx: &mut dyn KvTransaction,
    root: &Subspace,
    key: &[u8],
    value: &[u8],
) -> Result<()> {
    let subspace = pieces(root, key);
    let (begin, end) = subspace.range();
    tx.clear_range(&begin, &end)?;
    if value.len() <= PIECE && !value.is_empty() {
        return tx.set(key, value);
    }
    tx.set(key, b"")?;
    for (n, piece) in value.chunks(PIECE).enumerate() {
        tx.set(&subspace.pack(&(n as i64,)), piece)?;
    }
    Ok(())
}

/// The whole value whose stored form at `key` is `stored`.
pub(crate) fn join(
    tx: &mut dyn KvRead,
    root: &Subspace,
    key: &[u8],
    stored: Vec<u8>,
) -> Result<Vec<u8>> {
    if !stored.is_empty() {
        return Ok(stored);
    }
    let (begin, end) = pieces(root, key).range();
    let parts = tx.get_range(&begin, &end, usize::MAX, false)?;
    if parts.is_empty() {
        return Err(Error::Corrupt {
            what: "split value",
            key: key.iter().map(|b| format!("{b:02x}")).collect(),
            reason: "stored in pieces, but no piece is there".into(),
        });
    }
    // One copy of each piece (a byte-by-byte flatten cost 70% of a simulated run with large
    // records).
    let mut whole = Vec::with_capacity(parts.iter().map(|(_, piece)| piece.len()).sum());
    for (_, piece) in parts {
        whole.extend_from_slice(&piece);
    }
    Ok(whole)
}

/// The whole value at `key`, if any.
pub(crate) fn get(tx: &mut dyn KvRead, root: &Subspace, key: &[u8]) -> Result<Option<Vec<u8>>> {
    match tx.get(key)? {
        Some(stored) => join(tx, root, key, stored).map(Some),
        None => Ok(None),
    }
}
