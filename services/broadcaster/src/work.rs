//! Which operations a pass works on: account by account, so that a backlog of one account or
//! one chain never keeps the others waiting. Each pass takes up to a budget per state, split
//! evenly across the accounts that have work; within an account it continues where the last
//! pass stopped, wrapping around, so every operation comes up in turn at any backlog.

use sigcast_proto::pb;
use sigcast_store::{Store, operations};
use std::collections::HashMap;
use std::sync::Mutex;

/// Fewest operations taken from one account per pass.
const MIN_PER_ACCOUNT: usize = 16;
/// Most accounts of one chain listed per pass.
const MAX_ACCOUNTS: usize = 100_000;

/// Where each account's listing continues: (state, chain, account) → last op_id taken.
#[derive(Default)]
pub(crate) struct WorkList {
    cursors: Mutex<HashMap<(i32, String, String), String>>,
}

impl WorkList {
    /// Up to about `budget` operations in `state` over `chains`, fairly shared by account.
    pub(crate) async fn take(
        &self,
        store: &Store,
        state: pb::OperationState,
        chains: Vec<String>,
        budget: usize,
    ) -> sigcast_store::Result<Vec<pb::Operation>> {
        let cursors = self
            .cursors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let root = store.root().clone();
        let (ops, moved) = store
            .read_async(move |tx| {
                let mut ops = Vec::new();
                let mut moved = Vec::new();
                let mut accounts = Vec::new();
                for chain in &chains {
                    for account in operations::work_accounts(tx, &root, state, chain, MAX_ACCOUNTS)?
                    {
                        accounts.push((chain.clone(), account));
                    }
                }
                let per_account = (budget / accounts.len().max(1)).max(MIN_PER_ACCOUNT);
                for (chain, account) in accounts {
                    let key = (state as i32, chain.clone(), account.clone());
                    let after = cursors.get(&key).map(String::as_str);
                    let mut taken = operations::work_of_account(
                        tx,
                        &root,
                        state,
                        &chain,
                        &account,
                        after,
                        per_account,
                    )?;
                    if taken.len() < per_account && after.is_some() {
                        // Wrap around to the account's first operations.
                        let rest = operations::work_of_account(
                            tx,
                            &root,
                            state,
                            &chain,
                            &account,
                            None,
                            per_account - taken.len(),
                        )?;
                        taken.extend(
                            rest.into_iter()
                                .filter(|op| after.is_some_and(|a| op.op_id.as_str() <= a)),
                        );
                    }
                    let next = (taken.len() == per_account)
                        .then(|| taken.last().map(|op| op.op_id.clone()))
                        .flatten();
                    moved.push((key, next));
                    ops.extend(taken);
                }
                Ok((ops, moved))
            })
            .await?;
        let mut cursors = self.cursors.lock().unwrap_or_else(|p| p.into_inner());
        cursors.retain(|(s, _, _), _| *s != state as i32);
        for (key, next) in moved {
            if let Some(next) = next {
                cursors.insert(key, next);
            }
        }
        Ok(ops)
    }
}
