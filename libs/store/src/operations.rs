//! Operation records and their indexes, as transaction bodies over the KV layer.
//!
//! Layout under the store's root subspace:
//! - `("op", op_id)` → the `sigcast.v1.Operation` message (protobuf: the contract is also the
//!   record format, so it evolves by protobuf's compatibility rules);
//! - `("by_account", chain, account, op_id)` → empty, for listing one account's operations;
//! - `("by_state", state, op_id)` → empty, for listing by state;
//! - `("work", state, chain, account, position, op_id)` → empty, for operations not yet
//!   terminal only: the broadcaster's work, listed account by account so that no backlog of one
//!   account or chain keeps the others waiting, and within an account in nonce order (position
//!   is the EVM nonce once signed, else 0), oldest first: an account's later nonces cannot land
//!   before its earlier ones.
//!
//! Every function here is a piece of one transaction and idempotent by op_id: running it
//! again after a commit whose result was unknown finds its own effect and changes nothing.

use crate::kv::{KvRead, KvTransaction};
use crate::pieces;
use crate::tuple::{self, Subspace};
use crate::{Error, Result};
use prost::Message;
use sigcast_domain::{CancelEffect, OperationState};
use sigcast_proto::{pb, state_from_proto, state_to_proto};
use std::time::SystemTime;

const RECORD: &str = "op";
const BY_ACCOUNT: &str = "by_account";
const BY_STATE: &str = "by_state";
/// Operations by the authenticated caller that submitted them (none for an unauthenticated
/// one): a caller's listing reads its own index entries, so neither its page tokens nor its
/// scan ever touch another caller's keys.
const BY_CALLER: &str = "by_caller";
const WORK: &str = "work";

/// Most index entries one list call reads before returning a partial page, so a filter that
/// matches rarely cannot make one call scan the whole store.
const LIST_SCAN_BUDGET: usize = 10_000;

fn record_key(root: &Subspace, op_id: &str) -> Vec<u8> {
    root.pack(&(RECORD, op_id))
}

fn account_key(root: &Subspace, op: &pb::Operation) -> Vec<u8> {
    root.pack(&(
        BY_ACCOUNT,
        op.chain.as_str(),
        op.account.as_str(),
        op.op_id.as_str(),
    ))
}

fn caller_key(root: &Subspace, op: &pb::Operation) -> Option<Vec<u8>> {
    (!op.caller.is_empty()).then(|| root.pack(&(BY_CALLER, op.caller.as_str(), op.op_id.as_str())))
}

fn state_key(root: &Subspace, op: &pb::Operation) -> Vec<u8> {
    root.pack(&(BY_STATE, i64::from(op.state), op.op_id.as_str()))
}

/// The work entry of an operation that is not terminal.
fn work_key(root: &Subspace, op: &pb::Operation) -> Option<Vec<u8>> {
    let terminal = state_from_proto(op.state()).is_none_or(OperationState::is_terminal);
    let position = match &op.signing {
        Some(pb::operation::Signing::Evm(evm)) => i64::try_from(evm.nonce).unwrap_or(i64::MAX),
        _ => 0,
    };
    (!terminal).then(|| {
        root.pack(&(
            WORK,
            i64::from(op.state),
            op.chain.as_str(),
            op.account.as_str(),
            position,
            op.op_id.as_str(),
        ))
    })
}

fn decode(key: &[u8], bytes: &[u8]) -> Result<pb::Operation> {
    pb::Operation::decode(bytes).map_err(|e| Error::Corrupt {
        what: "operation record",
        key: hex_string(key),
        reason: e.to_string(),
    })
}

