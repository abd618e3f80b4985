//! A store written by the previous release is read by this one: `fixtures/store-format-2.db`
//! was written by the store of commit 5fe94dc (format 2) with the program in
//! `fixtures/write-format-2.rs.txt` (an example of that tree). SQLite only: a FoundationDB
//! store of another release is the same keys, checked by the same code.

use prost::Message;
use sigcast_proto::pb;
use sigcast_proto::sigcast::signer::v1::AuditRecord;
use sigcast_store::{Store, StoreConfig, accounts, operations};
use std::time::SystemTime;

const ACCOUNT: &str = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266";

fn fixture() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sigcast.db");
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/store-format-2.db"
        ),
        &path,
    )
    .unwrap();
    let store =
        Store::open(&StoreConfig::sqlite(&path)).expect("the previous release's store opens");
    (dir, store)
}

#[test]
fn a_store_of_the_previous_release_reads_and_moves_on() {
    let (_dir, store) = fixture();
    let root = store.root().clone();
    let rules = sigcast_domain::IntentRules::default();
    let (received, sent, payload, audit, owner) = store
        .read(|tx| {
            Ok((
                operations::get(tx, &root, "fixture-received")?.unwrap(),
                operations::get(tx, &root, "fixture-sent")?.unwrap(),
                accounts::payload(tx, &root, "fixture-sent", 1)?,
                accounts::audit_records(tx, &root, "fixture-sent")?,
                accounts::nonce_owner(tx, &root, "eip155:31337", ACCOUNT, 0)?,
            ))
        })
        .unwrap();

    assert_eq!(received.state(), pb::OperationState::Received);
    assert!(received.caller.is_empty(), "no caller before format 3");
    for op in [&received, &sent] {
        let intent = sigcast_proto::intent_from_proto("intent", op.intent.as_ref(), Some(&rules))
            .expect("the stored intent parses");
        assert_eq!(
            op.intent_fingerprint,
            intent.fingerprint().to_string(),
            "{}: the stored fingerprint is the one this release computes",
            op.op_id
        );
        assert_eq!(op.account, ACCOUNT);
    }
    assert_eq!(sent.state(), pb::OperationState::Sent);
    assert_eq!(
        sent.signing,
        Some(pb::operation::Signing::Evm(pb::EvmSigning { nonce: 0 }))
    );
    let attempt = &sent.attempts[0];
    assert_eq!(
        (attempt.number, attempt.sends, attempt.may_land),
        (1, 1, true)
    );
    assert_eq!(attempt.outcome(), pb::AttemptOutcome::Accepted);
    let expected: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    assert_eq!(
        payload.as_deref(),
        Some(&expected[..]),
        "a payload in pieces"
    );
    let audit = AuditRecord::decode(audit[0].as_slice()).unwrap();
    assert_eq!((audit.attempt, audit.caller.as_str()), (1, "uid:1000"));
    assert_eq!(
        owner.as_deref(),
        Some("fixture-sent"),
        "the interlock's record"
    );

    // Listed, and moved on by this release.
    let page = store
        .read(|tx| {
            let filter = operations::ListFilter {
                state: Some(pb::OperationState::Sent),
                ..Default::default()
            };
            operations::list(tx, &root, &filter, None, 10)
        })
        .unwrap()
        .unwrap();
    assert_eq!(page.operations.len(), 1);
    store
        .run(|tx| {
            let stored = operations::get(tx, &root, "fixture-sent")?.unwrap();
            let mut confirmed = stored.clone();
            confirmed.set_state(pb::OperationState::Confirmed);
            operations::put(tx, &root, Some(&stored), &mut confirmed, SystemTime::now())
        })
        .unwrap();
    // The format is now this release's: the previous one refuses the store from here on.
    assert!(
        store
            .check_format(sigcast_store::FORMAT_VERSION - 1)
            .is_err()
    );
}
