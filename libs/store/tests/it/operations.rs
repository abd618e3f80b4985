//! Operation records: idempotent submit, cancel, listing with filters and pages.

use crate::test_store;
use prost::Message;
use sigcast_proto::pb;
use sigcast_store::Store;
use sigcast_store::operations::{self, CancelOutcome, ListFilter, SubmitOutcome};
use std::time::SystemTime;

fn operation(op_id: &str, account: &str, fingerprint: &str) -> pb::Operation {
    pb::Operation {
        op_id: op_id.into(),
        intent_fingerprint: fingerprint.into(),
        state: pb::OperationState::Received.into(),
        chain: "eip155:31337".into(),
        account: account.into(),
        ..Default::default()
    }
}

fn submit(store: &Store, op: pb::Operation) -> SubmitOutcome {
    let root = store.root().clone();
    store
        .run(|tx| operations::submit(tx, &root, op.clone(), SystemTime::now()))
        .unwrap()
}

fn stored_bytes(store: &Store, op_id: &str) -> Vec<u8> {
    let root = store.root().clone();
    store
        .read(|tx| operations::get(tx, &root, op_id))
        .unwrap()
        .unwrap()
        .encode_to_vec()
}

#[test]
fn submit_creates_replays_and_refuses_conflicts() {
    let t = test_store("submit");
    let s = &t.store;
    let SubmitOutcome::Created(created) = submit(s, operation("op-1", "0xA", "f1")) else {
        panic!()
    };
    assert_eq!(created.revision, 1);
    let before = stored_bytes(s, "op-1");
    assert_eq!(
        submit(s, operation("op-1", "0xA", "f1")),
        SubmitOutcome::Replayed(created.clone())
    );
    assert_eq!(
        submit(s, operation("op-1", "0xA", "f2")),
        SubmitOutcome::Conflict(created)
    );
    assert_eq!(
        stored_bytes(s, "op-1"),
        before,
        "neither replay nor conflict wrote anything"
    );
}

#[test]
fn cancel_follows_the_lifecycle() {
    let t = test_store("cancel");
    let s = &t.store;
    let root = s.root().clone();
    let cancel = |op_id: &str| {
        s.run(|tx| operations::cancel(tx, &root, op_id, SystemTime::now()))
            .unwrap()
    };
    assert_eq!(cancel("missing"), CancelOutcome::NotFound);

    submit(s, operation("received", "0xA", "f"));
    let CancelOutcome::Cancelled(op) = cancel("received") else {
        panic!()
    };
    assert_eq!(op.state(), pb::OperationState::Cancelled);
    assert_eq!(
        cancel("received"),
        CancelOutcome::Cancelled(op),
        "cancelling again is a replay"
    );

    let mut signed = operation("signed", "0xA", "f");
    signed.state = pb::OperationState::Signed.into();
    submit(s, signed);
    let CancelOutcome::Requested(op) = cancel("signed") else {
        panic!()
    };
    assert!(op.cancel_requested);
    assert_eq!(
        op.state(),
        pb::OperationState::Signed,
        "a signed payload may land: state unchanged"
    );
    assert_eq!(cancel("signed"), CancelOutcome::Requested(op.clone()));
    assert_eq!(op.revision, 2, "the repeat wrote nothing");

    let mut confirmed = operation("confirmed", "0xA", "f");
    confirmed.state = pb::OperationState::Confirmed.into();
    submit(s, confirmed);
    assert!(matches!(cancel("confirmed"), CancelOutcome::Terminal(_)));
}