fn hex_string(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The stored operation with this op_id.
pub fn get(tx: &mut dyn KvRead, root: &Subspace, op_id: &str) -> Result<Option<pb::Operation>> {
    let key = record_key(root, op_id);
    pieces::get(tx, root, &key)?
        .map(|bytes| decode(&key, &bytes))
        .transpose()
}

/// The domain state of a stored state; UNSPECIFIED is never stored.
fn domain_state(root: &Subspace, op: &pb::Operation) -> Result<OperationState> {
    state_from_proto(op.state()).ok_or_else(|| Error::Corrupt {
        what: "operation state",
        key: hex_string(&record_key(root, &op.op_id)),
        reason: "state is UNSPECIFIED".into(),
    })
}

/// Writes an operation and keeps its index entries in step with `previous`, the version
/// read in the same transaction. Sets `revision` and `update_time`. A change of state the
/// lifecycle forbids (out of a terminal state, or skipping a step) is refused here, whoever
/// asks for it. So a terminal record is never written again, by this or any other code: the
/// gateway answers replays of finished operations from memory on that ground (a migration
/// that rewrote terminal records would have to clear it, i.e. restart the gateways).
pub fn put(
    tx: &mut dyn KvTransaction,
    root: &Subspace,
    previous: Option<&pb::Operation>,
    op: &mut pb::Operation,
    now: SystemTime,
) -> Result<()> {
    let to = domain_state(root, op)?;
    let new_entries = index_entries(root, op);
    let mut old_entries = Vec::new();
    if let Some(old) = previous {
        domain_state(root, old)?
            .transition(to)
            .map_err(|source| Error::IllegalTransition {
                op_id: op.op_id.clone(),
                source,
            })?;
        old_entries = index_entries(root, old);
    }
    // An entry the change leaves as it was is neither cleared nor written again: most changes
    // keep an operation's state, and none changes its account or caller. Clearing and writing
    // them anyway was eight of such an update's ten writes to the B-tree.
    for old in &old_entries {
        if !new_entries.contains(old) {
            tx.clear(old)?;
        }
    }
    op.revision = previous.map_or(1, |old| old.revision + 1);
    op.update_time = Some(now.into());
    pieces::set(tx, root, &record_key(root, &op.op_id), &op.encode_to_vec())?;
    for new in &new_entries {
        if !old_entries.contains(new) {
            tx.set(new, &[])?;
        }
    }
    Ok(())
}

/// The index entries of `op`: by state, by account, in the work list (until terminal) and by
/// caller (if known).
fn index_entries(root: &Subspace, op: &pb::Operation) -> Vec<Vec<u8>> {
    [
        Some(state_key(root, op)),
        Some(account_key(root, op)),
        work_key(root, op),
        caller_key(root, op),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// Which stored operation a change may apply to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guard {
    /// Only the record at this revision: a decision made from it applies to it alone, never
    /// to a record another process changed meanwhile.
    Revision(u64),
    /// Any record not yet terminal: for facts (what a node answered), which hold whatever
    /// else changed.
    NotTerminal,
}

/// Applies `change` to the stored operation if `guard` holds and `change` accepts (returns
/// `true`); returns the record before and after, or `None` if nothing was written.
pub fn update(
    tx: &mut dyn KvTransaction,
    root: &Subspace,
    op_id: &str,
    guard: Guard,
    change: &mut dyn FnMut(&mut pb::Operation) -> bool,
    now: SystemTime,
) -> Result<Option<(pb::Operation, pb::Operation)>> {
    let Some(stored) = get(tx, root, op_id)? else {
        return Ok(None);
    };
    let applies = match guard {
        Guard::Revision(revision) => stored.revision == revision,
        Guard::NotTerminal => !domain_state(root, &stored)?.is_terminal(),
    };
    if !applies {
        return Ok(None);
    }
    let mut op = stored.clone();
    if !change(&mut op) {
        return Ok(None);
    }
    put(tx, root, Some(&stored), &mut op, now)?;
    Ok(Some((stored, op)))
}

/// What recording a submitted operation did.
#[derive(Debug, Clone, PartialEq)]
pub enum SubmitOutcome {
    /// New op_id: recorded as given.
    Created(pb::Operation),
    /// Known op_id, same intent fingerprint: the stored operation; nothing written.
    Replayed(pb::Operation),
    /// Known op_id, another intent: the stored operation; nothing written.
    Conflict(pb::Operation),
}

/// Compares a submitted operation with what is stored under its op_id.
pub fn classify_submit(existing: pb::Operation, fingerprint: &str) -> SubmitOutcome {
    if existing.intent_fingerprint == fingerprint {
        SubmitOutcome::Replayed(existing)
    } else {
        SubmitOutcome::Conflict(existing)
    }
}

/// Records `new` (state RECEIVED) unless its op_id exists. Idempotent: a re-run after an
/// unknown commit finds the record and answers `Replayed`.
pub fn submit(
    tx: &mut dyn KvTransaction,
    root: &Subspace,
    mut new: pb::Operation,
    now: SystemTime,
) -> Result<SubmitOutcome> {
    if let Some(existing) = get(tx, root, &new.op_id)? {
        return Ok(classify_submit(existing, &new.intent_fingerprint));
    }
    new.create_time = Some(now.into());
    put(tx, root, None, &mut new, now)?;
    Ok(SubmitOutcome::Created(new))
}

/// What a cancel request did.
#[derive(Debug, Clone, PartialEq)]
pub enum CancelOutcome {
    /// No operation with this op_id.
    NotFound,
    /// Not signed yet: now CANCELLED (or already was: cancelling again is a replay).
    Cancelled(pb::Operation),
    /// Signed: `cancel_requested` is set; the broadcaster replaces it on chain.
    Requested(pb::Operation),
    /// CONFIRMED or REJECTED: nothing to cancel.
    Terminal(pb::Operation),
}

/// What a cancel of `stored` answers without a write, if it writes nothing: an operation
/// terminal, or whose on-chain cancel was already asked for. It holds whenever `stored` was
/// read: nothing leaves a terminal state, and a cancel asked for is never withdrawn.
pub fn cancel_written_nothing(
    root: &Subspace,
    stored: &pb::Operation,
) -> Result<Option<CancelOutcome>> {
    let state = domain_state(root, stored)?;
    Ok(match state.cancel_effect() {
        CancelEffect::RequestOnChainCancel if stored.cancel_requested => {
            Some(CancelOutcome::Requested(stored.clone()))
        }
        CancelEffect::AlreadyTerminal if state == OperationState::Cancelled => {
            Some(CancelOutcome::Cancelled(stored.clone()))
        }
        CancelEffect::AlreadyTerminal => Some(CancelOutcome::Terminal(stored.clone())),
        CancelEffect::CancelNow | CancelEffect::RequestOnChainCancel => None,
    })
}

/// Cancels an operation, or asks for its on-chain cancel if it is signed.
pub fn cancel(
    tx: &mut dyn KvTransaction,
    root: &Subspace,
    op_id: &str,
    now: SystemTime,
) -> Result<CancelOutcome> {
    let Some(stored) = get(tx, root, op_id)? else {
        return Ok(CancelOutcome::NotFound);
    };
    if let Some(answered) = cancel_written_nothing(root, &stored)? {
        return Ok(answered);
    }
    let state = domain_state(root, &stored)?;
    match state.cancel_effect() {
        CancelEffect::CancelNow => {
            let mut op = stored.clone();
            op.set_state(state_to_proto(OperationState::Cancelled));
            op.cancel_requested = true;
            put(tx, root, Some(&stored), &mut op, now)?;
            Ok(CancelOutcome::Cancelled(op))
        }
        CancelEffect::RequestOnChainCancel => {
            let mut op = stored.clone();
            op.cancel_requested = true;
            put(tx, root, Some(&stored), &mut op, now)?;
            Ok(CancelOutcome::Requested(op))
        }
        // Answered above.
        CancelEffect::AlreadyTerminal => Ok(CancelOutcome::Terminal(stored)),
    }
}

/// Which operations to list. Empty fields match everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListFilter {
    /// CAIP-2 chain.
    pub chain: Option<String>,
    /// Signing account, canonical form (needs `chain`).
    pub account: Option<String>,
    /// State.
    pub state: Option<pb::OperationState>,
    /// The caller that submitted it.
    pub caller: Option<String>,
}

impl ListFilter {
    fn matches(&self, op: &pb::Operation) -> bool {
        self.chain.as_ref().is_none_or(|c| *c == op.chain)
            && self.account.as_ref().is_none_or(|a| *a == op.account)
            && self.caller.as_ref().is_none_or(|c| *c == op.caller)
            && self.state.is_none_or(|s| s == op.state())
    }
}

/// A page of operations and where the next page starts.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Page {
    /// The operations.
    pub operations: Vec<pb::Operation>,
    /// Opaque cursor for the next page (the last key read), `None` when the range is done.
    pub next_cursor: Option<Vec<u8>>,
}

