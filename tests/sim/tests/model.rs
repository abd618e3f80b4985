//! The model check as tests: every interleaving of each small world keeps the invariants, and
//! each decision broken on purpose is found with a shortest counterexample.

use sigcast_sim::Tamper;
use sigcast_sim::model::{Bounds, Model};

/// More states than any configuration has: a check that stops at the limit did not visit
/// them all.
const LIMIT: usize = 3_000_000;

fn exhaust(bounds: Bounds) {
    let outcome = Model::new(bounds, Tamper::None).check(LIMIT);
    println!("{bounds:?}: {} states", outcome.states);
    assert!(
        outcome.counterexample.is_none(),
        "{bounds:?}: {:#?}",
        outcome.counterexample
    );
    assert!(outcome.states < LIMIT, "{bounds:?}: not exhausted");
    assert!(
        outcome.states > 1_000,
        "{bounds:?}: explores next to nothing"
    );
}

#[test]
fn two_replicas_racing_keep_the_invariants_in_every_interleaving() {
    exhaust(Bounds::SUITE[0]);
}

#[test]
fn another_sender_and_a_cancel_keep_the_invariants_in_every_interleaving() {
    exhaust(Bounds::SUITE[1]);
}

#[test]
fn two_replicas_racing_over_a_cancel_under_a_reorg_keep_the_invariants_in_every_interleaving() {
    exhaust(Bounds::SUITE[2]);
}

fn counterexample(bounds: Bounds, tamper: Tamper) -> String {
    let outcome = Model::new(bounds, tamper).check(LIMIT);
    let (violation, path) = outcome
        .counterexample
        .unwrap_or_else(|| panic!("{tamper:?} went unnoticed in {} states", outcome.states));
    println!("{tamper:?}: {violation}\n  {}", path.join("\n  "));
    violation
}

#[test]
fn deciding_from_an_old_snapshot_is_found() {
    let violation = counterexample(Bounds::SUITE[0], Tamper::IgnoreRevision);
    assert!(violation.contains("REJECTED"), "{violation}");
}

#[test]
fn settling_without_depth_is_found() {
    // A settlement at depth 1 that a reorganisation then undoes: CONFIRMED on a block no
    // longer canonical, or REJECTED on another sender's transaction no longer there.
    let violation = counterexample(Bounds::SUITE[1], Tamper::NoDepth);
    assert!(
        violation.contains("CONFIRMED") || violation.contains("REJECTED"),
        "{violation}"
    );
}

#[test]
fn rejecting_on_a_null_receipt_is_found() {
    let violation = counterexample(Bounds::SUITE[1], Tamper::NullReceiptRejects);
    assert!(violation.contains("REJECTED"), "{violation}");
}