#[test]
fn list_filters_and_pages_without_gaps_or_repeats() {
    let t = test_store("list");
    let s = &t.store;
    let root = s.root().clone();
    for i in 0..25 {
        let account = if i % 2 == 0 { "0xEven" } else { "0xOdd" };
        submit(s, operation(&format!("op-{i:02}"), account, "f"));
    }
    let cancel_root = root.clone();
    for i in [0, 3, 4] {
        s.run(|tx| operations::cancel(tx, &cancel_root, &format!("op-{i:02}"), SystemTime::now()))
            .unwrap();
    }
    let list_all = |filter: ListFilter, page_size: usize| {
        let mut cursor: Option<Vec<u8>> = None;
        let mut ids = Vec::new();
        loop {
            let page = s
                .read(|tx| operations::list(tx, &root, &filter, cursor.as_deref(), page_size))
                .unwrap()
                .unwrap();
            assert!(page.operations.len() <= page_size);
            ids.extend(page.operations.into_iter().map(|op| op.op_id));
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => return ids,
            }
        }
    };
    let all = list_all(ListFilter::default(), 7);
    assert_eq!(
        all,
        (0..25).map(|i| format!("op-{i:02}")).collect::<Vec<_>>()
    );
    let odd = list_all(
        ListFilter {
            chain: Some("eip155:31337".into()),
            account: Some("0xOdd".into()),
            state: None,
            caller: None,
        },
        5,
    );
    assert_eq!(odd.len(), 12);
    assert!(
        odd.iter()
            .all(|id| id[3..].parse::<u32>().unwrap() % 2 == 1)
    );
    let cancelled = list_all(
        ListFilter {
            state: Some(pb::OperationState::Cancelled),
            ..Default::default()
        },
        2,
    );
    assert_eq!(cancelled, ["op-00", "op-03", "op-04"]);
    let even_cancelled = list_all(
        ListFilter {
            chain: Some("eip155:31337".into()),
            account: Some("0xEven".into()),
            state: Some(pb::OperationState::Cancelled),
            caller: None,
        },
        10,
    );
    assert_eq!(even_cancelled, ["op-00", "op-04"]);
    let other_chain = list_all(
        ListFilter {
            chain: Some("eip155:1".into()),
            ..Default::default()
        },
        10,
    );
    assert!(other_chain.is_empty());
    // A full last page carries no token.
    let page = s
        .read(|tx| operations::list(tx, &root, &ListFilter::default(), None, 25))
        .unwrap()
        .unwrap();
    assert_eq!((page.operations.len(), page.next_cursor), (25, None));
    // A cursor from another listing is refused.
    let bogus = root.pack(&("zzz",));
    let filter = ListFilter {
        state: Some(pb::OperationState::Received),
        ..Default::default()
    };
    assert!(
        s.read(|tx| operations::list(tx, &root, &filter, Some(&bogus), 5))
            .unwrap()
            .is_err()
    );
}

