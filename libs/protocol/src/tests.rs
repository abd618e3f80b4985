//! Decision tables: record × evidence × time → action.

use super::*;
use sigcast_domain::AttemptReason;
use std::time::Duration;

const ACCOUNT: &str = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";

fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
}

fn rules() -> Rules {
    Rules {
        confirmations: 3,
        solana_commitment: Commitment::Confirmed,
        check_after: Duration::from_millis(500),
        rebroadcast_after: Duration::from_secs(6),
        fee_bump_after: Some(Duration::from_secs(60)),
        max_fee_bumps: 2,
    }
}

fn tx(n: u32) -> String {
    format!("0x{n:064x}")
}

/// An attempt sent at `sent` (seconds), whose latest outcome is `outcome`.
fn attempt(
    n: u32,
    reason: AttemptReason,
    outcome: pb::AttemptOutcome,
    may_land: bool,
    sent: u64,
) -> pb::Attempt {
    pb::Attempt {
        number: n,
        tx_id: tx(n),
        endpoint: "http://a:1".into(),
        outcome: outcome.into(),
        send_time: Some(at(sent).into()),
        outcome_time: Some(at(sent).into()),
        last_send_time: Some(at(sent).into()),
        reason: reason.as_str().into(),
        sends: 1,
        may_land,
        fee_cap_time: None,
        // 2 gwei: over a base fee of 1 gwei, with room for it to double.
        max_fee_per_gas: "2000000000".into(),
    }
}

fn accepted(n: u32, sent: u64) -> pb::Attempt {
    attempt(
        n,
        if n == 1 {
            AttemptReason::Initial
        } else {
            AttemptReason::FeeBump
        },
        pb::AttemptOutcome::Accepted,
        true,
        sent,
    )
}

/// Fee bump `n`, signed and stored, never recorded as sent.
fn signed_never_sent(n: u32) -> pb::Attempt {
    pb::Attempt {
        number: n,
        tx_id: tx(n),
        reason: AttemptReason::FeeBump.as_str().into(),
        max_fee_per_gas: "2000000000".into(),
        ..Default::default()
    }
}

fn evm_op(attempts: Vec<pb::Attempt>) -> pb::Operation {
    pb::Operation {
        op_id: "op".into(),
        state: pb::OperationState::Sent.into(),
        chain: "eip155:31337".into(),
        account: ACCOUNT.into(),
        signing: Some(pb::operation::Signing::Evm(pb::EvmSigning { nonce: 7 })),
        attempts,
        revision: 4,
        ..Default::default()
    }
}

fn head(number: u64) -> BlockRef {
    BlockRef {
        number,
        hash: format!("0xhead{number}"),
    }
}

/// A view at `head` with the account at `nonce`, showing `landed` (in block 100).
fn view(endpoint: &str, head_number: u64, nonce: Option<u64>, landed: Option<&str>) -> EvmView {
    EvmView {
        endpoint: endpoint.into(),
        head: head(head_number),
        account_nonce: nonce,
        base_fee: Some(1_000_000_000),
        landed: landed.map(|tx| EvmLanded {
            tx: tx.into(),
            block: BlockRef {
                number: 100,
                hash: "0xb100".into(),
            },
            canonical_hash: Some("0xb100".into()),
            success: Some(true),
            // As one node answers: its head linked down to the block.
            descendant: (head_number >= 100).then(|| head(head_number)),
        }),
    }
}

fn evm(views: Vec<EvmView>) -> Evidence {
    Evidence::Evm(views)
}

fn settled(action: &Action) -> &Settlement {
    match action {
        Action::Settle(s) => s,
        other => panic!("expected a settlement, got {other:?}"),
    }
}

#[test]
fn a_null_receipt_with_the_nonce_past_ours_settles_nothing() {
    // The load generator's 26 false rejections: anvil showed the account nonce past the
    // operation's before the fee bump's receipt was readable.
    let op = evm_op(vec![accepted(1, 0), accepted(2, 10)]);
    let evidence = evm(vec![view("http://a:1", 101, Some(8), None)]);
    assert_eq!(
        decide(&op, &evidence, at(11), &rules()),
        Action::ReadMore(Why::NonceUsedUnidentified)
    );
}

#[test]
fn rejected_only_from_a_foreign_transaction_at_depth() {
    let op = evm_op(vec![accepted(1, 0)]);
    let foreign = tx(99);
    let shallow = evm(vec![view("http://a:1", 101, Some(8), Some(&foreign))]);
    assert_eq!(
        decide(&op, &shallow, at(11), &rules()),
        Action::Wait(Why::Confirming),
        "two blocks deep of three"
    );
    let deep = evm(vec![view("http://a:1", 102, Some(8), Some(&foreign))]);
    let action = decide(&op, &deep, at(11), &rules());
    let s = settled(&action);
    assert_eq!(s.state, OperationState::Rejected);
    assert_eq!(
        s.error.as_ref().unwrap().reason,
        reasons::NONCE_CONSUMED_EXTERNALLY
    );
    let evidence = s.evidence.as_ref().unwrap();
    assert_eq!(
        (
            evidence.tx_id.as_str(),
            evidence.block_number,
            evidence.head
        ),
        (foreign.as_str(), 100, 102)
    );
    assert!(s.error.as_ref().unwrap().message.contains(&foreign));
}

#[test]
fn a_landing_off_the_canonical_chain_settles_nothing() {
    let op = evm_op(vec![accepted(1, 0)]);
    let mut reorged = view("http://a:1", 110, Some(8), Some(&tx(1)));
    reorged.landed.as_mut().unwrap().canonical_hash = Some("0xother".into());
    assert_eq!(
        decide(&op, &evm(vec![reorged.clone()]), at(11), &rules()),
        Action::Wait(Why::Confirming)
    );
    reorged.landed.as_mut().unwrap().canonical_hash = None;
    assert_eq!(
        decide(&op, &evm(vec![reorged]), at(11), &rules()),
        Action::Wait(Why::Confirming)
    );
}

#[test]
fn a_depth_no_descendant_links_to_the_block_settles_nothing() {
    // Behind one URL, the head from a node that never held block 100 (another fork), the
    // receipt and block 100 from one whose tip it is: ten blocks "deep", by no one chain.
    // Another endpoint may prove it: read on.
    let op = evm_op(vec![accepted(1, 0)]);
    let mut assembled = view("http://a:1", 110, Some(8), Some(&tx(1)));
    assembled.landed.as_mut().unwrap().descendant = None;
    assert_eq!(
        decide(&op, &evm(vec![assembled.clone()]), at(11), &rules()),
        Action::ReadMore(Why::DepthUnproven)
    );
    // Linked, but not as far as the depth: block 101 descends from it, 102 not read.
    assembled.landed.as_mut().unwrap().descendant = Some(head(101));
    assert_eq!(
        decide(&op, &evm(vec![assembled.clone()]), at(11), &rules()),
        Action::ReadMore(Why::DepthUnproven)
    );
    // One that does settles it.
    let proven = view("http://b:1", 110, Some(8), Some(&tx(1)));
    assert_eq!(
        settled(&decide(
            &op,
            &evm(vec![assembled.clone(), proven]),
            at(11),
            &rules()
        ))
        .state,
        OperationState::Confirmed
    );
    assembled.landed.as_mut().unwrap().descendant = Some(head(102));
    assert_eq!(
        settled(&decide(
            &op,
            &evm(vec![assembled.clone()]),
            at(11),
            &rules()
        ))
        .state,
        OperationState::Confirmed
    );
    // At a depth of one the block itself is the proof.
    assembled.landed.as_mut().unwrap().descendant = None;
    let one = Rules {
        confirmations: 1,
        ..rules()
    };
    assert_eq!(
        settled(&decide(&op, &evm(vec![assembled]), at(11), &one)).state,
        OperationState::Confirmed
    );
}

