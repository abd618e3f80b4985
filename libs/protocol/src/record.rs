//! How facts and decisions change an operation's record: pure functions over the stored
//! message, applied inside the store transaction that re-read it.

use crate::Settlement;
use sigcast_domain::{AttemptReason, OperationState};
use sigcast_proto::{pb, state_to_proto};
use std::time::SystemTime;

/// Stable `OperationError.reason` values. Callers match on them: part of the API.
pub mod reasons {
    /// The node refused the operation's own transaction (funds, gas, signature…).
    pub const SEND_REJECTED: &str = "SEND_REJECTED";
    /// The node refused the operation's transaction for its fees.
    pub const UNDERPRICED: &str = "UNDERPRICED";
    /// Another transaction of the account, identified in the evidence, used the nonce.
    pub const NONCE_CONSUMED_EXTERNALLY: &str = "NONCE_CONSUMED_EXTERNALLY";
    /// Every send was refused and a zero-value self-transfer took the nonce.
    pub const NEVER_APPLIED: &str = "NEVER_APPLIED";
    /// The signer refused the operation (no key, policy).
    pub const SIGNER_REFUSED: &str = "SIGNER_REFUSED";
    /// Landed and failed in execution: fee paid, not retried.
    pub const EXECUTION_FAILED: &str = "EXECUTION_FAILED";
    /// Cancelled before its signed transaction left the store.
    pub const CANCELLED_BEFORE_SENDING: &str = "CANCELLED_BEFORE_SENDING";
    /// Cancelled once nothing of it could land any more (expiry, nonce advanced).
    pub const CANCELLED_BEFORE_LANDING: &str = "CANCELLED_BEFORE_LANDING";
    /// Cancelled by a replacement that landed at its nonce.
    pub const CANCELLED_ON_CHAIN: &str = "CANCELLED_ON_CHAIN";
}

/// What a node answered to one send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendOutcome {
    /// It took the transaction, or already had it.
    Accepted,
    /// It refused the transaction; a refusal of bytes it never had means they were never
    /// applied.
    Refused {
        /// For its fees, or for anything else.
        underpriced: bool,
        /// The node's words.
        message: String,
    },
    /// No answer, a 5xx, a reset, or words not recognised: resolved only from chain state.
    Unknown,
}

/// The attempt numbered `number`.
pub fn attempt_mut(op: &mut pb::Operation, number: u32) -> Option<&mut pb::Attempt> {
    op.attempts.iter_mut().find(|a| a.number == number)
}

/// The attempt reason, typed; unknown text reads as the first signature's.
pub fn reason_of(attempt: &pb::Attempt) -> AttemptReason {
    AttemptReason::parse(&attempt.reason).unwrap_or(AttemptReason::Initial)
}

/// The self-transfer (cancel or gap fill) that takes the operation's nonce and that nothing
/// replaces, if there is one. Every one is final but a cancel that is the newest attempt and
/// every send of which was refused (for its fees, as the broadcaster asks): a cancel at a
/// higher price may replace that one (`cancel_replacing`: a cancel is asked for, to replace
/// attempt `replaces`). Either takes the nonce without the operation's effect.
pub fn final_self_transfer(
    op: &pb::Operation,
    cancel_replacing: Option<u32>,
) -> Option<&pb::Attempt> {
    let refused_cancel = |a: &pb::Attempt| {
        reason_of(a) == AttemptReason::Cancel
            && a.outcome() == pb::AttemptOutcome::Rejected
            && !a.may_land
    };
    let replaceable = op
        .attempts
        .last()
        .filter(|last| cancel_replacing == Some(last.number) && refused_cancel(last));
    // The newest: after a cancel priced again, the one that stands.
    op.attempts
        .iter()
        .rev()
        .find(|a| reason_of(a).takes_the_nonce_instead())
        .filter(|_| replaceable.is_none())
}

/// Whether the operation has a self-transfer (cancel or gap fill) that takes its nonce.
pub fn has_self_transfer(op: &pb::Operation) -> bool {
    op.attempts
        .iter()
        .any(|a| reason_of(a).takes_the_nonce_instead())
}