/// Why a list cursor was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the page token does not belong to this listing (the filter changed, or it was altered)")]
pub struct BadCursor;

/// Lists operations matching `filter`, in index order (op_id order within one chain/account
/// or state), starting after `cursor`.
pub fn list(
    tx: &mut dyn KvRead,
    root: &Subspace,
    filter: &ListFilter,
    cursor: Option<&[u8]>,
    page_size: usize,
) -> Result<Result<Page, BadCursor>> {
    list_within(tx, root, filter, cursor, page_size, usize::MAX)
}

/// As `list`, with a page of at most `max_bytes` of encoded operations (at least one): a
/// page of large records ends early, with a cursor to the rest.
pub fn list_within(
    tx: &mut dyn KvRead,
    root: &Subspace,
    filter: &ListFilter,
    cursor: Option<&[u8]>,
    page_size: usize,
    max_bytes: usize,
) -> Result<Result<Page, BadCursor>> {
    let mut bytes = 0usize;
    // The narrowest index for the filter; the rest of the filter is applied to each record.
    let (begin, end, records_inline) = match (&filter.chain, &filter.account, filter.state) {
        _ if filter.caller.as_ref().is_some_and(|c| !c.is_empty()) => {
            let caller = filter.caller.as_deref().unwrap_or_default();
            let (b, e) = root.subspace(&(BY_CALLER, caller)).range();
            (b, e, false)
        }
        (Some(chain), Some(account), _) => {
            let (b, e) = root
                .subspace(&(BY_ACCOUNT, chain.as_str(), account.as_str()))
                .range();
            (b, e, false)
        }
        (_, _, Some(state)) => {
            let (b, e) = root.subspace(&(BY_STATE, i64::from(state as i32))).range();
            (b, e, false)
        }
        (Some(chain), None, None) => {
            let (b, e) = root.subspace(&(BY_ACCOUNT, chain.as_str())).range();
            (b, e, false)
        }
        _ => {
            let (b, e) = root.subspace(&(RECORD,)).range();
            (b, e, true)
        }
    };
    let mut from = match cursor {
        None => begin.clone(),
        // Shorter than a key (the next key after it is one byte longer): a listing issued it,
        // and a longer one, read from, is FoundationDB's key_too_large (a store error, which
        // a caller retries for ever).
        Some(last)
            if last >= begin.as_slice()
                && last < end.as_slice()
                && last.len() < crate::kv::limits::KEY =>
        {
            let mut next = last.to_vec();
            next.push(0);
            next
        }
        Some(_) => return Ok(Err(BadCursor)),
    };
    let mut page = Page::default();
    let mut scanned = 0;
    while page.operations.len() < page_size {
        if scanned >= LIST_SCAN_BUDGET {
            return Ok(Ok(page));
        }
        let chunk = (page_size - page.operations.len()).clamp(16, 512);
        let rows = tx.get_range(&from, &end, chunk, false)?;
        let exhausted = rows.len() < chunk;
        for (key, value) in rows {
            scanned += 1;
            let op = if records_inline {
                let value = pieces::join(tx, root, &key, value)?;
                decode(&key, &value)?
            } else {
                let op_id = index_op_id(&key)?;
                match get(tx, root, &op_id)? {
                    Some(op) => op,
                    None => continue,
                }
            };
            if filter.matches(&op) {
                // As the record sits in a response: its length prefix counted too.
                let len = op.encoded_len();
                bytes = bytes
                    .saturating_add(len)
                    .saturating_add(1 + prost::length_delimiter_len(len));
                if bytes > max_bytes && !page.operations.is_empty() {
                    // This one starts the next page: the cursor stays on the row before it.
                    return Ok(Ok(page));
                }
                page.operations.push(op);
            }
            from = key.clone();
            from.push(0);
            page.next_cursor = Some(key);
            if page.operations.len() == page_size {
                break;
            }
        }
        if exhausted && page.operations.len() < page_size {
            page.next_cursor = None;
            return Ok(Ok(page));
        }
    }
    // A full page: there may be more. Probe one key so the last page carries no token.
    if let Some(last) = &page.next_cursor {
        let mut after = last.clone();
        after.push(0);
        if tx.get_range(&after, &end, 1, false)?.is_empty() {
            page.next_cursor = None;
        }
    }
    Ok(Ok(page))
}

