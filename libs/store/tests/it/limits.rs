//! FoundationDB's limits, which the embedded backend enforces too so that what works on one
//! works on the other: keys up to 10,000 bytes, values up to 100,000 bytes, transactions up to
//! 10,000,000 bytes.

use crate::test_store;
use sigcast_proto::pb;
use sigcast_store::operations::{self, SubmitOutcome};
use sigcast_store::{Error, accounts};
use std::time::SystemTime;

const FDB_MAX_VALUE: usize = 100_000;
const FDB_MAX_KEY: usize = 10_000;

/// The largest contract call the gateway accepts: 128 KiB of calldata.
fn largest_call(op_id: &str) -> pb::Operation {
    pb::Operation {
        op_id: op_id.into(),
        intent: Some(pb::Intent {
            kind: Some(pb::intent::Kind::EvmContractCall(pb::EvmContractCall {
                chain_id: 31337,
                from: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8".into(),
                to: "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC".into(),
                data: (0..128 * 1024).map(|i| (i % 251) as u8).collect(),
                value_wei: "0".into(),
                gas_limit: Some(30_000_000),
            })),
        }),
        intent_fingerprint: "f".into(),
        state: pb::OperationState::Received.into(),
        chain: "eip155:31337".into(),
        account: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8".into(),
        ..Default::default()
    }
}

#[test]
fn the_largest_operation_and_its_payloads_fit_foundationdb_s_limits() {
    let t = test_store("largest");
    let s = &t.store;
    let root = s.root().clone();
    let op = largest_call("big");
    let SubmitOutcome::Created(created) = s
        .run(|tx| operations::submit(tx, &root, op.clone(), SystemTime::now()))
        .unwrap()
    else {
        panic!("created")
    };
    // Signed, then many attempts: a record that grows by attempts must stay storable.
    let payload: Vec<u8> = (0..130_000).map(|i| (i % 253) as u8).collect();
    let signed = s
        .run(|tx| {
            let stored = operations::get(tx, &root, "big")?.unwrap();
            let mut op = stored.clone();
            op.set_state(pb::OperationState::Signed);
            op.attempts = (1..=50)
                .map(|n| pb::Attempt {
                    number: n,
                    tx_id: format!("0x{n:064x}"),
                    reason: "fee_bump".into(),
                    ..Default::default()
                })
                .collect();
            operations::put(tx, &root, Some(&stored), &mut op, SystemTime::now())?;
            for n in 1..=3 {
                accounts::put_payload(tx, &root, "big", n, &payload)?;
            }
            Ok(op)
        })
        .unwrap();
    assert_eq!(created.revision + 1, signed.revision);

    let (begin, end) = root.range();
    let everything = s
        .read(|tx| tx.get_range(&begin, &end, usize::MAX, false))
        .unwrap();
    for (key, value) in &everything {
        assert!(key.len() <= FDB_MAX_KEY, "a key of {} bytes", key.len());
        assert!(
            value.len() <= FDB_MAX_VALUE,
            "a value of {} bytes under key {:?}",
            value.len(),
            String::from_utf8_lossy(&key[..key.len().min(40)])
        );
    }
    let read_back = s
        .read(|tx| {
            Ok((
                operations::get(tx, &root, "big")?,
                accounts::payload(tx, &root, "big", 2)?,
            ))
        })
        .unwrap();
    assert_eq!(
        read_back.0.as_ref(),
        Some(&signed),
        "the record reads back whole"
    );
    assert_eq!(
        read_back.1.as_ref(),
        Some(&payload),
        "the payload reads back whole"
    );
    // Listings decode split records too.
    let page = s
        .read(|tx| operations::list(tx, &root, &Default::default(), None, 10))
        .unwrap()
        .unwrap();
    assert_eq!(page.operations, std::slice::from_ref(&signed));
    // Shrinking the record again leaves no stale pieces behind.
    s.run(|tx| {
        let stored = operations::get(tx, &root, "big")?.unwrap();
        let mut op = stored.clone();
        op.set_state(pb::OperationState::Sent);
        op.intent = None;
        operations::put(tx, &root, Some(&stored), &mut op, SystemTime::now())
    })
    .unwrap();
    let after = s
        .read(|tx| tx.get_range(&begin, &end, usize::MAX, false))
        .unwrap();
    let small = s
        .read(|tx| operations::get(tx, &root, "big"))
        .unwrap()
        .unwrap();
    assert!(small.intent.is_none());
    assert!(
        after.len() < everything.len(),
        "the record's pieces are cleared when it shrinks"
    );
}

#[test]
fn the_embedded_store_refuses_what_foundationdb_would_refuse() {
    let t = test_store("limits");
    let s = &t.store;
    let key = s.root().pack(&("k",));
    let too_large = |result: Result<(), Error>| matches!(result, Err(Error::TooLarge { .. }));
    assert!(too_large(
        s.run(|tx| tx.set(&key, &vec![0; FDB_MAX_VALUE + 1]))
    ));
    s.run(|tx| tx.set(&key, &vec![0; FDB_MAX_VALUE])).unwrap();
    let long_key = vec![0x01; FDB_MAX_KEY + 1];
    assert!(too_large(s.run(|tx| tx.set(&long_key, b"v"))));
    // 120 values of 90,000 bytes: 10.8 MB in one transaction.
    let many = s.run(|tx| {
        for i in 0..120i64 {
            tx.set(&s.root().pack(&("many", i)), &vec![7; 90_000])?;
        }
        Ok(())
    });
    assert!(too_large(many), "a transaction over 10 MB is refused");
    let (begin, end) = s.root().subspace(&("many",)).range();
    assert!(
        s.read(|tx| tx.get_range(&begin, &end, 1, false))
            .unwrap()
            .is_empty(),
        "and nothing of it was written"
    );
}