#[test]
fn a_page_ends_before_its_byte_budget_and_resumes_where_it_ended() {
    let t = test_store("page-bytes");
    let s = &t.store;
    let root = s.root().clone();
    for i in 0..10 {
        submit(
            s,
            operation(&format!("op-{i:02}"), "0xA", &"f".repeat(1_000)),
        );
    }
    let one = s
        .read(|tx| operations::list(tx, &root, &ListFilter::default(), None, 1))
        .unwrap()
        .unwrap()
        .operations[0]
        .encoded_len();
    let (mut seen, mut pages, mut cursor) = (Vec::new(), 0, None::<Vec<u8>>);
    loop {
        let page = s
            .read(|tx| {
                operations::list_within(
                    tx,
                    &root,
                    &ListFilter::default(),
                    cursor.as_deref(),
                    100,
                    3 * one + one / 2,
                )
            })
            .unwrap()
            .unwrap();
        assert!(
            page.operations.len() <= 3,
            "{} in a page",
            page.operations.len()
        );
        pages += 1;
        seen.extend(page.operations.into_iter().map(|op| op.op_id));
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(pages, 4);
    assert_eq!(
        seen,
        (0..10).map(|i| format!("op-{i:02}")).collect::<Vec<_>>()
    );
    // A budget below one record still returns it: a page is never empty for lack of room.
    let page = s
        .read(|tx| operations::list_within(tx, &root, &ListFilter::default(), None, 100, 1))
        .unwrap()
        .unwrap();
    assert_eq!(page.operations.len(), 1);
}

#[test]
fn a_cursor_longer_than_any_key_is_refused_not_read_past() {
    // A cursor inside the listing's range but longer than a key can be: no listing issued
    // it, and on FoundationDB reading from it fails as key_too_large, a store error a caller
    // would retry for ever. Refused as a bad cursor on every backend.
    let t = test_store("long-cursor");
    let s = &t.store;
    let root = s.root().clone();
    submit(s, operation("op-00", "0xA", "f"));
    let first = s
        .read(|tx| operations::list(tx, &root, &ListFilter::default(), None, 1))
        .unwrap()
        .unwrap();
    assert_eq!(first.operations.len(), 1);
    let mut long = root.subspace(&("op",)).range().0;
    long.resize(20_000, b'z');
    let refused = s
        .read(|tx| operations::list(tx, &root, &ListFilter::default(), Some(&long), 1))
        .unwrap();
    assert_eq!(
        refused.map(|page| page.operations.len()),
        Err(operations::BadCursor)
    );
}

#[test]
fn a_callers_listing_pages_through_its_own_operations_only() {
    let t = test_store("by-caller");
    let s = &t.store;
    let root = s.root().clone();
    for i in 0..12 {
        let caller = ["alice", "bob", ""][i % 3];
        let mut op = operation(&format!("op-{i:02}"), "0xA", "f");
        op.caller = caller.into();
        submit(s, op);
    }
    let alice = ListFilter {
        caller: Some("alice".into()),
        ..Default::default()
    };
    let (mut seen, mut cursor) = (Vec::new(), None::<Vec<u8>>);
    loop {
        let page = s
            .read(|tx| operations::list(tx, &root, &alice, cursor.as_deref(), 2))
            .unwrap()
            .unwrap();
        seen.extend(page.operations.iter().map(|op| op.op_id.clone()));
        match page.next_cursor {
            Some(next) => {
                // The token is a key of Alice's own index: it names none of Bob's op_ids.
                let alices = root.pack(&("by_caller", "alice"));
                assert!(next.starts_with(&alices), "{next:?}");
                cursor = Some(next);
            }
            None => break,
        }
    }
    assert_eq!(seen, ["op-00", "op-03", "op-06", "op-09"]);
    // A token pointing into Bob's entries is not Alice's to use.
    let bobs = root.pack(&("by_caller", "bob", "op-01"));
    assert!(
        s.read(|tx| operations::list(tx, &root, &alice, Some(&bobs), 2))
            .unwrap()
            .is_err()
    );
    // Without an authenticated caller: the records with none.
    let nobody = ListFilter {
        caller: Some(String::new()),
        ..Default::default()
    };
    let page = s
        .read(|tx| operations::list(tx, &root, &nobody, None, 100))
        .unwrap()
        .unwrap();
    assert_eq!(page.operations.len(), 4);
}

#[test]
fn the_store_refuses_a_transition_the_lifecycle_forbids() {
    let t = test_store("transitions");
    let s = &t.store;
    let root = s.root().clone();
    submit(s, operation("op", "0xA", "f"));
    let set_state = |state: pb::OperationState| {
        s.run(|tx| {
            let stored = operations::get(tx, &root, "op")?.unwrap();
            let mut op = stored.clone();
            op.set_state(state);
            operations::put(tx, &root, Some(&stored), &mut op, SystemTime::now())
        })
    };
    let before = stored_bytes(s, "op");
    assert!(
        matches!(
            set_state(pb::OperationState::Confirmed),
            Err(sigcast_store::Error::IllegalTransition { .. })
        ),
        "RECEIVED → CONFIRMED skips signing and sending"
    );
    assert_eq!(stored_bytes(s, "op"), before, "nothing written");
    set_state(pb::OperationState::Signed).unwrap();
    set_state(pb::OperationState::Sent).unwrap();
    set_state(pb::OperationState::Rejected).unwrap();
    for state in [
        pb::OperationState::Sent,
        pb::OperationState::Confirmed,
        pb::OperationState::Received,
    ] {
        assert!(
            set_state(state).is_err(),
            "REJECTED is terminal: → {state:?} refused"
        );
    }
}

fn set_state(s: &Store, op_id: &str, states: &[pb::OperationState]) {
    let root = s.root().clone();
    s.run(|tx| {
        for state in states {
            let stored = operations::get(tx, &root, op_id)?.unwrap();
            let mut op = stored.clone();
            op.set_state(*state);
            operations::put(tx, &root, Some(&stored), &mut op, SystemTime::now())?;
        }
        Ok(())
    })
    .unwrap();
}

#[test]
fn work_is_listed_account_by_account_and_only_until_terminal() {
    let t = test_store("work");
    let s = &t.store;
    let root = s.root().clone();
    // One account with a backlog of 300, two with one operation each, and another chain.
    for i in 0..300 {
        submit(s, operation(&format!("busy-{i:03}"), "0xBusy", "f"));
    }
    submit(s, operation("a-1", "0xA", "f"));
    submit(s, operation("b-1", "0xB", "f"));
    let mut other = operation("other-chain", "0xA", "f");
    other.chain = "solana:localnet".into();
    submit(s, other);
    let received = pb::OperationState::Received;
    let accounts = s
        .read(|tx| operations::work_accounts(tx, &root, received, "eip155:31337", 100))
        .unwrap();
    assert_eq!(accounts, ["0xA", "0xB", "0xBusy"]);
    let page = |after: Option<&[u8]>| {
        let (ops, cursor) = s
            .read(|tx| {
                operations::work_of_account(
                    tx,
                    &root,
                    received,
                    "eip155:31337",
                    "0xBusy",
                    after,
                    128,
                )
            })
            .unwrap();
        (
            ops.into_iter().map(|op| op.op_id).collect::<Vec<_>>(),
            cursor,
        )
    };
    let (first, cursor) = page(None);
    assert_eq!(first.len(), 128);
    let (second, _) = page(cursor.as_deref());
    assert_eq!(second[0], "busy-128");
    // Work moves with the state and leaves once terminal.
    // Signed operations are listed in nonce order, whatever their op_ids.
    for (op_id, nonce) in [("busy-000", 9u64), ("busy-001", 3)] {
        s.run(|tx| {
            let stored = operations::get(tx, &root, op_id)?.unwrap();
            let mut op = stored.clone();
            op.set_state(pb::OperationState::Signed);
            op.signing = Some(pb::operation::Signing::Evm(pb::EvmSigning { nonce }));
            operations::put(tx, &root, Some(&stored), &mut op, SystemTime::now())
        })
        .unwrap();
    }
    let (signed_busy, _) = s
        .read(|tx| {
            operations::work_of_account(
                tx,
                &root,
                pb::OperationState::Signed,
                "eip155:31337",
                "0xBusy",
                None,
                10,
            )
        })
        .unwrap();
    let order: Vec<&str> = signed_busy.iter().map(|op| op.op_id.as_str()).collect();
    assert_eq!(order, ["busy-001", "busy-000"], "nonce 3 before nonce 9");
    set_state(s, "a-1", &[pb::OperationState::Signed]);
    let signed = s
        .read(|tx| {
            operations::work_accounts(tx, &root, pb::OperationState::Signed, "eip155:31337", 10)
        })
        .unwrap();
    assert_eq!(signed, ["0xA", "0xBusy"]);
    set_state(
        s,
        "a-1",
        &[pb::OperationState::Sent, pb::OperationState::Confirmed],
    );
    for state in [
        pb::OperationState::Signed,
        pb::OperationState::Sent,
        pb::OperationState::Confirmed,
    ] {
        assert!(
            !s.read(|tx| operations::work_accounts(tx, &root, state, "eip155:31337", 10))
                .unwrap()
                .contains(&"0xA".to_owned()),
            "{state:?}"
        );
    }
}

#[test]
fn a_store_of_data_format_1_gains_its_work_index_when_opened() {
    let t = test_store("format1");
    let s = &t.store;
    let root = s.root().clone();
    for i in 0..1_200 {
        submit(s, operation(&format!("op-{i:04}"), "0xA", "f"));
    }
    set_state(s, "op-0000", &[pb::OperationState::Cancelled]);
    // What a format-1 build leaves: no work entries, format 1 recorded.
    s.run(|tx| {
        let (begin, end) = root.subspace(&("work",)).range();
        tx.clear_range(&begin, &end)?;
        tx.set(&root.pack(&("meta", "format")), &1u32.to_be_bytes())
    })
    .unwrap();
    let reopened = sigcast_store::Store::open(&t.config).unwrap();
    let root = reopened.root().clone();
    let count = reopened
        .read(|tx| {
            let (begin, end) = root.subspace(&("work",)).range();
            Ok(tx.get_range(&begin, &end, usize::MAX, false)?.len())
        })
        .unwrap();
    assert_eq!(count, 1_199, "every operation not terminal, and only those");
    let format = reopened
        .read(|tx| tx.get(&root.pack(&("meta", "format"))))
        .unwrap()
        .unwrap();
    assert_eq!(
        format,
        sigcast_store::FORMAT_VERSION.to_be_bytes(),
        "then the store is recorded at this format"
    );
}

/// A transaction that counts the keys written and cleared through it.
struct Counting<'t> {
    inner: &'t mut dyn sigcast_store::KvTransaction,
    written: Vec<Vec<u8>>,
    cleared: Vec<Vec<u8>>,
}

