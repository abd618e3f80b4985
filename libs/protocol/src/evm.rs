//! Decisions for an EVM operation in flight: settle only from a transaction seen at its
//! nonce, on an endpoint's canonical chain at the confirmation depth; otherwise keep its
//! transactions in play.

use crate::record::{
    self, first_sent, has_self_transfer, held_at_fee_cap, last_sent, reason_of, reasons,
};
use crate::{Action, EvmLanded, EvmView, Replacement, Rules, Settlement, Why};
use sigcast_domain::{AttemptReason, OperationState};
use sigcast_proto::pb;
use std::time::SystemTime;

/// The operation's nonce, once signed.
pub fn nonce_of(op: &pb::Operation) -> Option<u64> {
    match &op.signing {
        Some(pb::operation::Signing::Evm(evm)) => Some(evm.nonce),
        _ => None,
    }
}

/// How deep `landed` is on the view's chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Depth {
    /// Off the view's canonical chain, or not yet at the confirmation depth under its head.
    Shallow,
    /// At the depth under the head, but no descendant that deep was linked to its block: the
    /// head and the block may be of two chains (nodes behind one URL).
    Unproven,
    /// On the canonical chain at the confirmation depth, the depth past the block itself
    /// proven by a descendant linked to it.
    Deep,
}

fn depth(view: &EvmView, landed: &EvmLanded, rules: &Rules) -> Depth {
    let under =
        |top: &crate::BlockRef| (top.number.saturating_add(1)).saturating_sub(landed.block.number);
    // (A block above the head is under it by none: shallow at any depth.)
    if !landed.is_canonical() || under(&view.head) < rules.confirmations.max(1) {
        Depth::Shallow
    } else if rules.confirmations <= 1
        || landed
            .descendant
            .as_ref()
            .is_some_and(|top| under(top) >= rules.confirmations)
    {
        Depth::Deep
    } else {
        Depth::Unproven
    }
}

/// The attempt whose transaction `tx` is.
fn attempt_of<'a>(op: &'a pb::Operation, tx: &str) -> Option<&'a pb::Attempt> {
    op.attempts
        .iter()
        .find(|a| a.tx_id.eq_ignore_ascii_case(tx))
}

/// SENT: what the views show.
pub(crate) fn decide_sent(
    op: &pb::Operation,
    views: &[EvmView],
    now: SystemTime,
    rules: &Rules,
) -> Action {
    let Some(nonce) = nonce_of(op) else {
        return Action::Wait(Why::NoAttempt);
    };
    if views.is_empty() {
        return Action::ReadMore(Why::Unread);
    }
    // Positive evidence anywhere settles, unless another endpoint shows another transaction
    // at the nonce just as deep (a fork between endpoints: wait for it to resolve).
    let mut settled: Option<(&EvmView, &EvmLanded)> = None;
    let (mut shallow, mut unproven) = (false, false);
    for view in views {
        let Some(landed) = &view.landed else { continue };
        match depth(view, landed, rules) {
            Depth::Deep => {}
            Depth::Shallow => {
                shallow = true;
                continue;
            }
            Depth::Unproven => {
                unproven = true;
                continue;
            }
        }
        match settled {
            Some((_, first)) if !first.tx.eq_ignore_ascii_case(&landed.tx) => {
                return Action::Wait(Why::Conflicting);
            }
            // The same transaction: settled from a view that read its receipt (a node that
            // pruned receipts shows the landing without its outcome, every pass).
            Some((_, first)) if first.success.is_none() && landed.success.is_some() => {
                settled = Some((view, landed));
            }
            Some(_) => {}
            None => settled = Some((view, landed)),
        }
    }
    if let Some((view, landed)) = settled {
        return match attempt_of(op, &landed.tx) {
            Some(attempt) => match landed.success {
                Some(success) => Action::Settle(ours(op, attempt, view, landed, success, now)),
                None => Action::ReadMore(Why::ReceiptMissing),
            },
            None => Action::Settle(foreign(op, nonce, view, landed, now)),
        };
    }
    // Another endpoint may prove the depth this one could not.
    if unproven {
        return Action::ReadMore(Why::DepthUnproven);
    }
    if shallow {
        return Action::Wait(Why::Confirming);
    }
    // Nothing seen at the nonce. A nonce that moved on without a transaction identified proves
    // nothing (nodes show account state before receipts, and prune): read elsewhere or wait.
    if views
        .iter()
        .any(|v| v.account_nonce.is_some_and(|n| n > nonce))
    {
        return Action::ReadMore(Why::NonceUsedUnidentified);
    }
    let Some(freshest) = freshest(views) else {
        return Action::ReadMore(Why::Unreadable);
    };
    in_flight(op, nonce, freshest, now, rules)
}

