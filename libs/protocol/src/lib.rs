//! sigcast's at-most-once protocol as pure decisions: from an operation as stored, what the
//! chain showed (a view per endpoint, each with its head), the time and the settings, what to
//! do next — sign, send, replace, re-sign, settle, or wait.
//!
//! This crate does no I/O and reads no clock: everything a decision depends on is an
//! argument, so the broadcaster, `sigcast reconcile`, the signer's re-checks, unit tables and
//! the simulation all run the same decisions. Two rules hold in every path: a terminal state
//! rests on positive evidence (the transaction that used the nonce, on an endpoint's canonical
//! chain at the confirmation depth; or a finalized proof that no signature can land), and
//! anything unread, null or pruned leads only to waiting or to reading another endpoint.

mod action;
mod evidence;
pub mod evm;
pub mod record;
mod rules;
pub mod solana;

pub use action::{Action, Replacement, Settlement, Why};
pub use evidence::{
    BlockRef, Commitment, Evidence, EvmLanded, EvmView, SignatureStatus, SolanaView,
};
pub use record::{SendOutcome, reasons};
pub use rules::Rules;

use record::{has_self_transfer, last_activity};
use sigcast_domain::{Chain, OperationState};
use sigcast_proto::{pb, state_from_proto};
use std::time::SystemTime;

/// What to do next with `op`, given `evidence` read for it, at `now`.
///
/// For a SENT operation, call it first with [`Evidence::None`]: it says whether the chain
/// needs reading at all (`ReadMore`) or the operation waits (`Wait`, e.g. it was sent too
/// recently). Then read one endpoint's view and call again, adding views while it answers
/// `ReadMore` and endpoints remain.
pub fn decide(op: &pb::Operation, evidence: &Evidence, now: SystemTime, rules: &Rules) -> Action {
    let Some(state) = state_from_proto(op.state()) else {
        return Action::Wait(Why::NoAttempt);
    };
    let chain = Chain::parse(&op.chain).ok();
    match state {
        OperationState::Confirmed | OperationState::Rejected | OperationState::Cancelled => {
            Action::Wait(Why::Terminal)
        }
        OperationState::Received => Action::Sign,
        OperationState::Signed => first_send(op, chain.as_ref()),
        OperationState::Sent => {
            if let Some(at) = op.attempts.iter().filter_map(last_activity).max() {
                let due = at + rules.check_after;
                if now < due {
                    return Action::Wait(Why::Paced(due));
                }
            }
            judge(op, evidence, now, rules)
        }
    }
}

/// What `evidence` means for a signed operation, whatever its stored state: the part of
/// [`decide`] that reads the chain. `sigcast reconcile` shows it beside the stored state.
pub fn judge(op: &pb::Operation, evidence: &Evidence, now: SystemTime, rules: &Rules) -> Action {
    match (Chain::parse(&op.chain).ok(), evidence) {
        (_, Evidence::None) => Action::ReadMore(Why::Unread),
        (Some(Chain::Evm { .. }), Evidence::Evm(views)) => evm::decide_sent(op, views, now, rules),
        (Some(Chain::Solana { .. }), Evidence::Solana(views)) => {
            solana::decide_sent(op, views, now, rules)
        }
        // Evidence of another kind of chain than the operation's proves nothing.
        _ => Action::ReadMore(Why::Unreadable),
    }
}

/// SIGNED: its first send, unless a cancel came first.
fn first_send(op: &pb::Operation, chain: Option<&Chain>) -> Action {
    let Some(newest) = op.attempts.last() else {
        return Action::Wait(Why::NoAttempt);
    };
    if !op.cancel_requested || has_self_transfer(op) {
        return Action::Send(newest.number);
    }
    match (chain, solana::signing_of(op)) {
        (Some(Chain::Solana { .. }), Some(signing)) if !solana::uses_durable_nonce(signing) => {
            // Its bytes never left the store, and its blockhash expires: nothing can land.
            Action::Settle(Settlement {
                state: OperationState::Cancelled,
                result: None,
                error: Some(pb::OperationError {
                    reason: reasons::CANCELLED_BEFORE_SENDING.into(),
                    message: "cancelled before its first send; its signed transaction never left \
                              the store"
                        .into(),
                }),
                evidence: None,
            })
        }
        // Its nonce must still be used: by a transaction that takes it instead.
        _ => Action::Replace(Replacement::Cancel),
    }
}

#[cfg(test)]
mod tests;