/// Records that attempt `number` is about to be sent: SIGNED becomes SENT. Returns `false`
/// (and changes nothing) if there is no such attempt.
pub fn record_sending(op: &mut pb::Operation, number: u32, now: SystemTime) -> bool {
    let Some(attempt) = attempt_mut(op, number) else {
        return false;
    };
    attempt.send_time.get_or_insert_with(|| now.into());
    attempt.last_send_time = Some(now.into());
    attempt.sends = attempt.sends.saturating_add(1);
    attempt.set_outcome(pb::AttemptOutcome::Pending);
    if op.state() == pb::OperationState::Signed {
        op.set_state(state_to_proto(OperationState::Sent));
    }
    true
}

/// [`record_sending`] for an attempt the signer just made on a decision read from an older
/// record: declined (`false`, nothing changed) if a cancel was asked for since and the attempt
/// does not take the nonce instead (a cancel, a gap fill). Its bytes never left the store, so
/// nothing of it can land; the next decision, which sees the cancel, takes over.
pub fn record_sending_new(op: &mut pb::Operation, number: u32, now: SystemTime) -> bool {
    let takes_the_nonce = op
        .attempts
        .iter()
        .find(|a| a.number == number)
        .is_some_and(|a| reason_of(a).takes_the_nonce_instead());
    if op.cancel_requested && !takes_the_nonce {
        return false;
    }
    record_sending(op, number, now)
}

/// Records that the signer refused to replace attempt `number` at the chain's fee cap.
/// Returns `false` (and changes nothing) if there is no such attempt.
pub fn record_held_at_fee_cap(op: &mut pb::Operation, number: u32, now: SystemTime) -> bool {
    let Some(attempt) = attempt_mut(op, number) else {
        return false;
    };
    attempt.fee_cap_time = Some(now.into());
    true
}

/// Records when the bytes of a send of attempt `number` left, if that is after the send was
/// recorded: a send is recorded before its bytes leave, and an account's first sends are
/// recorded together and then leave one after another, the last of a long batch seconds after
/// its record. The next send is due a period after the bytes left, not after the record.
pub fn record_left(op: &mut pb::Operation, number: u32, left: SystemTime) {
    let Some(attempt) = attempt_mut(op, number) else {
        return;
    };
    let recorded = last_sent(attempt);
    attempt.last_send_time = Some(recorded.map_or(left, |recorded| recorded.max(left)).into());
}

/// Records what `endpoint` answered to a send of attempt `number`.
pub fn record_outcome(
    op: &mut pb::Operation,
    number: u32,
    endpoint: &str,
    outcome: &SendOutcome,
    now: SystemTime,
) {
    let Some(attempt) = attempt_mut(op, number) else {
        return;
    };
    attempt.endpoint = endpoint.to_owned();
    attempt.outcome_time = Some(now.into());
    let self_transfer = reason_of(attempt).takes_the_nonce_instead();
    match outcome {
        SendOutcome::Accepted | SendOutcome::Unknown => {
            attempt.set_outcome(if *outcome == SendOutcome::Accepted {
                pb::AttemptOutcome::Accepted
            } else {
                pb::AttemptOutcome::Unknown
            });
            attempt.may_land = true;
            // The operation's own transaction is in play again: an earlier refusal no longer
            // describes it. (A self-transfer's acceptance says nothing of why the operation's
            // own transaction was refused: that reason stays as the evidence.)
            if !self_transfer {
                op.error = None;
            }
        }
        SendOutcome::Refused {
            underpriced,
            message,
        } => {
            attempt.set_outcome(pb::AttemptOutcome::Rejected);
            // Refusing bytes it already took (or may have) does not undo that: only a refusal
            // of an attempt that never may have landed is evidence.
            if !attempt.may_land {
                op.error = Some(pb::OperationError {
                    reason: if *underpriced {
                        reasons::UNDERPRICED
                    } else {
                        reasons::SEND_REJECTED
                    }
                    .into(),
                    message: message.clone(),
                });
            }
        }
    }
}

