//! Block outcomes shared by broadcaster replicas: one reader per block, outcomes for all.

use crate::test_store;
use sigcast_store::blocks::{self, KEEP_BLOCKS, Seen};

const CHAIN: &str = "eip155:1";
const A: u64 = 1;
const B: u64 = 2;

#[test]
fn one_replica_reads_a_block_and_the_others_take_its_outcomes() {
    let t = test_store("block-outcomes");
    let s = &t.store;
    let root = s.root().clone();
    let claim = |number: u64, hash: &str, replica: u64| {
        s.run(|tx| blocks::claim(tx, &root, CHAIN, number, hash, replica))
            .unwrap()
    };
    let seen = |number: u64, hash: &str| {
        s.read(|tx| blocks::seen(tx, &root, CHAIN, number, hash))
            .unwrap()
    };
    assert_eq!(seen(100, "0xa"), None);
    assert_eq!(claim(100, "0xa", A), None, "nobody reads it: A's to read");
    assert_eq!(claim(100, "0xa", A), None, "claiming again changes nothing");
    assert_eq!(
        claim(100, "0xa", B),
        Some(Seen::Reading(A)),
        "B waits for A"
    );
    assert_eq!(
        claim(100, "0xb", B),
        None,
        "another block at that height (a fork) is another block"
    );
    // B cannot give up A's claim; A can.
    s.run(|tx| blocks::give_up(tx, &root, CHAIN, 100, "0xa", B))
        .unwrap();
    assert_eq!(seen(100, "0xa"), Some(Seen::Reading(A)));
    s.run(|tx| blocks::give_up(tx, &root, CHAIN, 100, "0xa", A))
        .unwrap();
    assert_eq!(
        seen(100, "0xa"),
        None,
        "given up: the next to come reads it"
    );
    assert_eq!(claim(100, "0xa", B), None);

    let outcomes = vec![true, false, true];
    s.run(|tx| blocks::publish(tx, &root, CHAIN, 100, "0xa", &outcomes))
        .unwrap();
    assert_eq!(claim(100, "0xa", A), Some(Seen::Outcomes(outcomes.clone())));
    // Published once: neither another publish nor a claim given up changes it.
    s.run(|tx| blocks::publish(tx, &root, CHAIN, 100, "0xa", &[false]))
        .unwrap();
    s.run(|tx| blocks::give_up(tx, &root, CHAIN, 100, "0xa", B))
        .unwrap();
    assert_eq!(seen(100, "0xa"), Some(Seen::Outcomes(outcomes.clone())));
    assert_eq!(
        s.read(|tx| blocks::seen(tx, &root, "eip155:2", 100, "0xa"))
            .unwrap(),
        None,
        "another chain's block is another block"
    );
}

#[test]
fn only_the_recent_blocks_outcomes_are_kept() {
    let t = test_store("block-outcomes-kept");
    let s = &t.store;
    let root = s.root().clone();
    let publish = |chain: &str, number: u64| {
        s.run(|tx| blocks::publish(tx, &root, chain, number, "0xa", &[true]))
            .unwrap()
    };
    let seen = |chain: &str, number: u64| {
        s.read(|tx| blocks::seen(tx, &root, chain, number, "0xa"))
            .unwrap()
    };
    publish(CHAIN, 10);
    publish(CHAIN, 11);
    publish("eip155:2", 10);
    publish(CHAIN, 10 + KEEP_BLOCKS);
    assert_eq!(seen(CHAIN, 10), Some(Seen::Outcomes(vec![true])), "kept");
    publish(CHAIN, 11 + KEEP_BLOCKS);
    assert_eq!(
        seen(CHAIN, 10),
        None,
        "more than KEEP_BLOCKS below: cleared"
    );
    assert_eq!(seen(CHAIN, 11), Some(Seen::Outcomes(vec![true])));
    assert_eq!(
        seen("eip155:2", 10),
        Some(Seen::Outcomes(vec![true])),
        "another chain's blocks are its own"
    );
}

#[test]
fn outcomes_that_do_not_decode_are_an_error_not_a_guess() {
    let t = test_store("block-outcomes-corrupt");
    let s = &t.store;
    let root = s.root().clone();
    let key = root.pack(&("block_outcomes", CHAIN, 7_u64, "0xa"));
    for value in [&b"O\x02"[..], b"R\x01", b"", b"X"] {
        s.run(|tx| tx.set(&key, value)).unwrap();
        let read = s.read(|tx| blocks::seen(tx, &root, CHAIN, 7, "0xa"));
        assert!(
            matches!(read, Err(sigcast_store::Error::Corrupt { .. })),
            "{value:?}: {read:?}"
        );
    }
}