#[test]
fn our_fee_bump_at_depth_confirms_from_its_receipt() {
    let op = evm_op(vec![accepted(1, 0), accepted(2, 10)]);
    let action = decide(
        &op,
        &evm(vec![view("http://a:1", 102, Some(8), Some(&tx(2)))]),
        at(11),
        &rules(),
    );
    let s = settled(&action);
    assert_eq!(s.state, OperationState::Confirmed);
    let result = s.result.as_ref().unwrap();
    assert_eq!(
        (result.tx_id.as_str(), result.execution_status()),
        (tx(2).as_str(), pb::ExecutionStatus::Success)
    );
    assert_eq!(s.error, None);
}

#[test]
fn our_transaction_seen_without_its_receipt_waits_for_it() {
    let op = evm_op(vec![accepted(1, 0)]);
    let mut v = view("http://a:1", 102, Some(8), Some(&tx(1)));
    v.landed.as_mut().unwrap().success = None;
    assert_eq!(
        decide(&op, &evm(vec![v]), at(11), &rules()),
        Action::ReadMore(Why::ReceiptMissing)
    );
}

#[test]
fn endpoints_that_disagree_at_depth_settle_nothing() {
    let op = evm_op(vec![accepted(1, 0)]);
    let evidence = evm(vec![
        view("http://a:1", 102, Some(8), Some(&tx(1))),
        view("http://b:1", 102, Some(8), Some(&tx(99))),
    ]);
    assert_eq!(
        decide(&op, &evidence, at(11), &rules()),
        Action::Wait(Why::Conflicting)
    );
}

#[test]
fn a_positive_read_anywhere_settles_a_lagging_one_does_not_block_it() {
    let op = evm_op(vec![accepted(1, 0)]);
    let evidence = evm(vec![
        view("http://lagging:1", 90, Some(7), None),
        view("http://b:1", 102, Some(8), Some(&tx(1))),
    ]);
    let action = decide(&op, &evidence, at(11), &rules());
    assert_eq!(settled(&action).state, OperationState::Confirmed);
    assert_eq!(
        settled(&action).evidence.as_ref().unwrap().endpoint,
        "http://b:1"
    );
}

#[test]
fn self_transfers_settle_as_cancelled_or_never_applied() {
    let mut cancel = attempt(
        2,
        AttemptReason::Cancel,
        pb::AttemptOutcome::Accepted,
        true,
        10,
    );
    cancel.tx_id = tx(2);
    let op = evm_op(vec![accepted(1, 0), cancel]);
    let action = decide(
        &op,
        &evm(vec![view("http://a:1", 102, Some(8), Some(&tx(2)))]),
        at(11),
        &rules(),
    );
    assert_eq!(settled(&action).state, OperationState::Cancelled);

    let mut refused = attempt(
        1,
        AttemptReason::Initial,
        pb::AttemptOutcome::Rejected,
        false,
        0,
    );
    refused.tx_id = tx(1);
    let fill = attempt(
        2,
        AttemptReason::GapFill,
        pb::AttemptOutcome::Accepted,
        true,
        1,
    );
    let mut op = evm_op(vec![refused, fill]);
    op.error = Some(pb::OperationError {
        reason: reasons::SEND_REJECTED.into(),
        message: "insufficient funds".into(),
    });
    let action = decide(
        &op,
        &evm(vec![view("http://a:1", 102, Some(8), Some(&tx(2)))]),
        at(11),
        &rules(),
    );
    let s = settled(&action);
    assert_eq!(s.state, OperationState::Rejected);
    assert_eq!(s.error.as_ref().unwrap().reason, reasons::NEVER_APPLIED);
    assert!(
        s.error
            .as_ref()
            .unwrap()
            .message
            .contains("insufficient funds")
    );
}

#[test]
fn in_flight_the_same_bytes_go_out_again_when_due() {
    let op = evm_op(vec![accepted(1, 0)]);
    let free = evm(vec![view("http://a:1", 50, Some(7), None)]);
    assert_eq!(
        decide(&op, &free, at(0) + Duration::from_millis(100), &rules()),
        Action::Wait(Why::Paced(at(0) + Duration::from_millis(500))),
        "just sent: not read yet"
    );
    assert_eq!(
        decide(&op, &Evidence::None, at(2), &rules()),
        Action::ReadMore(Why::Unread)
    );
    assert_eq!(
        decide(&op, &free, at(2), &rules()),
        Action::Wait(Why::InFlight(at(6)))
    );
    assert_eq!(decide(&op, &free, at(6), &rules()), Action::Send(1));
}

#[test]
fn the_same_bytes_go_out_again_a_period_after_they_left_not_after_their_send_was_recorded() {
    // An account's first sends are recorded together, then go out one after another: the
    // last of a long batch left 4 s after its send was recorded.
    let mut op = evm_op(vec![accepted(1, 0)]);
    record::record_left(&mut op, 1, at(4));
    let free = evm(vec![view("http://a:1", 50, Some(7), None)]);
    assert_eq!(
        decide(&op, &free, at(6), &rules()),
        Action::Wait(Why::InFlight(at(10)))
    );
    assert_eq!(decide(&op, &free, at(10), &rules()), Action::Send(1));
    // The answer to an earlier send, recorded after a later one: the later one counts.
    record::record_left(&mut op, 1, at(2));
    assert_eq!(
        decide(&op, &free, at(6), &rules()),
        Action::Wait(Why::InFlight(at(10)))
    );
    // A record written before last_send_time was: from its first send, or when it left.
    let mut older = evm_op(vec![accepted(1, 0)]);
    older.attempts[0].last_send_time = None;
    record::record_left(&mut older, 1, at(3));
    assert_eq!(
        decide(&older, &free, at(6), &rules()),
        Action::Wait(Why::InFlight(at(9)))
    );
}

#[test]
fn a_transaction_queued_behind_the_account_s_earlier_nonces_goes_out_again_every_period() {
    // Sent at 0 s at nonce 7 while the account's next nonce is 5. Nodes drop transactions
    // they accepted (anvil under load), queued ones too: sending these only every fourth
    // period cut throughput by a third at 16 accounts, as each dropped one held its account
    // up once it came next (BENCHMARKS.md). The same bytes go out again every period.
    let op = evm_op(vec![accepted(1, 0)]);
    let queued = evm(vec![view("http://a:1", 50, Some(5), None)]);
    assert_eq!(
        decide(&op, &queued, at(5), &rules()),
        Action::Wait(Why::InFlight(at(6)))
    );
    assert_eq!(decide(&op, &queued, at(6), &rules()), Action::Send(1));
}

#[test]
fn a_refused_resend_is_not_followed_by_a_replacement() {
    // Attempt 1 was accepted, then a resend of the same bytes was refused for its fees (the
    // base fee rose): the bytes may still land, so neither a fee bump at once nor a gap fill.
    let mut first = accepted(1, 0);
    first.outcome = pb::AttemptOutcome::Rejected.into();
    first.last_send_time = Some(at(6).into());
    first.outcome_time = Some(at(6).into());
    let op = evm_op(vec![first]);
    let free = evm(vec![view("http://a:1", 50, Some(7), None)]);
    assert_eq!(
        decide(&op, &free, at(8), &rules()),
        Action::Wait(Why::InFlight(at(12)))
    );
    assert_eq!(decide(&op, &free, at(12), &rules()), Action::Send(1));
}

#[test]
fn a_refused_fee_bump_keeps_the_earlier_attempt_in_play() {
    // The bump asked for more than the balance: the first attempt may still land.
    let bump = attempt(
        2,
        AttemptReason::FeeBump,
        pb::AttemptOutcome::Rejected,
        false,
        70,
    );
    let mut op = evm_op(vec![accepted(1, 0), bump]);
    op.error = Some(pb::OperationError {
        reason: reasons::SEND_REJECTED.into(),
        message: "insufficient funds".into(),
    });
    let free = evm(vec![view("http://a:1", 50, Some(7), None)]);
    assert_eq!(
        decide(&op, &free, at(80), &rules()),
        Action::Send(1),
        "the first attempt again, not a gap fill that would displace it"
    );
    assert_eq!(
        decide(&op, &free, at(1_000), &rules()),
        Action::Send(1),
        "nor another bump: higher fees cannot cure a refusal for the balance"
    );
}