impl sigcast_store::KvRead for Counting<'_> {
    fn get(&mut self, key: &[u8]) -> sigcast_store::Result<Option<Vec<u8>>> {
        self.inner.get(key)
    }
    fn get_range(
        &mut self,
        begin: &[u8],
        end: &[u8],
        limit: usize,
        reverse: bool,
    ) -> sigcast_store::Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.inner.get_range(begin, end, limit, reverse)
    }
}

impl sigcast_store::KvTransaction for Counting<'_> {
    fn set(&mut self, key: &[u8], value: &[u8]) -> sigcast_store::Result<()> {
        self.written.push(key.to_vec());
        self.inner.set(key, value)
    }
    fn clear(&mut self, key: &[u8]) -> sigcast_store::Result<()> {
        self.cleared.push(key.to_vec());
        self.inner.clear(key)
    }
    fn clear_range(&mut self, begin: &[u8], end: &[u8]) -> sigcast_store::Result<()> {
        self.cleared.push(begin.to_vec());
        self.inner.clear_range(begin, end)
    }
}

/// The keys `change` wrote and cleared, applied to `op_id` in one transaction.
fn keys_touched(
    s: &Store,
    op_id: &str,
    change: impl Fn(&mut pb::Operation) -> bool,
) -> (usize, usize) {
    let root = s.root().clone();
    s.run(|tx| {
        let mut counting = Counting {
            inner: tx,
            written: Vec::new(),
            cleared: Vec::new(),
        };
        let updated = operations::update(
            &mut counting,
            &root,
            op_id,
            operations::Guard::NotTerminal,
            &mut |op| change(op),
            SystemTime::now(),
        )?;
        assert!(updated.is_some());
        Ok((counting.written.len(), counting.cleared.len()))
    })
    .unwrap()
}