/// Whether every send of every attempt of `op` was refused, the newest's last: nothing of
/// the operation is in any pool, and only then may a self-transfer take its nonce (a gap
/// fill). The signer signs a gap fill only on this record, read in its transaction.
pub fn all_refused(op: &pb::Operation) -> bool {
    op.attempts
        .last()
        .is_some_and(|newest| newest.outcome() == pb::AttemptOutcome::Rejected)
        && op.attempts.iter().all(|a| !a.may_land)
}

/// Of the views that read the account's nonce, the one at the highest head: what an operation
/// whose nonce is free on chain is decided on.
fn freshest(views: &[EvmView]) -> Option<&EvmView> {
    views
        .iter()
        .filter(|v| v.account_nonce.is_some())
        .max_by_key(|v| v.head.number)
}

/// The base fee per gas of the head a replacement is decided at, from the evidence it was
/// decided on: the least the signer must price the replacement for, whatever its own fee read
/// answers (an endpoint behind that head would price a bump under it, for the next bump period
/// to find it priced out again). `None` where that head carries none.
pub fn replacement_base_fee(evidence: &crate::Evidence) -> Option<u128> {
    match evidence {
        crate::Evidence::Evm(views) => freshest(views).and_then(|view| view.base_fee),
        _ => None,
    }
}