#[test]
fn a_first_send_refused_for_its_fees_is_bumped_and_refused_throughout_is_gap_filled() {
    let mut op = evm_op(vec![attempt(
        1,
        AttemptReason::Initial,
        pb::AttemptOutcome::Rejected,
        false,
        0,
    )]);
    op.error = Some(pb::OperationError {
        reason: reasons::UNDERPRICED.into(),
        message: "max fee per gas less than block base fee".into(),
    });
    let free = evm(vec![view("http://a:1", 50, Some(7), None)]);
    assert_eq!(
        decide(&op, &free, at(1), &rules()),
        Action::Replace(Replacement::FeeBump)
    );
    // Two bumps, each refused too: no more bumps; nothing may land, so the nonce is filled.
    for n in 2..=3 {
        op.attempts.push(attempt(
            n,
            AttemptReason::FeeBump,
            pb::AttemptOutcome::Rejected,
            false,
            u64::from(n),
        ));
    }
    assert_eq!(
        decide(&op, &free, at(5), &rules()),
        Action::Replace(Replacement::GapFill)
    );
    op.error.as_mut().unwrap().reason = reasons::SEND_REJECTED.into();
    op.attempts.truncate(1);
    assert_eq!(
        decide(&op, &free, at(5), &rules()),
        Action::Replace(Replacement::GapFill),
        "refused for anything but fees: filled at once"
    );
}

#[test]
fn an_attempt_priced_under_the_head_s_base_fee_is_bumped_without_waiting() {
    // Its cap is 2 gwei; sent at 0 s, read at 10 s: past a rebroadcast period (6 s), long
    // before the 60 s bump period.
    let op = evm_op(vec![accepted(1, 0)]);
    let read = |account_nonce: u64, base_fee: Option<u128>| {
        let mut view = view("http://a:1", 50, Some(account_nonce), None);
        view.base_fee = base_fee;
        evm(vec![view])
    };
    let priced_out = read(7, Some(2_000_000_001));
    let waiting = decide(&op, &read(7, None), at(10), &rules());
    assert!(
        matches!(waiting, Action::Wait(_) | Action::Send(_)),
        "{waiting:?}"
    );
    assert_eq!(
        decide(&op, &priced_out, at(10), &rules()),
        Action::Replace(Replacement::FeeBump)
    );
    assert_eq!(
        decide(&op, &read(7, Some(2_000_000_000)), at(10), &rules()),
        waiting,
        "a base fee at its cap can still include it"
    );
    assert_eq!(
        decide(&op, &read(5, Some(2_000_000_001)), at(10), &rules()),
        waiting,
        "nonces 5 and 6 are not in yet: a bump of 7 cannot help"
    );
    assert_eq!(
        decide(&op, &priced_out, at(5), &rules()),
        decide(&op, &read(7, None), at(5), &rules()),
        "sent 5 s ago: a rebroadcast period first"
    );
    // The newest attempt's cap is what counts: a bump at 6 gwei over a 3 gwei head stands.
    let mut bumped = evm_op(vec![accepted(1, 0), accepted(2, 1)]);
    bumped.attempts[1].max_fee_per_gas = "6000000000".into();
    let at_3_gwei = read(7, Some(3_000_000_000));
    assert!(
        !matches!(
            decide(&bumped, &at_3_gwei, at(10), &rules()),
            Action::Replace(_)
        ),
        "the newest attempt pays more than the head asks"
    );
    bumped.attempts[1].max_fee_per_gas = "2500000000".into();
    assert_eq!(
        decide(&bumped, &at_3_gwei, at(10), &rules()),
        Action::Replace(Replacement::FeeBump)
    );
    // Of two views, the one at the higher head is read: its base fee decides.
    let two = |fresher_base_fee: u128| {
        let mut older = view("http://a:1", 50, Some(7), None);
        older.base_fee = Some(1_000_000_000);
        let mut fresher = view("http://b:1", 51, Some(7), None);
        fresher.base_fee = Some(fresher_base_fee);
        evm(vec![older, fresher])
    };
    assert_eq!(
        decide(&op, &two(2_000_000_001), at(10), &rules()),
        Action::Replace(Replacement::FeeBump)
    );
    assert_eq!(decide(&op, &two(1_000_000_000), at(10), &rules()), waiting);
    // The replacement is priced for the head it was decided at, not for the older one.
    assert_eq!(
        crate::evm::replacement_base_fee(&two(2_000_000_001)),
        Some(2_000_000_001)
    );
    let mut unread_nonce = view("http://c:1", 52, None, None);
    unread_nonce.base_fee = Some(9_000_000_000);
    let mut with_unread = two(2_000_000_001);
    if let Evidence::Evm(views) = &mut with_unread {
        views.push(unread_nonce);
    }
    assert_eq!(
        crate::evm::replacement_base_fee(&with_unread),
        Some(2_000_000_001),
        "a view without the account's nonce decides nothing, nor prices anything"
    );
    assert_eq!(crate::evm::replacement_base_fee(&read(7, None)), None);
    assert_eq!(crate::evm::replacement_base_fee(&Evidence::None), None);
    let mut unrecorded = op.clone();
    unrecorded.attempts[0].max_fee_per_gas.clear();
    assert_eq!(
        decide(&unrecorded, &priced_out, at(10), &rules()),
        decide(&unrecorded, &read(7, None), at(10), &rules()),
        "an attempt signed before its cap was recorded waits for the bump period"
    );
    let mut held = op.clone();
    held.attempts[0].fee_cap_time = Some(at(8).into());
    assert!(
        !matches!(
            decide(&held, &priced_out, at(10), &rules()),
            Action::Replace(_)
        ),
        "the signer refused a bump at the chain's fee cap a moment ago"
    );
    let used_up = evm_op(vec![accepted(1, 0), accepted(2, 1), accepted(3, 2)]);
    assert!(
        !matches!(
            decide(&used_up, &priced_out, at(10), &rules()),
            Action::Replace(_)
        ),
        "two bumps made, two allowed"
    );
    let off = Rules {
        fee_bump_after: None,
        ..rules()
    };
    assert!(!matches!(
        decide(&op, &priced_out, at(10), &off),
        Action::Replace(_)
    ));
}

#[test]
fn fee_bumps_only_where_they_can_help_and_no_more_than_allowed() {
    let op = evm_op(vec![accepted(1, 0)]);
    let next_in_line = evm(vec![view("http://a:1", 50, Some(7), None)]);
    let behind_a_gap = evm(vec![view("http://a:1", 50, Some(5), None)]);
    assert_eq!(
        decide(&op, &next_in_line, at(59), &rules()),
        Action::Send(1)
    );
    assert_eq!(
        decide(&op, &next_in_line, at(60), &rules()),
        Action::Replace(Replacement::FeeBump)
    );
    assert_eq!(
        decide(&op, &behind_a_gap, at(60), &rules()),
        Action::Send(1),
        "nonces 5 and 6 are not in yet: a bump of 7 cannot help"
    );
    let mut unsent = op.clone();
    unsent.attempts[0].send_time = None;
    unsent.attempts[0].last_send_time = None;
    unsent.attempts[0].outcome_time = None;
    assert_eq!(
        decide(&unsent, &next_in_line, at(600), &rules()),
        Action::Send(1),
        "no send time: it never waited; send it, do not bump it"
    );
    let capped = evm_op(vec![accepted(1, 0), accepted(2, 61), accepted(3, 122)]);
    assert_eq!(
        decide(&capped, &next_in_line, at(1_000), &rules()),
        Action::Send(3),
        "two bumps made, two allowed"
    );
    let off = Rules {
        fee_bump_after: None,
        ..rules()
    };
    assert_eq!(decide(&op, &next_in_line, at(600), &off), Action::Send(1));
}

