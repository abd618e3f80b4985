//! Decisions for a Solana operation in flight: settle from a signature's status at the
//! configured commitment; declare that nothing can land only from one endpoint that shows,
//! finalized, the blockhash expired (or the durable nonce advanced), with a history reaching
//! back to the signing slot and exactly one empty status per signature asked, answered by a
//! node that had reached the slot of that expiry.

use crate::record::{has_self_transfer, reason_of, reasons};
use crate::{Action, Commitment, Replacement, Rules, Settlement, SignatureStatus, SolanaView, Why};
use sigcast_domain::{AttemptReason, OperationState};
use sigcast_proto::pb;
use std::time::SystemTime;

/// The operation's Solana signing parameters, once signed.
pub fn signing_of(op: &pb::Operation) -> Option<&pb::SolanaSigning> {
    match &op.signing {
        Some(pb::operation::Signing::Solana(s)) => Some(s),
        _ => None,
    }
}

/// Whether the operation's transactions carry a durable nonce.
pub fn uses_durable_nonce(signing: &pb::SolanaSigning) -> bool {
    !signing.nonce_account.is_empty()
}

/// What one endpoint shows of the operation's transactions' lifetime.
#[derive(Debug, Clone, PartialEq)]
pub enum Lifetime {
    /// None of them landed and none ever can: the proof.
    Over(pb::Evidence),
    /// They may still land.
    Valid,
    /// This view proves neither.
    Unknown(Why),
}

/// What `view` proves about whether any of the operation's transactions can still land.
/// The signer re-checks a re-sign with this same function, from its own endpoints.
pub fn lifetime(op: &pb::Operation, view: &SolanaView, now: SystemTime) -> Lifetime {
    let Some(signing) = signing_of(op) else {
        return Lifetime::Unknown(Why::NoAttempt);
    };
    let Some(statuses) = &view.statuses else {
        return Lifetime::Unknown(Why::Unreadable);
    };
    if statuses.len() != op.attempts.len() {
        return Lifetime::Unknown(Why::Unreadable);
    }
    if statuses.iter().any(Option::is_some) {
        return Lifetime::Valid; // landed: not over, settled elsewhere
    }
    let over = if uses_durable_nonce(signing) {
        match &view.nonce_value {
            Some(Some(value)) if *value == signing.blockhash => false,
            // Another value is past ours only if read at or after the slot ours was read at:
            // an earlier, more final read may still show the value before ours.
            Some(Some(_)) if view.nonce_slot >= Some(signing.signing_slot) => true,
            Some(Some(_)) => return Lifetime::Unknown(Why::NonceReadBeforeSigning),
            _ => return Lifetime::Unknown(Why::Unreadable),
        }
    } else {
        match view.block_height {
            Some(height) => height > signing.last_valid_block_height,
            None => return Lifetime::Unknown(Why::Unreadable),
        }
    };
    if !over {
        return Lifetime::Valid;
    }
    // Past its lifetime on this endpoint. That proves nothing unless it is final and the
    // endpoint would remember a landing since the signature was made.
    if view.commitment != Commitment::Finalized {
        return Lifetime::Unknown(Why::Unreadable);
    }
    match view.first_available_slot {
        Some(first) if first <= signing.signing_slot => {}
        _ => return Lifetime::Unknown(Why::HistoryTooShort),
    }
    // A landing comes before the expiry (or is the advance): the node whose statuses are
    // empty must have reached the slot that was read at, or it may not have seen it.
    let proven_at = match uses_durable_nonce(signing) {
        true => view.nonce_slot,
        false => view.height_slot,
    };
    match (view.statuses_slot, proven_at) {
        (Some(statuses), Some(at)) if statuses >= at => {}
        _ => return Lifetime::Unknown(Why::StatusesBehind),
    }
    Lifetime::Over(pb::Evidence {
        endpoint: view.endpoint.clone(),
        read_time: Some(now.into()),
        head: view.block_height.unwrap_or_default(),
        last_valid_block_height: signing.last_valid_block_height,
        first_available_slot: view.first_available_slot.unwrap_or_default(),
        signing_slot: signing.signing_slot,
        nonce_value: view.nonce_value.clone().flatten().unwrap_or_default(),
        nonce_slot: view.nonce_slot.unwrap_or_default(),
        commitment: view.commitment.as_str().into(),
        height_slot: view.height_slot.unwrap_or_default(),
        statuses_slot: view.statuses_slot.unwrap_or_default(),
        ..Default::default()
    })
}

