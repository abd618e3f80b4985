//! Which operations a pass works on: account by account, so that a backlog of one account or
//! one chain never keeps the others waiting. Each pass takes up to a budget per state, split
//! evenly across the accounts that have work. Within an account, half of its share is its
//! oldest operations (lowest nonces: the ones that can land now) and half continues where the
//! last pass stopped, wrapping around, so every operation comes up in turn at any backlog.

use sigcast_proto::pb;
use sigcast_store::{Store, operations};
use std::collections::HashMap;
use std::sync::Mutex;

/// Fewest operations taken from one account per pass.
const MIN_PER_ACCOUNT: usize = 16;
/// Most accounts of one chain listed per pass.
const MAX_ACCOUNTS: usize = 100_000;

/// Where each account's listing continues: (state, chain, account) → the last work entry
/// taken.
#[derive(Default)]
pub(crate) struct WorkList {
    cursors: Mutex<HashMap<(i32, String, String), Vec<u8>>>,
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
                    let list =
                        |tx: &mut dyn sigcast_store::KvRead, after: Option<&[u8]>, limit: usize| {
                            operations::work_of_account(
                                tx, &root, state, &chain, &account, after, limit,
                            )
                        };
                    let oldest_share = per_account / 2;
                    let (mut taken, _) = list(tx, None, oldest_share)?;
                    let mut ids: std::collections::HashSet<String> =
                        taken.iter().map(|op| op.op_id.clone()).collect();
                    let rotating_share = per_account - taken.len();
                    let after = cursors.get(&key).map(Vec::as_slice);
                    let (mut rotating, mut next) = list(tx, after, rotating_share)?;
                    if rotating.len() < rotating_share && after.is_some() {
                        // Wrap around to the account's first operations.
                        let (wrapped, wrapped_next) =
                            list(tx, None, rotating_share - rotating.len())?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use sigcast_store::StoreConfig;
    use std::time::SystemTime;

    fn sent(op_id: &str, chain: &str, account: &str) -> pb::Operation {
        pb::Operation {
            op_id: op_id.into(),
            state: pb::OperationState::Sent.into(),
            chain: chain.into(),
            account: account.into(),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn a_backlog_of_one_account_starves_no_other_account_or_chain() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&StoreConfig::sqlite(dir.path().join("store.db"))).unwrap();
        let root = store.root().clone();
        // 1,200 operations of one account that never settle, sorted before the others.
        let mut ops: Vec<pb::Operation> = (0..1_200)
            .map(|i| sent(&format!("a-{i:04}"), "eip155:1", "0xStuck"))
            .collect();
        ops.push(sent("b-0001", "eip155:1", "0xOther"));
        ops.push(sent("c-0001", "solana:localnet", "Other"));
        store
            .run(|tx| {
                for op in &ops {
                    operations::put(tx, &root, None, &mut op.clone(), SystemTime::now())?;
                }
                Ok(())
            })
            .unwrap();
        // What the broadcaster used to take: the first 1,000 by op_id.
        let old = store
            .read(|tx| {
                let filter = operations::ListFilter {
                    state: Some(pb::OperationState::Sent),
                    ..Default::default()
                };
                operations::list(tx, &root, &filter, None, 1_000)
            })
            .unwrap()
            .unwrap();
        assert!(
            old.operations.iter().all(|op| op.account == "0xStuck"),
            "the old listing saw only the stuck account"
        );

        let work = WorkList::default();
        let chains = vec!["eip155:1".to_owned(), "solana:localnet".to_owned()];
        let mut seen_stuck = std::collections::HashSet::new();
        // Half of each account's share rotates: 1,200 at about 166 a pass come up within 8.
        for pass in 0..8 {
            let taken = work
                .take(&store, pb::OperationState::Sent, chains.clone(), 1_000)
                .await
                .unwrap();
            let ids: Vec<&str> = taken.iter().map(|op| op.op_id.as_str()).collect();
            assert!(
                ids.contains(&"b-0001"),
                "pass {pass}: the other account waits"
            );
            assert!(
                ids.contains(&"c-0001"),
                "pass {pass}: the other chain waits"
            );
            assert!(
                taken.len() <= 1_000 + 16,
                "pass {pass}: {} taken",
                taken.len()
            );
            seen_stuck.extend(
                taken
                    .iter()
                    .filter(|op| op.account == "0xStuck")
                    .map(|op| op.op_id.clone()),
            );
        }
        assert_eq!(
            seen_stuck.len(),
            1_200,
            "every operation of the backlog comes up in turn"
        );
    }
}