/// The nonce is free on chain: replace if a replacement is due and can help, else send the
/// newest attempt that may land again when it is due.
pub(crate) fn in_flight(
    op: &pb::Operation,
    nonce: u64,
    view: &EvmView,
    now: SystemTime,
    rules: &Rules,
) -> Action {
    let account_nonce = view.account_nonce;
    let Some(newest) = op.attempts.last() else {
        return Action::Wait(Why::NoAttempt);
    };
    let self_transfer = has_self_transfer(op);
    // The signer refused to replace the newest attempt at the chain's fee cap: a replacement
    // is asked for again only a bump period later (the cap may have been raised by then), not
    // at every pass; meanwhile the attempt that may land goes out again as it is.
    let held_at_cap = held_at_fee_cap(newest)
        .is_some_and(|held| now < held + rules.fee_bump_after.unwrap_or(rules.rebroadcast_after));
    if op.cancel_requested && !self_transfer && !held_at_cap {
        return Action::Replace(Replacement::Cancel);
    }
    // A replacement signed but never recorded as sent (a crash between the two, or a lost
    // race) goes out now: its bytes are stored, and nothing else would ever send it. Not one
    // that would carry the operation's effect after a cancel was asked for (a bump signed on a
    // decision read before it, with the cancel held at the fee cap).
    if never_sent(newest) && sendable(op, newest) {
        return Action::Send(newest.number);
    }
    let bumps = op
        .attempts
        .iter()
        .filter(|a| reason_of(a) == AttemptReason::FeeBump)
        .count();
    let newest_refused = newest.outcome() == pb::AttemptOutcome::Rejected && !newest.may_land;
    let underpriced = op
        .error
        .as_ref()
        .is_some_and(|e| e.reason == reasons::UNDERPRICED);
    // A cancel refused for its fees (the base fee rose past it) is priced again, as often as
    // a fee bump may be: left as it is, the cancel would wait on the fees to fall while the
    // operation's own transaction sits in pools. Held at the fee cap, its bytes go out again.
    let cancels = op
        .attempts
        .iter()
        .filter(|a| reason_of(a) == AttemptReason::Cancel)
        .count();
    if op.cancel_requested
        && reason_of(newest) == AttemptReason::Cancel
        && newest_refused
        && underpriced
        && !held_at_cap
        && u32::try_from(cancels - 1).unwrap_or(u32::MAX) < rules.max_fee_bumps
    {
        return Action::Replace(Replacement::Cancel);
    }
    // Higher fees cannot help a transaction refused for anything but its fees (the balance,
    // say, which a bump only strains more).
    let refused_for_more_than_fees = newest_refused && !underpriced;
    let bumps_left = u32::try_from(bumps).unwrap_or(u32::MAX) < rules.max_fee_bumps
        && !refused_for_more_than_fees;
    if newest_refused && !self_transfer {
        if underpriced && bumps_left {
            if held_at_cap {
                return resend_target_when_due(op, now, rules);
            }
            return Action::Replace(Replacement::FeeBump);
        }
        if all_refused(op) {
            // Every send of every attempt was refused: nothing of the operation is in any
            // pool. A self-transfer takes the nonce so the account's later nonces proceed.
            return Action::Replace(Replacement::GapFill);
        }
        // An earlier attempt may still land; it keeps the nonce.
    }
    if let Some(after) = rules
        .fee_bump_after
        .filter(|_| bumps_left && !self_transfer)
    {
        // Only the account's next nonce is held up by its fees; behind an earlier nonce a bump
        // cannot help. An attempt without a recorded send time has not waited at all.
        let waited = first_sent(newest).is_some_and(|t| now >= t + after);
        // Priced out: the head's base fee is above the most the newest attempt pays, so no
        // block like the head can hold it, and waiting out the bump period would hold the
        // account up for nothing (a backlog signed before a run of full blocks, say). Each
        // attempt is first given a rebroadcast period: a bump of a moment ago, priced from
        // fees an endpoint behind this head answered, may be under it too, and a lagging or
        // lying endpoint must not spend every bump in seconds.
        let priced_out = first_sent(newest).is_some_and(|t| now >= t + rules.rebroadcast_after)
            && view
                .base_fee
                .zip(max_fee_per_gas(newest))
                .is_some_and(|(base_fee, max_fee)| base_fee > max_fee);
        if (waited || priced_out) && !held_at_cap && account_nonce == Some(nonce) {
            return Action::Replace(Replacement::FeeBump);
        }
    }
    resend_target_when_due(op, now, rules)
}

/// The most `attempt` pays per gas, where it was recorded.
fn max_fee_per_gas(attempt: &pb::Attempt) -> Option<u128> {
    attempt.max_fee_per_gas.parse().ok()
}

/// The attempt that goes out again, when due: a cancel asked for and signed, the newest cancel
/// unless it can never pass; else the newest that may still land, else the newest that may be
/// sent; none may (a cancel asked for before anything was sent): nothing.
fn resend_target_when_due(op: &pb::Operation, now: SystemTime, rules: &Rules) -> Action {
    let mut newest_first = op.attempts.iter().rev();
    // The operation's transaction may still land from a pool, but no send of ours helps the
    // effect the caller asked to cancel. Unless the cancel can never pass: refused for more
    // than its fees (the balance for its higher fee) and taken by no node, it would be sent
    // for ever while the operation's own transaction, which may land, waits behind it.
    let never_passes = |cancel: &pb::Attempt| {
        !cancel.may_land
            && cancel.outcome() == pb::AttemptOutcome::Rejected
            && op
                .error
                .as_ref()
                .is_none_or(|e| e.reason != reasons::UNDERPRICED)
    };
    if op.cancel_requested
        && let Some(cancel) = newest_first
            .clone()
            .find(|a| reason_of(a) == AttemptReason::Cancel)
        && !never_passes(cancel)
    {
        return resend_when_due(cancel, now, rules);
    }
    let target = newest_first
        .clone()
        .find(|a| a.may_land)
        .or_else(|| newest_first.find(|a| sendable(op, a)));
    match target {
        Some(target) => resend_when_due(target, now, rules),
        None => Action::Wait(Why::NoAttempt),
    }
}

/// Whether `attempt` was never recorded as sent: its bytes never left the store.
fn never_sent(attempt: &pb::Attempt) -> bool {
    !record::was_sent(attempt)
}