#[test]
fn a_replacement_refused_at_the_fee_cap_is_asked_again_a_bump_period_later() {
    // The signer refused a bump of attempt 1 at the cap at t=60: every pass asked again
    // (twice a second per operation, each counted as a refusal) until the attempt landed.
    let next_in_line = evm(vec![view("http://a:1", 50, Some(7), None)]);
    let mut op = evm_op(vec![accepted(1, 0)]);
    assert!(record::record_held_at_fee_cap(&mut op, 1, at(60)));
    assert!(
        !record::record_held_at_fee_cap(&mut op, 9, at(60)),
        "no attempt 9"
    );
    assert_eq!(
        decide(&op, &next_in_line, at(61), &rules()),
        Action::Send(1),
        "held at the cap: the attempt goes out as it is"
    );
    assert_eq!(
        decide(&op, &next_in_line, at(119), &rules()),
        Action::Send(1)
    );
    assert_eq!(
        decide(&op, &next_in_line, at(120), &rules()),
        Action::Replace(Replacement::FeeBump),
        "a bump period later: the cap may have been raised"
    );
    let mut cancelled = op.clone();
    cancelled.cancel_requested = true;
    assert_eq!(
        decide(&cancelled, &next_in_line, at(61), &rules()),
        Action::Send(1),
        "a cancel held at the cap is not asked for at every pass either"
    );
    assert_eq!(
        decide(&cancelled, &next_in_line, at(120), &rules()),
        Action::Replace(Replacement::Cancel)
    );
    let mut refused = evm_op(vec![attempt(
        1,
        AttemptReason::Initial,
        pb::AttemptOutcome::Rejected,
        false,
        0,
    )]);
    refused.error = Some(pb::OperationError {
        reason: reasons::UNDERPRICED.into(),
        message: "replacement transaction underpriced".into(),
    });
    assert_eq!(
        decide(&refused, &next_in_line, at(1), &rules()),
        Action::Replace(Replacement::FeeBump)
    );
    record::record_held_at_fee_cap(&mut refused, 1, at(1));
    assert_eq!(
        decide(&refused, &next_in_line, at(2), &rules()),
        Action::Wait(Why::InFlight(at(6))),
        "refused for its fees, held at the cap: no bump asked for until a period passed"
    );
    assert_eq!(
        decide(&refused, &next_in_line, at(61), &rules()),
        Action::Replace(Replacement::FeeBump)
    );
}

#[test]
fn an_attempt_signed_after_a_cancel_is_not_sent_unless_it_takes_the_nonce() {
    // Signed on a decision read before the cancel: its bytes never left the store.
    let fresh = |reason: AttemptReason| {
        let mut op = evm_op(vec![accepted(1, 0)]);
        op.attempts.push(pb::Attempt {
            number: 2,
            tx_id: tx(2),
            reason: reason.as_str().into(),
            ..Default::default()
        });
        op
    };
    let mut op = fresh(AttemptReason::FeeBump);
    assert!(record::record_sending_new(&mut op, 2, at(5)), "no cancel");
    assert_eq!(op.attempts[1].sends, 1);
    for reason in [
        AttemptReason::FeeBump,
        AttemptReason::Resign,
        AttemptReason::Initial,
    ] {
        let mut op = fresh(reason);
        op.cancel_requested = true;
        let before = op.clone();
        assert!(!record::record_sending_new(&mut op, 2, at(5)), "{reason}");
        assert_eq!(op, before, "{reason}: nothing changed");
    }
    for reason in [AttemptReason::Cancel, AttemptReason::GapFill] {
        let mut op = fresh(reason);
        op.cancel_requested = true;
        assert!(record::record_sending_new(&mut op, 2, at(5)), "{reason}");
        assert_eq!(op.attempts[1].sends, 1, "{reason}");
    }
    let mut op = fresh(AttemptReason::Cancel);
    op.cancel_requested = true;
    assert!(
        !record::record_sending_new(&mut op, 3, at(5)),
        "no such attempt"
    );
}

#[test]
fn a_fee_bump_signed_before_a_cancel_is_never_sent_after_it() {
    // The bump was signed on a decision read before the cancel was asked for, and its send
    // declined (`record_sending_new`); then the cancel was refused at the fee cap. Sent now, it
    // would carry the operation's own effect at a higher fee after the caller cancelled it:
    // the attempt that was sent goes out again as it is, and the cancel is asked for again a
    // bump period later (review, thirteenth session).
    let mut op = evm_op(vec![accepted(1, 0), signed_never_sent(2)]);
    op.cancel_requested = true;
    let free = evm(vec![view("http://a:1", 50, Some(7), None)]);
    assert_eq!(
        decide(&op, &free, at(10), &rules()),
        Action::Replace(Replacement::Cancel)
    );
    assert!(record::record_held_at_fee_cap(&mut op, 2, at(10)));
    assert_eq!(
        evm::at_fee_cap(&op, at(10), &rules()),
        Action::Send(1),
        "right after the refusal"
    );
    assert_eq!(decide(&op, &free, at(11), &rules()), Action::Send(1));
    assert_eq!(
        decide(&op, &free, at(70), &rules()),
        Action::Replace(Replacement::Cancel)
    );
    // Nothing else may land (the first attempt was refused): still not the bump.
    op.attempts[0].may_land = false;
    op.attempts[0].outcome = pb::AttemptOutcome::Rejected.into();
    assert_eq!(evm::at_fee_cap(&op, at(10), &rules()), Action::Send(1));
    assert_eq!(decide(&op, &free, at(11), &rules()), Action::Send(1));
    // Without the cancel, a bump signed and never sent goes out (a crash between the two).
    op.cancel_requested = false;
    assert_eq!(decide(&op, &free, at(11), &rules()), Action::Send(2));
}

#[test]
fn a_cancel_replaces_once() {
    let mut op = evm_op(vec![accepted(1, 0)]);
    op.cancel_requested = true;
    let free = evm(vec![view("http://a:1", 50, Some(7), None)]);
    assert_eq!(
        decide(&op, &free, at(2), &rules()),
        Action::Replace(Replacement::Cancel)
    );
    op.attempts.push(attempt(
        2,
        AttemptReason::Cancel,
        pb::AttemptOutcome::Accepted,
        true,
        2,
    ));
    assert_eq!(
        decide(&op, &free, at(3), &rules()),
        Action::Wait(Why::InFlight(at(8)))
    );
}