/// Settles the operation as decided.
pub fn settle(op: &mut pb::Operation, settlement: &Settlement) {
    op.set_state(state_to_proto(settlement.state));
    op.result = settlement.result.clone();
    op.error = settlement.error.clone();
    op.evidence = settlement.evidence.clone();
}

/// The latest of the attempt's recorded times: when it was last sent or answered.
pub(crate) fn last_activity(attempt: &pb::Attempt) -> Option<SystemTime> {
    [
        attempt.last_send_time.as_ref(),
        attempt.outcome_time.as_ref(),
        attempt.send_time.as_ref(),
    ]
    .into_iter()
    .flatten()
    .filter_map(|t| SystemTime::try_from(*t).ok())
    .max()
}

/// Whether `attempt` was ever recorded as sent (a send is recorded before its bytes leave).
pub fn was_sent(attempt: &pb::Attempt) -> bool {
    attempt.sends > 0 || attempt.send_time.is_some()
}

/// When the attempt was last sent (its first send for records written before `last_send_time`).
pub(crate) fn last_sent(attempt: &pb::Attempt) -> Option<SystemTime> {
    attempt
        .last_send_time
        .as_ref()
        .or(attempt.send_time.as_ref())
        .and_then(|t| SystemTime::try_from(*t).ok())
}

/// When the signer last refused to replace the attempt at the fee cap.
pub(crate) fn held_at_fee_cap(attempt: &pb::Attempt) -> Option<SystemTime> {
    attempt
        .fee_cap_time
        .as_ref()
        .and_then(|t| SystemTime::try_from(*t).ok())
}

/// When the attempt was first sent.
pub(crate) fn first_sent(attempt: &pb::Attempt) -> Option<SystemTime> {
    attempt
        .send_time
        .as_ref()
        .and_then(|t| SystemTime::try_from(*t).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn op() -> pb::Operation {
        pb::Operation {
            op_id: "op".into(),
            state: pb::OperationState::Signed.into(),
            attempts: vec![pb::Attempt {
                number: 1,
                tx_id: "0x01".into(),
                outcome: pb::AttemptOutcome::Pending.into(),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn an_attempt_counts_as_sent_by_its_count_of_sends_or_its_send_time() {
        // `record_sending` sets both; either alone still says the bytes may have left.
        let mut attempt = op().attempts.remove(0);
        assert!(!was_sent(&attempt));
        attempt.sends = 1;
        assert!(was_sent(&attempt), "counted");
        attempt.sends = 0;
        attempt.send_time = Some(SystemTime::UNIX_EPOCH.into());
        assert!(was_sent(&attempt), "timed");
    }

    #[test]
    fn a_refused_resend_of_bytes_that_may_land_is_no_evidence() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let mut op = op();
        assert!(record_sending(&mut op, 1, t0));
        assert_eq!(op.state(), pb::OperationState::Sent);
        record_outcome(&mut op, 1, "http://a:1", &SendOutcome::Accepted, t0);
        assert!(op.attempts[0].may_land);
        record_sending(&mut op, 1, t0 + Duration::from_secs(6));
        let refused = SendOutcome::Refused {
            underpriced: true,
            message: "max fee per gas less than block base fee".into(),
        };
        record_outcome(
            &mut op,
            1,
            "http://a:1",
            &refused,
            t0 + Duration::from_secs(6),
        );
        let a = &op.attempts[0];
        assert_eq!((a.sends, a.may_land), (2, true));
        assert_eq!(a.send_time, Some(t0.into()), "first send time kept");
        assert_eq!(op.error, None, "the refusal of a resend is not evidence");
    }

    #[test]
    fn a_refused_first_send_is_recorded_as_the_operation_s_error() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let mut op = op();
        record_sending(&mut op, 1, t0);
        let refused = SendOutcome::Refused {
            underpriced: false,
            message: "insufficient funds".into(),
        };
        record_outcome(&mut op, 1, "http://a:1", &refused, t0);
        assert_eq!(op.error.as_ref().unwrap().reason, reasons::SEND_REJECTED);
        assert!(!op.attempts[0].may_land);
        assert!(!record_sending(&mut op, 7, t0), "no such attempt");
    }
}