/// The op_id at the end of an index key: the last element of its tuple.
fn index_op_id(key: &[u8]) -> Result<String> {
    let elements: Vec<tuple::Element<'_>> = tuple::unpack(key).map_err(|e| Error::Corrupt {
        what: "index key",
        key: hex_string(key),
        reason: e.to_string(),
    })?;
    match elements.last() {
        Some(tuple::Element::String(s)) => Ok(s.to_string()),
        _ => Err(Error::Corrupt {
            what: "index key",
            key: hex_string(key),
            reason: "no op_id at its end".into(),
        }),
    }
}

/// The accounts of `chain` with operations in `state` (not terminal), in key order, at most
/// `max`. Each account costs one short range read, however many operations it has.
pub fn work_accounts(
    tx: &mut dyn KvRead,
    root: &Subspace,
    state: pb::OperationState,
    chain: &str,
    max: usize,
) -> Result<Vec<String>> {
    let space = root.subspace(&(WORK, i64::from(state as i32), chain));
    let (mut begin, end) = space.range();
    let mut accounts = Vec::new();
    while accounts.len() < max {
        let rows = tx.get_range(&begin, &end, 1, false)?;
        let Some((key, _)) = rows.first() else { break };
        let (_, _, _, account, _, _): (String, i64, String, String, i64, String) =
            root.unpack(key).map_err(|e| Error::Corrupt {
                what: "work key",
                key: hex_string(key),
                reason: e.to_string(),
            })?;
        // Past every key of this account.
        begin = space.subspace(&(account.as_str(),)).range().1;
        accounts.push(account);
    }
    Ok(accounts)
}