/// A cancel refused for its fees (the base fee rose past it) is priced again, as a fee bump
/// would be; and while a cancel is asked for and signed, its bytes go out again, never the
/// operation's: a send of ours would help the very effect the caller asked to cancel land.
#[test]
fn a_cancel_refused_for_its_fees_is_priced_again_and_the_operation_s_bytes_not_resent() {
    let underpriced = |op: &mut pb::Operation| {
        op.error = Some(pb::OperationError {
            reason: crate::record::reasons::UNDERPRICED.into(),
            message: "max fee per gas less than block base fee".into(),
        });
    };
    let mut op = evm_op(vec![
        accepted(1, 0),
        attempt(
            2,
            AttemptReason::Cancel,
            pb::AttemptOutcome::Rejected,
            false,
            2,
        ),
    ]);
    op.cancel_requested = true;
    underpriced(&mut op);
    let free = evm(vec![view("http://a:1", 50, Some(7), None)]);
    assert_eq!(
        decide(&op, &free, at(9), &rules()),
        Action::Replace(Replacement::Cancel)
    );
    // The signer refused to price it higher at the fee cap: the cancel's own bytes again,
    // when due (the base fee may fall back under it).
    op.attempts[1].fee_cap_time = Some(at(3).into());
    assert_eq!(decide(&op, &free, at(9), &rules()), Action::Send(2));
    assert_eq!(
        decide(&op, &free, at(7), &rules()),
        Action::Wait(Why::InFlight(at(8)))
    );
    // Refused for anything else (the balance for its higher fee): neither priced again nor
    // sent again, it would never pass, and the operation would wait for ever behind it. The
    // operation's own transaction, which may still land, goes out again (review, sixteenth
    // session): CONFIRMED is an honest end of a cancel that could not go.
    op.attempts[1].fee_cap_time = None;
    op.error = Some(pb::OperationError {
        reason: crate::record::reasons::SEND_REJECTED.into(),
        message: "insufficient funds for gas * price + value".into(),
    });
    assert_eq!(decide(&op, &free, at(9), &rules()), Action::Send(1));
    // As many cancels priced again as fee bumps (two): after them, the newest's bytes.
    underpriced(&mut op);
    let refused_cancel = |n| {
        attempt(
            n,
            AttemptReason::Cancel,
            pb::AttemptOutcome::Rejected,
            false,
            2,
        )
    };
    op.attempts.push(refused_cancel(3));
    assert_eq!(
        decide(&op, &free, at(8), &rules()),
        Action::Replace(Replacement::Cancel)
    );
    op.attempts.push(refused_cancel(4));
    assert_eq!(decide(&op, &free, at(8), &rules()), Action::Send(4));
    // Beside a refusal for more than its fees: a cancel recorded as being sent without an
    // outcome (a crash in between) goes out again, as does one that may land (a send of it
    // was accepted).
    op.error = Some(pb::OperationError {
        reason: crate::record::reasons::SEND_REJECTED.into(),
        message: "insufficient funds for gas * price + value".into(),
    });
    assert_eq!(decide(&op, &free, at(8), &rules()), Action::Send(1));
    op.attempts[3].set_outcome(pb::AttemptOutcome::Pending);
    assert_eq!(decide(&op, &free, at(8), &rules()), Action::Send(4));
    op.attempts[3].set_outcome(pb::AttemptOutcome::Rejected);
    op.attempts[3].may_land = true;
    assert_eq!(decide(&op, &free, at(8), &rules()), Action::Send(4));
}

/// Every self-transfer is final but the newest cancel while every send of it was refused,
/// and only for a cancel asked to replace it.
#[test]
fn a_self_transfer_is_final_but_a_refused_cancel_a_cancel_replaces() {
    let cancel = |n, outcome, may_land| attempt(n, AttemptReason::Cancel, outcome, may_land, 2);
    let refused = evm_op(vec![
        accepted(1, 0),
        cancel(2, pb::AttemptOutcome::Rejected, false),
    ]);
    let number = |a: Option<&pb::Attempt>| a.map(|a| a.number);
    assert_eq!(
        number(crate::record::final_self_transfer(&refused, Some(2))),
        None
    );
    assert_eq!(
        number(crate::record::final_self_transfer(&refused, None)),
        Some(2),
        "not for a fee bump or a gap fill"
    );
    assert_eq!(
        number(crate::record::final_self_transfer(&refused, Some(1))),
        Some(2),
        "not to replace another attempt"
    );
    for (outcome, may_land) in [
        (pb::AttemptOutcome::Accepted, true),
        (pb::AttemptOutcome::Rejected, true),
        (pb::AttemptOutcome::Unknown, true),
    ] {
        let op = evm_op(vec![accepted(1, 0), cancel(2, outcome, may_land)]);
        assert_eq!(
            number(crate::record::final_self_transfer(&op, Some(2))),
            Some(2),
            "{outcome:?}"
        );
    }
    // Several cancels: the newest is the one that stands (or that a cancel replaces).
    let mut three = refused.clone();
    three
        .attempts
        .push(cancel(3, pb::AttemptOutcome::Accepted, true));
    assert_eq!(
        number(crate::record::final_self_transfer(&three, Some(2))),
        Some(3)
    );
    three
        .attempts
        .push(cancel(4, pb::AttemptOutcome::Rejected, false));
    assert_eq!(
        number(crate::record::final_self_transfer(&three, Some(4))),
        None
    );
    assert_eq!(
        number(crate::record::final_self_transfer(&three, Some(3))),
        Some(4)
    );
    let gap_fill = evm_op(vec![
        attempt(
            1,
            AttemptReason::Initial,
            pb::AttemptOutcome::Rejected,
            false,
            0,
        ),
        attempt(
            2,
            AttemptReason::GapFill,
            pb::AttemptOutcome::Rejected,
            false,
            2,
        ),
    ]);
    assert_eq!(
        number(crate::record::final_self_transfer(&gap_fill, Some(2))),
        Some(2)
    );
    assert_eq!(
        number(crate::record::final_self_transfer(
            &evm_op(vec![accepted(1, 0)]),
            Some(1)
        )),
        None
    );
}

#[test]
fn before_and_after_flight() {
    let mut op = evm_op(vec![pb::Attempt {
        number: 1,
        tx_id: tx(1),
        ..Default::default()
    }]);
    op.state = pb::OperationState::Received.into();
    assert_eq!(decide(&op, &Evidence::None, at(0), &rules()), Action::Sign);
    op.state = pb::OperationState::Signed.into();
    assert_eq!(
        decide(&op, &Evidence::None, at(0), &rules()),
        Action::Send(1)
    );
    op.cancel_requested = true;
    assert_eq!(
        decide(&op, &Evidence::None, at(0), &rules()),
        Action::Replace(Replacement::Cancel),
        "a signed EVM nonce must still be used"
    );
    for terminal in [
        pb::OperationState::Confirmed,
        pb::OperationState::Rejected,
        pb::OperationState::Cancelled,
    ] {
        op.state = terminal.into();
        assert_eq!(
            decide(&op, &Evidence::None, at(0), &rules()),
            Action::Wait(Why::Terminal)
        );
    }
}

// Solana.

fn solana_op(nonce_account: &str, attempts: usize) -> pb::Operation {
    pb::Operation {
        op_id: "sol".into(),
        state: pb::OperationState::Sent.into(),
        chain: "solana:localnet".into(),
        account: "Payer111".into(),
        signing: Some(pb::operation::Signing::Solana(pb::SolanaSigning {
            blockhash: "Hash1".into(),
            last_valid_block_height: 200,
            nonce_account: nonce_account.into(),
            signing_slot: 50,
        })),
        attempts: (1..=attempts as u32)
            .map(|n| pb::Attempt {
                tx_id: format!("Sig{n}"),
                ..accepted(n, 0)
            })
            .collect(),
        ..Default::default()
    }
}

fn solana_view(height: u64, statuses: Vec<Option<SignatureStatus>>) -> SolanaView {
    SolanaView {
        endpoint: "http://sol:1".into(),
        commitment: Commitment::Finalized,
        block_height: Some(height),
        height_slot: Some(height + 20),
        first_available_slot: Some(0),
        nonce_value: None,
        nonce_slot: Some(1_000),
        statuses: Some(statuses),
        statuses_slot: Some(1_000),
    }
}

fn status(confirmation: Commitment, err: Option<&str>) -> Option<SignatureStatus> {
    Some(SignatureStatus {
        slot: 77,
        err: err.map(str::to_owned),
        confirmation,
    })
}

#[test]
fn solana_settles_at_the_configured_commitment() {
    let op = solana_op("", 1);
    let processed = Evidence::Solana(vec![solana_view(
        100,
        vec![status(Commitment::Processed, None)],
    )]);
    assert_eq!(
        decide(&op, &processed, at(10), &rules()),
        Action::Wait(Why::Confirming)
    );
    let failed = Evidence::Solana(vec![solana_view(
        100,
        vec![status(Commitment::Confirmed, Some("InsufficientFunds"))],
    )]);
    let action = decide(&op, &failed, at(10), &rules());
    let s = settled(&action);
    assert_eq!(s.state, OperationState::Confirmed);
    assert_eq!(s.error.as_ref().unwrap().reason, reasons::EXECUTION_FAILED);
    assert_eq!(
        s.result.as_ref().unwrap().execution_status(),
        pb::ExecutionStatus::Failed
    );
}

