//! Per-account nonce allocation, the nonce interlock, and signed payloads.
//!
//! Layout under the root subspace:
//! - `("nonce_next", chain, account)` → u64: the next nonce the store will hand out;
//! - `("nonce_owner", chain, account, nonce)` → op_id: which operation owns a nonce. Written
//!   once, never moved: one operation per nonce, one nonce per operation;
//! - `("payload", op_id, attempt)` → signed transaction bytes. Read only by the broadcaster;
//!   never returned by the public API or logged;
//! - `("solana_nonce", cluster, authority, nonce_account)` → empty: the durable-nonce accounts
//!   a Solana key signs with;
//! - `("solana_nonce_holder", cluster, nonce_account)` → op_id: the operation whose
//!   transactions carry the account's current nonce. One operation at a time: the holder
//!   changes only once its operation is terminal.

use crate::kv::{KvRead, KvTransaction};
use crate::pieces;
use crate::tuple::Subspace;
use crate::{Error, Result};

/// A nonce handed to an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocation {
    /// The operation's nonce.
    pub nonce: u64,
    /// Set when the chain's nonce was ahead of the store's: someone else sent from this key.
    /// Holds (the store's next nonce, the chain's nonce); the nonces between were consumed
    /// outside sigcast.
    pub external_gap: Option<(u64, u64)>,
}

/// The interlock refused an allocation: the nonce already belongs to another operation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("nonce {nonce} of {account} on {chain} already belongs to operation {owner}")]
pub struct NonceTaken {
    /// Chain.
    pub chain: String,
    /// Account.
    pub account: String,
    /// Nonce.
    pub nonce: u64,
    /// The operation that owns it.
    pub owner: String,
}

fn next_key(root: &Subspace, chain: &str, account: &str) -> Vec<u8> {
    root.pack(&("nonce_next", chain, account))
}

fn owner_key(root: &Subspace, chain: &str, account: &str, nonce: u64) -> Vec<u8> {
    root.pack(&("nonce_owner", chain, account, nonce))
}

fn payload_key(root: &Subspace, op_id: &str, attempt: u32) -> Vec<u8> {
    root.pack(&("payload", op_id, i64::from(attempt)))
}

fn decode_u64(key: &[u8], bytes: Vec<u8>) -> Result<u64> {
    let array: [u8; 8] = bytes.try_into().map_err(|_| Error::Corrupt {
        what: "nonce counter",
        key: key.iter().map(|b| format!("{b:02x}")).collect(),
        reason: "not 8 bytes".into(),
    })?;
    Ok(u64::from_be_bytes(array))
}

/// The next nonce the store would allocate for an account, if it has allocated any.
pub fn next_nonce(
    tx: &mut dyn KvRead,
    root: &Subspace,
    chain: &str,
    account: &str,
) -> Result<Option<u64>> {
    let key = next_key(root, chain, account);
    tx.get(&key)?
        .map(|bytes| decode_u64(&key, bytes))
        .transpose()
}

/// Allocates the account's next nonce to `op_id`, in the caller's transaction.
///
/// The first nonce of an account comes from the chain (`chain_nonce`, its latest count of
/// included transactions); after that the store is authoritative. A chain nonce ahead of the
/// store means another sender used the key: the allocation continues at the chain's nonce and
/// reports the gap, for the caller to surface.
pub fn allocate_nonce(
    tx: &mut dyn KvTransaction,
    root: &Subspace,
    chain: &str,
    account: &str,
    op_id: &str,
    chain_nonce: u64,
) -> Result<Result<Allocation, NonceTaken>> {
    let stored_next = next_nonce(tx, root, chain, account)?;
    let (nonce, external_gap) = match stored_next {
        None => (chain_nonce, None),
        Some(next) if chain_nonce > next => (chain_nonce, Some((next, chain_nonce))),
        Some(next) => (next, None),
    };
    let owner = owner_key(root, chain, account, nonce);
    if let Some(existing) = tx.get(&owner)? {
        let existing = String::from_utf8_lossy(&existing).into_owned();
        if existing != op_id {
            return Ok(Err(NonceTaken {
                chain: chain.into(),
                account: account.into(),
                nonce,
                owner: existing,
            }));
        }
    }
    tx.set(&owner, op_id.as_bytes())?;
    tx.set(&next_key(root, chain, account), &(nonce + 1).to_be_bytes())?;
    Ok(Ok(Allocation {
        nonce,
        external_gap,
    }))
}

/// The operation owning a nonce, if any.
pub fn nonce_owner(
    tx: &mut dyn KvRead,
    root: &Subspace,
    chain: &str,
    account: &str,
    nonce: u64,
) -> Result<Option<String>> {
    Ok(tx
        .get(&owner_key(root, chain, account, nonce))?
        .map(|b| String::from_utf8_lossy(&b).into_owned()))
}

/// Stores an attempt's signed bytes. Refuses to overwrite different bytes: an attempt's
/// payload never changes once persisted.
pub fn put_payload(
    tx: &mut dyn KvTransaction,
    root: &Subspace,
    op_id: &str,
    attempt: u32,
    raw: &[u8],
) -> Result<bool> {
    let key = payload_key(root, op_id, attempt);
    match pieces::get(tx, root, &key)? {
        Some(existing) => Ok(existing == raw),
        None => {
            pieces::set(tx, root, &key, raw)?;
            Ok(true)
        }
    }
}