#[test]
fn an_update_writes_only_the_index_entries_it_changes() {
    let t = test_store("index-writes");
    let s = &t.store;
    let mut op = operation("op-index", "0xaaaa", "fp");
    op.caller = "spiffe://payments".into();
    assert!(matches!(submit(s, op), SubmitOutcome::Created(_)));
    // Every write of a record first clears the range its pieces would be in (one clear).
    // A change that keeps the state (what a node answered, say): the record alone.
    assert_eq!(
        keys_touched(s, "op-index", |op| {
            op.error = Some(pb::OperationError {
                reason: "x".into(),
                message: "y".into(),
            });
            true
        }),
        (1, 1)
    );
    // A change of state: the record, and the entries by state and in the work list, moved.
    // The entries by account and by caller stay as they are.
    assert_eq!(
        keys_touched(s, "op-index", |op| {
            op.set_state(pb::OperationState::Signed);
            true
        }),
        (3, 3)
    );
    // Into a terminal state: the record and the entry by state; the work entry is cleared.
    assert_eq!(
        keys_touched(s, "op-index", |op| {
            op.set_state(pb::OperationState::Cancelled);
            true
        }),
        (2, 3)
    );
    // What the indexes answer: the operation in its last state, by account and by caller.
    let root = s.root().clone();
    let listed = |filter: ListFilter| {
        s.read(|tx| operations::list(tx, &root, &filter, None, 10))
            .unwrap()
            .unwrap()
            .operations
            .len()
    };
    let state = |state| ListFilter {
        state: Some(state),
        ..Default::default()
    };
    assert_eq!(listed(state(pb::OperationState::Cancelled)), 1);
    assert_eq!(listed(state(pb::OperationState::Signed)), 0);
    assert_eq!(listed(state(pb::OperationState::Received)), 0);
    let account = ListFilter {
        chain: Some("eip155:31337".into()),
        account: Some("0xaaaa".into()),
        ..Default::default()
    };
    assert_eq!(listed(account), 1);
    let caller = ListFilter {
        caller: Some("spiffe://payments".into()),
        ..Default::default()
    };
    assert_eq!(listed(caller), 1);
}