#[test]
fn solana_never_landed_needs_finality_history_and_every_status() {
    let op = solana_op("", 2);
    let expired = || solana_view(201, vec![None, None]);
    let Action::Resign(proof) = decide(&op, &Evidence::Solana(vec![expired()]), at(10), &rules())
    else {
        panic!("a complete finalized view past the last valid height proves expiry")
    };
    assert_eq!(
        (
            proof.head,
            proof.last_valid_block_height,
            proof.signing_slot
        ),
        (201, 200, 50)
    );

    let mut pruned = expired();
    pruned.first_available_slot = Some(51);
    assert_eq!(
        decide(&op, &Evidence::Solana(vec![pruned]), at(10), &rules()),
        Action::ReadMore(Why::HistoryTooShort)
    );
    let mut short_answer = expired();
    short_answer.statuses = Some(vec![None]);
    assert_eq!(
        decide(&op, &Evidence::Solana(vec![short_answer]), at(10), &rules()),
        Action::ReadMore(Why::Unreadable),
        "one status for two signatures proves nothing"
    );
    let mut unfinal = expired();
    unfinal.commitment = Commitment::Confirmed;
    assert_eq!(
        decide(&op, &Evidence::Solana(vec![unfinal]), at(10), &rules()),
        Action::ReadMore(Why::Unreadable)
    );
    let mut no_history = expired();
    no_history.first_available_slot = None;
    assert!(matches!(
        decide(&op, &Evidence::Solana(vec![no_history]), at(10), &rules()),
        Action::ReadMore(_)
    ));
}

#[test]
fn a_cancelled_blockhash_operation_is_not_sent_again_and_cancels_at_expiry() {
    let mut op = solana_op("", 1);
    op.cancel_requested = true;
    let valid = Evidence::Solana(vec![solana_view(150, vec![None])]);
    assert_eq!(
        decide(&op, &valid, at(100), &rules()),
        Action::Wait(Why::CancelPendingExpiry)
    );
    let expired = Evidence::Solana(vec![solana_view(201, vec![None])]);
    let action = decide(&op, &expired, at(100), &rules());
    let s = settled(&action);
    assert_eq!(s.state, OperationState::Cancelled);
    assert_eq!(
        s.error.as_ref().unwrap().reason,
        reasons::CANCELLED_BEFORE_LANDING
    );
    let message = &s.error.as_ref().unwrap().message;
    assert!(
        message.contains("block height 201, past the last valid 200"),
        "the proof in words: {message}"
    );
    op.state = pb::OperationState::Signed.into();
    assert_eq!(
        settled(&decide(&op, &Evidence::None, at(0), &rules())).state,
        OperationState::Cancelled,
        "never sent: cancelled at once"
    );
}

#[test]
fn durable_nonce_operations_live_while_the_nonce_holds() {
    let mut op = solana_op("NonceAcct", 1);
    let with_nonce = |value: &str| {
        let mut v = solana_view(1_000, vec![None]);
        v.nonce_value = Some(Some(value.into()));
        Evidence::Solana(vec![v])
    };
    assert_eq!(
        decide(&op, &with_nonce("Hash1"), at(10), &rules()),
        Action::Send(1)
    );
    assert!(matches!(
        decide(&op, &with_nonce("Hash2"), at(10), &rules()),
        Action::Resign(e) if e.nonce_value == "Hash2"
    ));
    op.cancel_requested = true;
    assert_eq!(
        decide(&op, &with_nonce("Hash1"), at(10), &rules()),
        Action::Replace(Replacement::Cancel)
    );
    let mut missing = solana_view(1_000, vec![None]);
    missing.nonce_value = Some(None);
    assert_eq!(
        decide(&op, &Evidence::Solana(vec![missing]), at(10), &rules()),
        Action::ReadMore(Why::Unreadable)
    );
    op.attempts.push(pb::Attempt {
        tx_id: "Sig2".into(),
        reason: "cancel".into(),
        ..accepted(2, 1)
    });
    let landed = Evidence::Solana(vec![solana_view(
        1_000,
        vec![None, status(Commitment::Finalized, None)],
    )]);
    let action = decide(&op, &landed, at(10), &rules());
    assert_eq!(settled(&action).state, OperationState::Cancelled);
    assert_eq!(
        settled(&action).error.as_ref().unwrap().reason,
        reasons::CANCELLED_ON_CHAIN
    );
}

/// Every view in which something is unread, null or pruned.
fn partial_evm_views() -> Vec<EvmView> {
    let mut views = Vec::new();
    for nonce in [None, Some(6), Some(7), Some(8), Some(9)] {
        for head_number in [0, 99, 100, 102, 1_000] {
            views.push(view("http://a:1", head_number, nonce, None));
            let mut not_canonical = view("http://a:1", head_number, nonce, Some(&tx(99)));
            not_canonical.landed.as_mut().unwrap().canonical_hash = None;
            views.push(not_canonical);
        }
    }
    views
}