/// Up to `limit` operations of `account` on `chain` in `state`, oldest nonce first (then op_id
/// order), starting after the work entry `after` (a cursor returned with an earlier page).
/// Returns the operations and the cursor of the last one.
pub fn work_of_account(
    tx: &mut dyn KvRead,
    root: &Subspace,
    state: pb::OperationState,
    chain: &str,
    account: &str,
    after: Option<&[u8]>,
    limit: usize,
) -> Result<(Vec<pb::Operation>, Option<Vec<u8>>)> {
    let space = root.subspace(&(WORK, i64::from(state as i32), chain, account));
    let (begin, end) = space.range();
    let begin = match after {
        Some(key) if key >= begin.as_slice() && key < end.as_slice() => {
            let mut next = key.to_vec();
            next.push(0);
            next
        }
        _ => begin,
    };
    let mut ops = Vec::new();
    let mut last = None;
    for (key, _) in tx.get_range(&begin, &end, limit, false)? {
        if let Some(op) = get(tx, root, &index_op_id(&key)?)? {
            ops.push(op);
        }
        last = Some(key);
    }
    Ok((ops, last))
}

/// Adds the missing work entries of operations not yet terminal, at most `limit` records per
/// call, starting after the `by_state` key `after`; returns the key to continue after, `None`
/// once done. Records written by a process of data format 1 (during a rolling upgrade, or
/// before this one) have none. Idempotent.
pub fn index_work(
    tx: &mut dyn KvTransaction,
    root: &Subspace,
    after: Option<&[u8]>,
    limit: usize,
) -> Result<Option<Vec<u8>>> {
    let states = [
        pb::OperationState::Received,
        pb::OperationState::Signed,
        pb::OperationState::Sent,
    ];
    let (begin, _) = root
        .subspace(&(BY_STATE, i64::from(states[0] as i32)))
        .range();
    let (_, end) = root
        .subspace(&(BY_STATE, i64::from(states[2] as i32)))
        .range();
    let begin = match after {
        Some(key) => {
            let mut next = key.to_vec();
            next.push(0);
            next
        }
        None => begin,
    };
    let rows = tx.get_range(&begin, &end, limit, false)?;
    let last = rows.last().map(|(key, _)| key.clone());
    for (key, _) in &rows {
        let work = get(tx, root, &index_op_id(key)?)?.and_then(|op| work_key(root, &op));
        if let Some(work) = work
            && tx.get(&work)?.is_none()
        {
            tx.set(&work, &[])?;
        }
    }
    Ok(if rows.len() < limit { None } else { last })
}