#[test]
fn the_work_list_follows_an_operation_s_state_and_leaves_it_when_terminal() {
    let t = test_store("work-entries");
    let s = &t.store;
    assert!(matches!(
        submit(s, operation("op-work", "0xbbbb", "fp")),
        SubmitOutcome::Created(_)
    ));
    let root = s.root().clone();
    let work = |state| {
        s.read(|tx| {
            operations::work_of_account(tx, &root, state, "eip155:31337", "0xbbbb", None, 10)
        })
        .unwrap()
        .0
        .len()
    };
    let note = |op: &mut pb::Operation| {
        op.error = Some(pb::OperationError::default());
        true
    };
    keys_touched(s, "op-work", note);
    assert_eq!(work(pb::OperationState::Received), 1);
    // Signed at a nonce: the entry moves to the state's list, at the nonce's position.
    keys_touched(s, "op-work", |op| {
        op.set_state(pb::OperationState::Signed);
        op.signing = Some(pb::operation::Signing::Evm(pb::EvmSigning { nonce: 7 }));
        true
    });
    keys_touched(s, "op-work", note);
    assert_eq!(work(pb::OperationState::Received), 0);
    assert_eq!(work(pb::OperationState::Signed), 1);
    keys_touched(s, "op-work", |op| {
        op.set_state(pb::OperationState::Sent);
        true
    });
    assert_eq!(work(pb::OperationState::Signed), 0);
    assert_eq!(work(pb::OperationState::Sent), 1);
    keys_touched(s, "op-work", |op| {
        op.set_state(pb::OperationState::Cancelled);
        true
    });
    for state in [
        pb::OperationState::Received,
        pb::OperationState::Signed,
        pb::OperationState::Sent,
        pb::OperationState::Cancelled,
    ] {
        assert_eq!(work(state), 0, "{state:?}");
    }
}