#[test]
fn nothing_unread_null_or_pruned_ever_settles() {
    let ops = [
        evm_op(vec![accepted(1, 0)]),
        evm_op(vec![accepted(1, 0), accepted(2, 10)]),
        {
            let mut op = evm_op(vec![accepted(1, 0)]);
            op.cancel_requested = true;
            op
        },
    ];
    let views = partial_evm_views();
    for op in &ops {
        for a in &views {
            for b in &views {
                let evidence = evm(vec![a.clone(), b.clone()]);
                for now in [at(1), at(100), at(100_000)] {
                    let action = decide(op, &evidence, now, &rules());
                    assert!(
                        !matches!(action, Action::Settle(_) | Action::Resign(_)),
                        "{action:?} from {evidence:?}"
                    );
                }
            }
        }
    }
    // Solana: every combination of missing fields.
    for nonce_account in ["", "NonceAcct"] {
        let op = solana_op(nonce_account, 2);
        for height in [None, Some(150), Some(201)] {
            for first in [None, Some(0), Some(51)] {
                for nonce in [None, Some(None), Some(Some("Hash2".to_owned()))] {
                    for (statuses, statuses_slot) in
                        [None, Some(vec![None]), Some(vec![None, None])]
                            .into_iter()
                            .flat_map(|s| [None, Some(100), Some(1_000)].map(|at| (s.clone(), at)))
                    {
                        // A blockhash's expiry rests on the height, a nonce's on its value, each
                        // read at a slot the statuses' node must have reached.
                        let (lifetime_read, proven_at) = if nonce_account.is_empty() {
                            (height.is_some(), height.map(|h| h + 20))
                        } else {
                            (matches!(nonce, Some(Some(_))), Some(100))
                        };
                        let complete = lifetime_read
                            && first == Some(0)
                            && statuses.as_ref().is_some_and(|s| s.len() == 2)
                            && statuses_slot >= proven_at;
                        let view = SolanaView {
                            endpoint: "http://sol:1".into(),
                            commitment: Commitment::Finalized,
                            block_height: height,
                            height_slot: height.map(|h| h + 20),
                            first_available_slot: first,
                            nonce_value: nonce.clone(),
                            nonce_slot: Some(100),
                            statuses,
                            statuses_slot,
                        };
                        let action = decide(&op, &Evidence::Solana(vec![view]), at(50), &rules());
                        if !complete {
                            assert!(
                                !matches!(action, Action::Settle(_) | Action::Resign(_)),
                                "{action:?}"
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn a_replacement_signed_but_never_sent_goes_out() {
    // The broadcaster crashed between the signer's commit and recording the send: the fee
    // bump is stored, never sent; the first attempt may still land.
    let op = evm_op(vec![accepted(1, 0), signed_never_sent(2)]);
    let evidence = evm(vec![view("http://a:1", 101, Some(7), None)]);
    assert_eq!(decide(&op, &evidence, at(11), &rules()), Action::Send(2));
}

// Tests added for mutants that survived `cargo mutants -p sigcast-protocol` (README, "How we
// know it holds"): each pins a decision or a recorded fact no other test of this crate did.

#[test]
fn two_endpoints_showing_the_same_transaction_at_depth_agree() {
    let op = evm_op(vec![accepted(1, 0)]);
    let ours = tx(1);
    let both = evm(vec![
        view("http://a:1", 102, Some(8), Some(&ours)),
        view("http://b:1", 103, Some(8), Some(&ours)),
    ]);
    let action = decide(&op, &both, at(11), &rules());
    let s = settled(&action);
    assert_eq!(s.state, OperationState::Confirmed);
    // The evidence names where and when it was read, and the block.
    let evidence = s.evidence.as_ref().unwrap();
    assert_eq!(evidence.endpoint, "http://a:1");
    assert_eq!(evidence.read_time, Some(at(11).into()));
    assert_eq!(
        (
            evidence.tx_id.as_str(),
            evidence.block_number,
            evidence.block_hash.as_str()
        ),
        (ours.as_str(), 100, "0xb100")
    );
}

#[test]
fn an_older_record_with_a_send_time_and_no_send_count_is_not_sent_at_every_pass() {
    // Records written before `sends` existed carry a send time and 0 sends: they were sent.
    let mut op = evm_op(vec![accepted(1, 0)]);
    op.attempts[0].sends = 0;
    let free = evm(vec![view("http://a:1", 50, Some(7), None)]);
    assert_eq!(
        decide(&op, &free, at(2), &rules()),
        Action::Wait(Why::InFlight(at(6)))
    );
}

#[test]
fn a_send_whose_answer_is_not_recorded_yet_is_not_gap_filled() {
    // Recorded as being sent (a crash before its answer): pending, not refused.
    let mut op = evm_op(vec![attempt(
        1,
        AttemptReason::Initial,
        pb::AttemptOutcome::Pending,
        false,
        0,
    )]);
    op.attempts[0].outcome_time = None;
    let free = evm(vec![view("http://a:1", 50, Some(7), None)]);
    assert_eq!(decide(&op, &free, at(7), &rules()), Action::Send(1));
    // Refused on a resend after it may have landed: it may still, so no gap fill either.
    let mut resent = evm_op(vec![attempt(
        1,
        AttemptReason::Initial,
        pb::AttemptOutcome::Rejected,
        true,
        0,
    )]);
    resent.error = None;
    assert_eq!(decide(&resent, &free, at(7), &rules()), Action::Send(1));
}

#[test]
fn a_sent_operation_is_judged_from_the_moment_its_check_is_due() {
    let op = evm_op(vec![accepted(1, 0)]);
    let due = at(0) + rules().check_after;
    assert_eq!(
        decide(
            &op,
            &Evidence::None,
            due - Duration::from_millis(1),
            &rules()
        ),
        Action::Wait(Why::Paced(due))
    );
    assert_ne!(
        decide(&op, &Evidence::None, due, &rules()),
        Action::Wait(Why::Paced(due)),
        "at the due time it is judged"
    );
}

#[test]
fn a_nonce_read_before_the_signing_slot_proves_no_advance() {
    // Signed over the value a confirmed read showed at slot 50; a finalized read of an earlier
    // slot still shows the value before it. Taken as an advance past ours, the re-sign would
    // land beside the first (found by the simulation, seed 5 of the Solana budget).
    let op = solana_op("NonceAcct", 1);
    let view = |slot| SolanaView {
        nonce_value: Some(Some("Hash0".into())),
        nonce_slot: slot,
        ..solana_view(1_000, vec![None])
    };
    for before in [Some(49), None] {
        assert_eq!(
            solana::lifetime(&op, &view(before), at(10)),
            solana::Lifetime::Unknown(Why::NonceReadBeforeSigning),
            "read at {before:?}"
        );
        assert_eq!(
            decide(&op, &Evidence::Solana(vec![view(before)]), at(10), &rules()),
            Action::ReadMore(Why::NonceReadBeforeSigning)
        );
    }
    assert!(
        matches!(
            solana::lifetime(&op, &view(Some(50)), at(10)),
            solana::Lifetime::Over(e) if e.nonce_value == "Hash0" && e.nonce_slot == 50
        ),
        "read at the signing slot itself, another value is past ours; the proof keeps the slot"
    );
    assert_eq!(
        Why::NonceReadBeforeSigning.to_string(),
        "the nonce account was read before the signing slot"
    );
}

#[test]
fn a_blockhash_is_valid_through_its_last_valid_block_height() {
    // Declaring it expired one block early would re-sign while the first could still land.
    let op = solana_op("", 1);
    let view = |height| SolanaView {
        first_available_slot: Some(5),
        ..solana_view(height, vec![None])
    };
    assert_eq!(
        solana::lifetime(&op, &view(200), at(10)),
        solana::Lifetime::Valid,
        "block 200 may still include a transaction valid through 200"
    );
    let solana::Lifetime::Over(evidence) = solana::lifetime(&op, &view(201), at(10)) else {
        panic!("past its last valid block height, with every status empty");
    };
    assert_eq!(evidence.endpoint, "http://sol:1");
    assert_eq!(evidence.read_time, Some(at(10).into()));
    assert_eq!(
        evidence.first_available_slot, 5,
        "how far back the history reached"
    );
    assert_eq!(evidence.commitment, "finalized");
}

#[test]
fn a_solana_landing_is_settled_with_where_and_when_it_was_read() {
    let op = solana_op("", 1);
    let landed = Evidence::Solana(vec![solana_view(
        100,
        vec![status(Commitment::Finalized, None)],
    )]);
    let action = decide(&op, &landed, at(10), &rules());
    let s = settled(&action);
    let evidence = s.evidence.as_ref().unwrap();
    assert_eq!(
        (
            evidence.endpoint.as_str(),
            evidence.tx_id.as_str(),
            evidence.block_number,
            evidence.head,
            evidence.commitment.as_str()
        ),
        ("http://sol:1", "Sig1", 77, 100, "finalized")
    );
    assert_eq!(evidence.read_time, Some(at(10).into()));
}

#[test]
fn a_durable_nonce_operation_cancelled_before_its_send_is_not_settled_unsent() {
    // Its nonce value does not expire: only advancing the nonce proves nothing can land.
    let mut op = solana_op("NonceAcct", 1);
    op.state = pb::OperationState::Signed.into();
    op.attempts[0].send_time = None;
    op.attempts[0].sends = 0;
    op.cancel_requested = true;
    assert!(!matches!(
        decide(&op, &Evidence::None, at(1), &rules()),
        Action::Settle(_)
    ));
    let mut blockhash = solana_op("", 1);
    blockhash.state = pb::OperationState::Signed.into();
    blockhash.attempts[0].send_time = None;
    blockhash.attempts[0].sends = 0;
    blockhash.cancel_requested = true;
    let action = decide(&blockhash, &Evidence::None, at(1), &rules());
    assert_eq!(settled(&action).state, OperationState::Cancelled);
}

#[test]
fn recorded_outcomes_and_settlements_are_what_they_say() {
    let mut op = evm_op(vec![attempt(
        1,
        AttemptReason::Initial,
        pb::AttemptOutcome::Pending,
        false,
        0,
    )]);
    op.error = Some(pb::OperationError {
        reason: reasons::SEND_REJECTED.into(),
        message: "nonce too low".into(),
    });
    record::record_outcome(&mut op, 1, "http://a:1", &SendOutcome::Accepted, at(1));
    assert_eq!(op.attempts[0].outcome(), pb::AttemptOutcome::Accepted);
    assert!(op.attempts[0].may_land);
    assert_eq!(op.error, None, "its own transaction is in play again");
    record::record_outcome(&mut op, 1, "http://a:1", &SendOutcome::Unknown, at(2));
    assert_eq!(op.attempts[0].outcome(), pb::AttemptOutcome::Unknown);
    // A self-transfer's acceptance keeps the reason the operation's own transaction failed.
    op.attempts.push(attempt(
        2,
        AttemptReason::GapFill,
        pb::AttemptOutcome::Pending,
        false,
        3,
    ));
    op.error = Some(pb::OperationError {
        reason: reasons::SEND_REJECTED.into(),
        message: "insufficient funds".into(),
    });
    record::record_outcome(&mut op, 2, "http://a:1", &SendOutcome::Accepted, at(4));
    assert_eq!(op.error.as_ref().unwrap().reason, reasons::SEND_REJECTED);

    let settlement = Settlement {
        state: OperationState::Rejected,
        result: None,
        error: Some(pb::OperationError {
            reason: reasons::NEVER_APPLIED.into(),
            message: "gap filled".into(),
        }),
        evidence: Some(pb::Evidence {
            endpoint: "http://a:1".into(),
            ..Default::default()
        }),
    };
    record::settle(&mut op, &settlement);
    assert_eq!(op.state(), pb::OperationState::Rejected);
    assert_eq!(op.error, settlement.error);
    assert_eq!(op.evidence, settlement.evidence);
}

#[test]
fn names_in_logs_and_metrics_are_stable() {
    for (action, name) in [
        (Action::Wait(Why::Terminal), "wait"),
        (Action::ReadMore(Why::Unread), "read_more"),
        (Action::Sign, "sign"),
        (Action::Send(1), "send"),
        (Action::Replace(Replacement::Cancel), "replace"),
    ] {
        assert_eq!(action.name(), name);
    }
    assert_eq!(Why::Unread.to_string(), "no endpoint read");
    for commitment in [
        Commitment::Processed,
        Commitment::Confirmed,
        Commitment::Finalized,
    ] {
        assert_eq!(Commitment::parse(commitment.as_str()), commitment);
        assert_eq!(commitment.to_string(), commitment.as_str());
    }
    assert_eq!(Commitment::Finalized.as_str(), "finalized");
    assert_eq!(Commitment::parse("anything else"), Commitment::Processed);
    assert_eq!(Evidence::None.endpoints_read(), 0);
    assert_eq!(
        evm(vec![
            view("http://a:1", 1, None, None),
            view("http://b:1", 1, None, None)
        ])
        .endpoints_read(),
        2
    );
    assert_eq!(
        Evidence::Solana(vec![solana_view(1, vec![])]).endpoints_read(),
        1
    );
}

#[test]
fn an_expiry_is_proven_only_by_statuses_of_a_node_that_had_reached_it() {
    // Behind one URL, the height (past the last valid one) came from a node ahead, the empty
    // statuses from a node behind the slot the transaction landed at (review, fourteenth
    // session): re-signing on them would send the transfer twice.
    let op = solana_op("", 1);
    let view = |statuses_slot| SolanaView {
        height_slot: Some(260),
        statuses_slot,
        ..solana_view(201, vec![None])
    };
    for behind in [Some(100), Some(259), None] {
        assert_eq!(
            solana::lifetime(&op, &view(behind), at(10)),
            solana::Lifetime::Unknown(Why::StatusesBehind),
            "statuses at {behind:?}"
        );
        assert_eq!(
            decide(&op, &Evidence::Solana(vec![view(behind)]), at(10), &rules()),
            Action::ReadMore(Why::StatusesBehind)
        );
    }
    let solana::Lifetime::Over(proof) = solana::lifetime(&op, &view(Some(300)), at(10)) else {
        panic!("statuses of a node past the height's slot: the proof")
    };
    // The proof records both slots, for whoever audits it.
    assert_eq!((proof.height_slot, proof.statuses_slot), (260, 300));
    assert!(matches!(
        solana::lifetime(&op, &view(Some(260)), at(10)),
        solana::Lifetime::Over(_)
    ));
    // A durable nonce's advance is proven at the slot its account was read at.
    let nonce_op = solana_op("NonceAcct", 1);
    let advanced = |statuses_slot| SolanaView {
        nonce_value: Some(Some("Hash9".into())),
        nonce_slot: Some(300),
        statuses_slot,
        ..solana_view(201, vec![None])
    };
    assert_eq!(
        solana::lifetime(&nonce_op, &advanced(Some(299)), at(10)),
        solana::Lifetime::Unknown(Why::StatusesBehind)
    );
    assert!(matches!(
        solana::lifetime(&nonce_op, &advanced(Some(300)), at(10)),
        solana::Lifetime::Over(_)
    ));
}

#[test]
fn a_landing_without_its_receipt_is_settled_from_a_view_that_read_it() {
    // The first endpoint identified the transaction deep but pruned its receipts; the second
    // read the receipt. Settled from the second, not ReceiptMissing at every pass (review,
    // fourteenth session).
    let op = evm_op(vec![accepted(1, 0)]);
    let mut pruned = view("http://pruned:1", 102, Some(8), Some(&tx(1)));
    pruned.landed.as_mut().unwrap().success = None;
    let archive = view("http://archive:1", 102, Some(8), Some(&tx(1)));
    assert_eq!(
        decide(&op, &evm(vec![pruned.clone()]), at(11), &rules()),
        Action::ReadMore(Why::ReceiptMissing)
    );
    let both = decide(&op, &evm(vec![pruned, archive]), at(11), &rules());
    let settlement = settled(&both);
    assert_eq!(settlement.state, OperationState::Confirmed);
    assert_eq!(
        settlement.evidence.as_ref().map(|e| e.endpoint.as_str()),
        Some("http://archive:1")
    );
}

#[test]
fn a_re_sign_refused_for_good_is_rejected_on_its_proof() {
    let op = solana_op("", 1);
    let Action::Resign(proof) = decide(
        &op,
        &Evidence::Solana(vec![solana_view(201, vec![None])]),
        at(10),
        &rules(),
    ) else {
        panic!("past its last valid height, every status empty: a re-sign")
    };
    let settlement =
        solana::resign_refused(&op, proof.clone(), "4321 lamports exceed max_lamports");
    assert_eq!(settlement.state, OperationState::Rejected);
    assert_eq!(settlement.evidence, Some(proof));
    let error = settlement.error.unwrap();
    assert_eq!(error.reason, reasons::SIGNER_REFUSED);
    assert!(
        error.message.contains("max_lamports") && error.message.contains("past the last valid 200"),
        "{}",
        error.message
    );
}

#[test]
fn each_reason_has_a_label_of_its_own_for_metrics() {
    let at = SystemTime::UNIX_EPOCH;
    let reasons = [
        Why::Terminal,
        Why::Paced(at),
        Why::InFlight(at),
        Why::Unread,
        Why::Confirming,
        Why::ReceiptMissing,
        Why::NonceUsedUnidentified,
        Why::DepthUnproven,
        Why::Conflicting,
        Why::Unreadable,
        Why::HistoryTooShort,
        Why::CancelPendingExpiry,
        Why::NonceReadBeforeSigning,
        Why::StatusesBehind,
        Why::BehindEarlierNonce,
        Why::NoAttempt,
    ];
    let labels: std::collections::BTreeSet<&str> = reasons.iter().map(Why::label).collect();
    assert_eq!(labels.len(), reasons.len(), "{labels:?}");
    for label in &labels {
        assert!(
            !label.is_empty() && label.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
            "{label}"
        );
    }
    assert_eq!(Why::DepthUnproven.label(), "depth_unproven");
    assert_eq!(Why::HistoryTooShort.label(), "history_too_short");
}