/// Whether `attempt` may go out: any that went out before, or takes the nonce instead of the
/// operation (a cancel, a gap fill); one never sent only while no cancel is asked for.
fn sendable(op: &pb::Operation, attempt: &pb::Attempt) -> bool {
    !op.cancel_requested || !never_sent(attempt) || reason_of(attempt).takes_the_nonce_instead()
}

/// What follows a replacement the signer refused at the chain's fee cap: the attempt that may
/// land keeps going out as it is, when due.
pub fn at_fee_cap(op: &pb::Operation, now: SystemTime, rules: &Rules) -> Action {
    resend_target_when_due(op, now, rules)
}

/// The same bytes again once `rebroadcast_after` passed since the last send.
pub(crate) fn resend_when_due(target: &pb::Attempt, now: SystemTime, rules: &Rules) -> Action {
    match last_sent(target) {
        Some(sent) if now < sent + rules.rebroadcast_after => {
            Action::Wait(Why::InFlight(sent + rules.rebroadcast_after))
        }
        // Due, or recorded as being sent but never sent (a crash in between).
        _ => Action::Send(target.number),
    }
}

fn evidence(view: &EvmView, landed: &EvmLanded, now: SystemTime) -> pb::Evidence {
    pb::Evidence {
        endpoint: view.endpoint.clone(),
        read_time: Some(now.into()),
        head: view.head.number,
        tx_id: landed.tx.clone(),
        block_number: landed.block.number,
        block_hash: landed.block.hash.clone(),
        ..Default::default()
    }
}

/// One of the operation's own attempts used the nonce.
fn ours(
    op: &pb::Operation,
    attempt: &pb::Attempt,
    view: &EvmView,
    landed: &EvmLanded,
    success: bool,
    now: SystemTime,
) -> Settlement {
    let result = pb::TerminalResult {
        tx_id: attempt.tx_id.clone(),
        block_number: landed.block.number,
        block_hash: landed.block.hash.clone(),
        execution_status: if success {
            pb::ExecutionStatus::Success
        } else {
            pb::ExecutionStatus::Failed
        }
        .into(),
    };
    let (state, error) = match reason_of(attempt) {
        AttemptReason::Cancel => (
            OperationState::Cancelled,
            Some(pb::OperationError {
                reason: reasons::CANCELLED_ON_CHAIN.into(),
                message: format!(
                    "the cancel {} took the nonce in block {} ({})",
                    attempt.tx_id, landed.block.number, landed.block.hash
                ),
            }),
        ),
        AttemptReason::GapFill => (
            OperationState::Rejected,
            Some(pb::OperationError {
                reason: reasons::NEVER_APPLIED.into(),
                message: format!(
                    "the node refused the operation's transaction ({}); its nonce was taken by the \
                     zero-value self-transfer {} in block {} ({}), so it can never apply",
                    op.error
                        .as_ref()
                        .map_or("no reason recorded", |e| e.message.as_str()),
                    attempt.tx_id,
                    landed.block.number,
                    landed.block.hash
                ),
            }),
        ),
        _ => (OperationState::Confirmed, None),
    };
    Settlement {
        state,
        result: Some(result),
        error,
        evidence: Some(evidence(view, landed, now)),
    }
}

/// A transaction that is none of the operation's attempts used its nonce.
fn foreign(
    op: &pb::Operation,
    nonce: u64,
    view: &EvmView,
    landed: &EvmLanded,
    now: SystemTime,
) -> Settlement {
    Settlement {
        state: OperationState::Rejected,
        result: None,
        error: Some(pb::OperationError {
            reason: reasons::NONCE_CONSUMED_EXTERNALLY.into(),
            message: format!(
                "transaction {} of account {}, none of this operation's, used its nonce {nonce} in \
                 block {} ({}), {} blocks deep on {}: the operation can never apply",
                landed.tx,
                op.account,
                landed.block.number,
                landed.block.hash,
                view.head.number.saturating_sub(landed.block.number) + 1,
                view.endpoint
            ),
        }),
        evidence: Some(evidence(view, landed, now)),
    }
}
