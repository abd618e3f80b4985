//! Which operations a broadcaster's pass works on: account by account, so that a backlog of
//! one account or one chain never keeps the others waiting. Each pass takes up to a budget per
//! state, split evenly across the accounts that have work. Within an account, half of its share
//! is its oldest operations (lowest nonces: the ones that can land now) and half continues
//! where the last pass stopped (past the oldest share), wrapping around, so every operation
//! comes up in turn at any backlog.
//!
//! A pass is three steps, so that the read itself is a pure function of the store and the
//! cursors it starts from (and may run again, as a store read may): [`WorkList::listing`]
//! takes the cursors, [`Listing::read`] lists inside a read, [`WorkList::advance`] moves the
//! cursors on.

use crate::Result;
use crate::kv::KvRead;
use crate::operations;
use crate::tuple::Subspace;
use sigcast_proto::pb;
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

/// Operations a broadcaster's pass takes per state, shared across accounts.
pub const PASS_BUDGET: usize = 1_024;
/// Fewest operations taken from one account per pass.
const MIN_PER_ACCOUNT: usize = 16;
/// Most accounts of one chain listed per pass.
const MAX_ACCOUNTS: usize = 100_000;

/// (state, chain, account).
type CursorKey = (i32, String, String);

/// Where each account's listing continues: (state, chain, account) → the last work entry
/// taken. One per broadcaster process.
#[derive(Default)]
pub struct WorkList {
    cursors: Mutex<HashMap<CursorKey, Vec<u8>>>,
}

/// One pass's listing of one state, from the cursors as they were when it began.
#[derive(Clone)]
pub struct Listing {
    state: pb::OperationState,
    chains: Vec<String>,
    budget: usize,
    cursors: HashMap<CursorKey, Vec<u8>>,
}

/// What a listing took, and where each account's listing continues.
pub struct Taken {
    state: pb::OperationState,
    ops: Vec<pb::Operation>,
    moved: Vec<(CursorKey, Option<Vec<u8>>)>,
}

impl WorkList {
    /// A listing of up to about `budget` operations in `state` over `chains`, fairly shared by
    /// account.
    pub fn listing(
        &self,
        state: pb::OperationState,
        chains: Vec<String>,
        budget: usize,
    ) -> Listing {
        Listing {
            state,
            chains,
            budget,
            cursors: self
                .cursors
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
        }
    }

    /// Moves the cursors of `taken`'s state on, and hands over its operations.
    pub fn advance(&self, taken: Taken) -> Vec<pb::Operation> {
        let mut cursors = self.cursors.lock().unwrap_or_else(|p| p.into_inner());
        cursors.retain(|(s, _, _), _| *s != taken.state as i32);
        for (key, next) in taken.moved {
            if let Some(next) = next {
                cursors.insert(key, next);
            }
        }
        taken.ops
    }
}

impl Listing {
    /// Lists, inside a read of the store under `root`.
    pub fn read(&self, tx: &mut dyn KvRead, root: &Subspace) -> Result<Taken> {
        let state = self.state;
        let mut ops = Vec::new();
        let mut moved = Vec::new();
        let mut accounts = Vec::new();
        for chain in &self.chains {
            for account in operations::work_accounts(tx, root, state, chain, MAX_ACCOUNTS)? {
                accounts.push((chain.clone(), account));
            }
        }
        let per_account = (self.budget / accounts.len().max(1)).max(MIN_PER_ACCOUNT);
        for (chain, account) in accounts {
            let key = (state as i32, chain.clone(), account.clone());
            let list = |tx: &mut dyn KvRead, after: Option<&[u8]>, limit: usize| {
                operations::work_of_account(tx, root, state, &chain, &account, after, limit)
            };
            let oldest_share = per_account / 2;
            let (mut taken, oldest_end) = list(tx, None, oldest_share)?;
            let mut ids: HashSet<String> = taken.iter().map(|op| op.op_id.clone()).collect();
            let rotating_share = per_account - taken.len();
            // The rotation goes on past the oldest share, never through it: when what the
            // last pass took has left the state (signed, sent), its cursor is behind the
            // account's oldest operations, and listing from there took them twice — half the
            // share, every pass.
            let oldest_end = oldest_end.as_deref();
            let after = match (self.cursors.get(&key).map(Vec::as_slice), oldest_end) {
                (Some(cursor), Some(end)) => Some(cursor.max(end)),
                (cursor, end) => cursor.or(end),
            };
            let (mut rotating, mut next) = list(tx, after, rotating_share)?;
            if rotating.len() < rotating_share && after != oldest_end {
                // Wrap around to the operations just past the oldest share.
                let (wrapped, wrapped_next) =
                    list(tx, oldest_end, rotating_share - rotating.len())?;
                rotating.extend(wrapped);
                next = wrapped_next;
            }
            for op in rotating {
                if ids.insert(op.op_id.clone()) {
                    taken.push(op);
                }
            }
            moved.push((key, next));
            ops.extend(taken);
        }
        Ok(Taken { state, ops, moved })
    }
}
