//! Block outcomes shared by broadcaster replicas: one reader per block, outcomes for all.

use crate::test_store;
use sigcast_store::blocks::{self, Block, KEEP_BLOCKS, MAX_TRANSACTIONS, Seen};

const CHAIN: &str = "eip155:1";
const A: u64 = 1;
const B: u64 = 2;
const DIGEST: [u8; 32] = [7; 32];

fn block(number: u64, hash: &str) -> Block<'_> {
    Block {
        chain: CHAIN,
        number,
        hash,
    }
}

#[test]
fn one_replica_reads_a_block_and_the_others_take_its_outcomes() {
    let t = test_store("block-outcomes");
    let s = &t.store;
    let root = s.root().clone();
    let claim =
        |b: Block<'_>, replica: u64| s.run(|tx| blocks::claim(tx, &root, b, replica)).unwrap();
    let seen = |b: Block<'_>| s.read(|tx| blocks::seen(tx, &root, b)).unwrap();
    let a = block(100, "0xa");
    assert_eq!(seen(a), None);
    assert_eq!(claim(a, A), None, "nobody reads it: A's to read");
    assert_eq!(claim(a, A), None, "claiming again changes nothing");
    assert_eq!(claim(a, B), Some(Seen::Reading(A)), "B waits for A");
    assert_eq!(
        claim(block(100, "0xb"), B),
        None,
        "another block at that height (a fork) is another block"
    );
    // B cannot give up A's claim; A can.
    s.run(|tx| blocks::give_up(tx, &root, a, B)).unwrap();
    assert_eq!(seen(a), Some(Seen::Reading(A)));
    s.run(|tx| blocks::give_up(tx, &root, a, A)).unwrap();
    assert_eq!(seen(a), None, "given up: the next to come reads it");
    assert_eq!(claim(a, B), None);

    let outcomes = vec![true, false, true];
    s.run(|tx| blocks::publish(tx, &root, a, B, &DIGEST, &outcomes))
        .unwrap();
    assert_eq!(claim(a, A), Some(Seen::Outcomes(DIGEST, outcomes.clone())));
    // As stored: the digest, then a byte per transaction (replicas of other versions read it).
    let key = root.pack(&("block_outcomes", CHAIN, 100_u64, "0xa"));
    let mut stored = b"O".to_vec();
    stored.extend_from_slice(&DIGEST);
    stored.extend_from_slice(&[1, 0, 1]);
    assert_eq!(s.read(|tx| tx.get(&key)).unwrap(), Some(stored));
    // Published once: neither another publish nor a claim given up changes it.
    s.run(|tx| blocks::publish(tx, &root, a, A, &[8; 32], &[false]))
        .unwrap();
    s.run(|tx| blocks::give_up(tx, &root, a, B)).unwrap();
    assert_eq!(seen(a), Some(Seen::Outcomes(DIGEST, outcomes.clone())));
    let elsewhere = Block {
        chain: "eip155:2",
        ..a
    };
    assert_eq!(
        s.read(|tx| blocks::seen(tx, &root, elsewhere)).unwrap(),
        None,
        "another chain's block is another block"
    );
}

#[test]
fn a_block_too_large_to_keep_is_given_up_not_left_claimed() {
    let t = test_store("block-outcomes-large");
    let s = &t.store;
    let root = s.root().clone();
    let (large, largest) = (block(5, "0xa"), block(6, "0xb"));
    for b in [large, largest] {
        s.run(|tx| blocks::claim(tx, &root, b, A)).unwrap();
    }
    s.run(|tx| {
        blocks::publish(
            tx,
            &root,
            large,
            A,
            &DIGEST,
            &vec![true; MAX_TRANSACTIONS + 1],
        )
    })
    .unwrap();
    assert_eq!(s.read(|tx| blocks::seen(tx, &root, large)).unwrap(), None);
    // The largest kept fits a value.
    s.run(|tx| {
        blocks::publish(
            tx,
            &root,
            largest,
            A,
            &DIGEST,
            &vec![true; MAX_TRANSACTIONS],
        )
    })
    .unwrap();
    assert_eq!(
        s.read(|tx| blocks::seen(tx, &root, largest)).unwrap(),
        Some(Seen::Outcomes(DIGEST, vec![true; MAX_TRANSACTIONS]))
    );
}

#[test]
fn only_the_recent_blocks_outcomes_are_kept() {
    let t = test_store("block-outcomes-kept");
    let s = &t.store;
    let root = s.root().clone();
    let at = |chain: &'static str, number: u64| Block {
        chain,
        number,
        hash: "0xa",
    };
    let publish = |b: Block<'_>| {
        s.run(|tx| blocks::publish(tx, &root, b, A, &DIGEST, &[true]))
            .unwrap()
    };
    let seen = |b: Block<'_>| s.read(|tx| blocks::seen(tx, &root, b)).unwrap();
    let kept = Some(Seen::Outcomes(DIGEST, vec![true]));
    // Chains whose names sort before and after this one's.
    for chain in [CHAIN, "eip155:0", "eip155:2"] {
        publish(at(chain, 10));
    }
    publish(at(CHAIN, 11));
    publish(at(CHAIN, 10 + KEEP_BLOCKS));
    assert_eq!(seen(at(CHAIN, 10)), kept, "KEEP_BLOCKS below: kept");
    publish(at(CHAIN, 11 + KEEP_BLOCKS));
    assert_eq!(
        seen(at(CHAIN, 10)),
        None,
        "more than KEEP_BLOCKS below: cleared"
    );
    assert_eq!(seen(at(CHAIN, 11)), kept);
    for chain in ["eip155:0", "eip155:2"] {
        assert_eq!(seen(at(chain, 10)), kept, "{chain}'s blocks are its own");
    }
}

#[test]
fn outcomes_that_do_not_decode_are_an_error_not_a_guess() {
    let t = test_store("block-outcomes-corrupt");
    let s = &t.store;
    let root = s.root().clone();
    let key = root.pack(&("block_outcomes", CHAIN, 7_u64, "0xa"));
    let mut outcome_of_2 = b"O".to_vec();
    outcome_of_2.extend_from_slice(&DIGEST);
    outcome_of_2.push(2);
    for value in [&outcome_of_2[..], b"O\x01", b"R\x01", b"", b"X"] {
        s.run(|tx| tx.set(&key, value)).unwrap();
        let read = s.read(|tx| blocks::seen(tx, &root, block(7, "0xa")));
        assert!(
            matches!(read, Err(sigcast_store::Error::Corrupt { .. })),
            "{value:?}: {read:?}"
        );
    }
}