/// An attempt's signed bytes.
pub fn payload(
    tx: &mut dyn KvRead,
    root: &Subspace,
    op_id: &str,
    attempt: u32,
) -> Result<Option<Vec<u8>>> {
    pieces::get(tx, root, &payload_key(root, op_id, attempt))
}

fn spend_key(root: &Subspace, chain: &str, account: &str, at_millis: i64, op_id: &str) -> Vec<u8> {
    root.pack(&("spend", chain, account, at_millis, op_id))
}

/// Records that `op_id` committed `value` (32-byte big-endian) of `account` at `at_millis`,
/// for rolling-window limits. Idempotent by (time, op_id).
pub fn record_spend(
    tx: &mut dyn KvTransaction,
    root: &Subspace,
    chain: &str,
    account: &str,
    at_millis: i64,
    op_id: &str,
    value: &[u8; 32],
) -> Result<()> {
    tx.set(&spend_key(root, chain, account, at_millis, op_id), value)
}

/// The values `account` committed at or after `since_millis`.
pub fn spent_since(
    tx: &mut dyn KvRead,
    root: &Subspace,
    chain: &str,
    account: &str,
    since_millis: i64,
) -> Result<Vec<Vec<u8>>> {
    let begin = root.pack(&("spend", chain, account, since_millis));
    let (_, end) = root.subspace(&("spend", chain, account)).range();
    Ok(tx
        .get_range(&begin, &end, usize::MAX, false)?
        .into_iter()
        .map(|(_, v)| v)
        .collect())
}

fn audit_key(root: &Subspace, op_id: &str, attempt: u32) -> Vec<u8> {
    root.pack(&("audit", op_id, i64::from(attempt)))
}

/// Appends the audit record of a signature. Append-only: an existing record is never
/// overwritten (a re-run of the same transaction finds its own record and keeps it).
pub fn append_audit(
    tx: &mut dyn KvTransaction,
    root: &Subspace,
    op_id: &str,
    attempt: u32,
    record: &[u8],
) -> Result<()> {
    let key = audit_key(root, op_id, attempt);
    if tx.get(&key)?.is_none() {
        tx.set(&key, record)?;
    }
    Ok(())
}

/// The audit records of an operation's signatures, oldest first.
pub fn audit_records(tx: &mut dyn KvRead, root: &Subspace, op_id: &str) -> Result<Vec<Vec<u8>>> {
    let (begin, end) = root.subspace(&("audit", op_id)).range();
    Ok(tx
        .get_range(&begin, &end, usize::MAX, false)?
        .into_iter()
        .map(|(_, v)| v)
        .collect())
}

fn nonce_account_key(root: &Subspace, cluster: &str, authority: &str, account: &str) -> Vec<u8> {
    root.pack(&("solana_nonce", cluster, authority, account))
}

fn decode_nonce_account_key(root: &Subspace, key: &[u8]) -> Result<(String, String, String)> {
    let (_, cluster, authority, account): (String, String, String, String) =
        root.unpack(key).map_err(|e| Error::Corrupt {
            what: "nonce account key",
            key: key.iter().map(|b| format!("{b:02x}")).collect(),
            reason: e.to_string(),
        })?;
    Ok((cluster, authority, account))
}

fn nonce_holder_key(root: &Subspace, cluster: &str, account: &str) -> Vec<u8> {
    root.pack(&("solana_nonce_holder", cluster, account))
}

/// Registers a durable-nonce account of `authority` on `cluster` (idempotent).
pub fn register_nonce_account(
    tx: &mut dyn KvTransaction,
    root: &Subspace,
    cluster: &str,
    authority: &str,
    account: &str,
) -> Result<()> {
    tx.set(&nonce_account_key(root, cluster, authority, account), b"")
}

/// The durable-nonce accounts registered for `authority` on `cluster`, in key order.
pub fn nonce_accounts(
    tx: &mut dyn KvRead,
    root: &Subspace,
    cluster: &str,
    authority: &str,
) -> Result<Vec<String>> {
    let (begin, end) = root.subspace(&("solana_nonce", cluster, authority)).range();
    tx.get_range(&begin, &end, usize::MAX, false)?
        .into_iter()
        .map(|(key, _)| decode_nonce_account_key(root, &key).map(|(_, _, account)| account))
        .collect()
}

/// Every registered durable-nonce account: (cluster, authority, account).
pub fn all_nonce_accounts(
    tx: &mut dyn KvRead,
    root: &Subspace,
) -> Result<Vec<(String, String, String)>> {
    let (begin, end) = root.subspace(&("solana_nonce",)).range();
    tx.get_range(&begin, &end, usize::MAX, false)?
        .into_iter()
        .map(|(key, _)| decode_nonce_account_key(root, &key))
        .collect()
}

/// The operation holding a nonce account, if any.
pub fn nonce_holder(
    tx: &mut dyn KvRead,
    root: &Subspace,
    cluster: &str,
    account: &str,
) -> Result<Option<String>> {
    Ok(tx
        .get(&nonce_holder_key(root, cluster, account))?
        .map(|b| String::from_utf8_lossy(&b).into_owned()))
}

/// Makes `op_id` the holder of a nonce account. The caller has checked, in this transaction,
/// that the previous holder (if any) is terminal.
pub fn hold_nonce_account(
    tx: &mut dyn KvTransaction,
    root: &Subspace,
    cluster: &str,
    account: &str,
    op_id: &str,
) -> Result<()> {
    tx.set(&nonce_holder_key(root, cluster, account), op_id.as_bytes())
}
