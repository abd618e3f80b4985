//! A broadcaster's work listing: fair across accounts and chains at any backlog.

use crate::test_store;
use sigcast_proto::pb;
use sigcast_store::operations::{self, ListFilter};
use sigcast_store::work::WorkList;
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

#[test]
fn a_backlog_of_one_account_starves_no_other_account_or_chain() {
    let t = test_store("work-backlog");
    let store = &t.store;
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
            let filter = ListFilter {
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
        let listing = work.listing(pb::OperationState::Sent, chains.clone(), 1_000);
        let taken = work.advance(store.read(|tx| listing.read(tx, &root)).unwrap());
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

#[test]
fn a_pass_takes_an_account_s_whole_share_when_what_the_last_took_has_left_the_state() {
    let t = test_store("work-share");
    let store = &t.store;
    let root = store.root().clone();
    let received = |i: usize| pb::Operation {
        state: pb::OperationState::Received.into(),
        ..sent(&format!("a-{i:04}"), "eip155:1", "0xBusy")
    };
    store
        .run(|tx| {
            for i in 0..100 {
                operations::put(tx, &root, None, &mut received(i), SystemTime::now())?;
            }
            Ok(())
        })
        .unwrap();
    let work = WorkList::default();
    let chains = vec!["eip155:1".to_owned()];
    let mut signed = std::collections::HashSet::new();
    // One account with work and a budget of 32: its share is 32, half its oldest, half
    // rotating. Each pass signs what it took, which leaves RECEIVED.
    for pass in 0..3 {
        let listing = work.listing(pb::OperationState::Received, chains.clone(), 32);
        let taken = work.advance(store.read(|tx| listing.read(tx, &root)).unwrap());
        let ids: std::collections::HashSet<String> =
            taken.iter().map(|op| op.op_id.clone()).collect();
        assert_eq!(
            ids.len(),
            32,
            "pass {pass}: the account's whole share, each operation once: {ids:?}"
        );
        assert!(
            ids.is_disjoint(&signed),
            "pass {pass}: an operation that left the state was taken again"
        );
        store
            .run(|tx| {
                for op in &taken {
                    let mut next = op.clone();
                    next.state = pb::OperationState::Signed.into();
                    operations::put(tx, &root, Some(op), &mut next, SystemTime::now())?;
                }
                Ok(())
            })
            .unwrap();
        signed.extend(ids);
    }
}