/// SENT: what the views show.
pub(crate) fn decide_sent(
    op: &pb::Operation,
    views: &[SolanaView],
    now: SystemTime,
    rules: &Rules,
) -> Action {
    let Some(signing) = signing_of(op) else {
        return Action::Wait(Why::NoAttempt);
    };
    if views.is_empty() {
        return Action::ReadMore(Why::Unread);
    }
    let mut confirming = false;
    for view in views {
        let Some(statuses) = view
            .statuses
            .as_ref()
            .filter(|s| s.len() == op.attempts.len())
        else {
            continue;
        };
        for (attempt, status) in op.attempts.iter().zip(statuses) {
            let Some(status) = status else { continue };
            if status.confirmation >= rules.solana_commitment {
                return Action::Settle(landed(attempt, view, status, now));
            }
            confirming = true;
        }
    }
    if confirming {
        return Action::Wait(Why::Confirming);
    }
    let cancel = op.cancel_requested || has_self_transfer(op);
    let mut unknown = Why::Unread;
    let mut valid = false;
    for view in views {
        match lifetime(op, view, now) {
            Lifetime::Over(evidence) if cancel => {
                return Action::Settle(Settlement {
                    state: OperationState::Cancelled,
                    result: None,
                    error: Some(pb::OperationError {
                        reason: reasons::CANCELLED_BEFORE_LANDING.into(),
                        message: format!(
                            "{} shows, finalized, {} and none of the operation's {} signatures in a \
                             history reaching slot {}: nothing of it can land",
                            evidence.endpoint,
                            over_words(signing, &evidence),
                            op.attempts.len(),
                            evidence.first_available_slot
                        ),
                    }),
                    evidence: Some(evidence),
                });
            }
            Lifetime::Over(evidence) => return Action::Resign(evidence),
            Lifetime::Valid => valid = true,
            Lifetime::Unknown(why) => unknown = why,
        }
    }
    if !valid {
        return Action::ReadMore(unknown);
    }
    let Some(newest) = op.attempts.last() else {
        return Action::Wait(Why::NoAttempt);
    };
    if op.cancel_requested && !has_self_transfer(op) {
        if !crate::solana::uses_durable_nonce(signing) {
            // The bytes left the store and may land until the blockhash expires; sending them
            // again would only help them land. Wait for the proof of expiry.
            return Action::Wait(Why::CancelPendingExpiry);
        }
        return Action::Replace(Replacement::Cancel);
    }
    crate::evm::resend_when_due(newest, now, rules)
}

/// What a re-sign the signer refuses for good (the key's policy, or no key) settles: REJECTED,
/// on the proof that decided the re-sign. It shows nothing of the operation landed or can, and
/// nothing new will be signed: asked again, the signer would refuse again at every pass.
pub fn resign_refused(op: &pb::Operation, proof: pb::Evidence, refusal: &str) -> Settlement {
    let over = signing_of(op).map_or_else(String::new, |signing| over_words(signing, &proof));
    Settlement {
        state: OperationState::Rejected,
        result: None,
        error: Some(pb::OperationError {
            reason: reasons::SIGNER_REFUSED.into(),
            message: format!(
                "{} shows, finalized, {over} and none of its {} signatures: nothing of it can \
                 land, and the signer refused to sign it again: {refusal}",
                proof.endpoint,
                op.attempts.len()
            ),
        }),
        evidence: Some(proof),
    }
}

fn over_words(signing: &pb::SolanaSigning, evidence: &pb::Evidence) -> String {
    if uses_durable_nonce(signing) {
        format!(
            "nonce account {} at {}, past the signed value {}",
            signing.nonce_account, evidence.nonce_value, signing.blockhash
        )
    } else {
        format!(
            "block height {}, past the last valid {}",
            evidence.head, evidence.last_valid_block_height
        )
    }
}

/// One of the operation's signatures landed at the configured commitment.
fn landed(
    attempt: &pb::Attempt,
    view: &SolanaView,
    status: &SignatureStatus,
    now: SystemTime,
) -> Settlement {
    let result = pb::TerminalResult {
        tx_id: attempt.tx_id.clone(),
        block_number: status.slot,
        block_hash: String::new(),
        execution_status: if status.err.is_some() {
            pb::ExecutionStatus::Failed
        } else {
            pb::ExecutionStatus::Success
        }
        .into(),
    };
    let evidence = pb::Evidence {
        endpoint: view.endpoint.clone(),
        read_time: Some(now.into()),
        head: view.block_height.unwrap_or_default(),
        tx_id: attempt.tx_id.clone(),
        block_number: status.slot,
        commitment: status.confirmation.as_str().into(),
        ..Default::default()
    };
    let (state, error) = if reason_of(attempt) == AttemptReason::Cancel {
        (
            OperationState::Cancelled,
            Some(pb::OperationError {
                reason: reasons::CANCELLED_ON_CHAIN.into(),
                message: format!(
                    "the cancel advanced the nonce account in slot {}",
                    status.slot
                ),
            }),
        )
    } else {
        (
            OperationState::Confirmed,
            status.err.as_ref().map(|err| pb::OperationError {
                reason: reasons::EXECUTION_FAILED.into(),
                message: format!(
                    "landed in slot {} and failed: {err}; its fee was paid, it is not retried",
                    status.slot
                ),
            }),
        )
    };
    Settlement {
        state,
        result: Some(result),
        error,
        evidence: Some(evidence),
    }
}
