//! What a decision asks for.

use sigcast_domain::{AttemptReason, OperationState};
use sigcast_proto::pb;
use std::fmt;
use std::time::SystemTime;

/// What to do next with an operation.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Nothing now.
    Wait(Why),
    /// What was read authorizes nothing; a view from another endpoint might.
    ReadMore(Why),
    /// Ask the signer for the operation's first signature.
    Sign,
    /// Send this attempt's stored bytes: its first send, or the same bytes again.
    Send(u32),
    /// Ask the signer for a declared replacement at the same nonce, then send it.
    Replace(Replacement),
    /// Nothing of the operation can land any more (the proof is in the evidence): ask the
    /// signer for a new signature, then send it.
    Resign(pb::Evidence),
    /// Settle the operation: a terminal state resting on the evidence it carries.
    Settle(Settlement),
}

impl Action {
    /// A short name for logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Wait(_) => "wait",
            Self::ReadMore(_) => "read_more",
            Self::Sign => "sign",
            Self::Send(_) => "send",
            Self::Replace(_) => "replace",
            Self::Resign(_) => "resign",
            Self::Settle(_) => "settle",
        }
    }
}

/// A replacement at the same nonce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Replacement {
    /// The same intent with higher fees.
    FeeBump,
    /// A transaction that takes the nonce instead of the operation (a cancel was asked for).
    Cancel,
    /// The same, for an operation every send of which the node refused.
    GapFill,
}

impl Replacement {
    /// The attempt reason it is recorded under.
    pub fn reason(self) -> AttemptReason {
        match self {
            Self::FeeBump => AttemptReason::FeeBump,
            Self::Cancel => AttemptReason::Cancel,
            Self::GapFill => AttemptReason::GapFill,
        }
    }
}

/// A terminal state and what it rests on.
#[derive(Debug, Clone, PartialEq)]
pub struct Settlement {
    /// CONFIRMED, REJECTED or CANCELLED.
    pub state: OperationState,
    /// The transaction of the operation that landed, if one did.
    pub result: Option<pb::TerminalResult>,
    /// The reason and its human explanation, where there is one.
    pub error: Option<pb::OperationError>,
    /// The chain state read; empty for a settlement that rests on the store alone (a signed
    /// transaction that never left it).
    pub evidence: Option<pb::Evidence>,
}

/// Why nothing is done now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Why {
    /// The operation is terminal.
    Terminal,
    /// It was sent or answered recently; look again at this time.
    Paced(SystemTime),
    /// Its newest send waits for inclusion; the same bytes go out again at this time.
    InFlight(SystemTime),
    /// No endpoint was read yet.
    Unread,
    /// A transaction at its nonce is seen but not yet on the canonical chain at the
    /// confirmation depth (or the views disagree about it).
    Confirming,
    /// Its landed transaction's receipt (execution status) is not readable yet.
    ReceiptMissing,
    /// The account's nonce is past the operation's, and no transaction at its nonce was
    /// identified: nothing is settled from absence.
    NonceUsedUnidentified,
    /// A transaction at its nonce is deep enough under the endpoint's head, but the endpoint
    /// did not link the blocks above it to its block: the depth is unproven there (nodes
    /// behind one URL on chains of their own, or headers unreadable); read elsewhere.
    DepthUnproven,
    /// Endpoints disagree about what used the nonce.
    Conflicting,
    /// A read failed or an answer was malformed.
    Unreadable,
    /// Solana: the endpoint's history does not reach back to the signing slot, so the absence
    /// of a status proves nothing.
    HistoryTooShort,
    /// Solana: a cancel was asked for and the signed transaction may still land until its
    /// blockhash expires; it is not sent again.
    CancelPendingExpiry,
    /// Solana: the nonce account was read at a slot before the signature's, so a value other
    /// than the signed one may be an older value, not a newer.
    NonceReadBeforeSigning,
    /// Solana: the statuses were answered by a node that had not reached the slot the expiry
    /// (or the nonce's advance) was read at: their absence proves nothing of what landed.
    StatusesBehind,
    /// A replacement would not help: the nonce waits behind an earlier one of the account.
    BehindEarlierNonce,
    /// The operation has no attempt to send (a record this version does not expect).
    NoAttempt,
}

impl Why {
    /// A name for metrics and logs that stays as it is (snake case).
    pub fn label(&self) -> &'static str {
        match self {
            Self::Terminal => "terminal",
            Self::Paced(_) => "paced",
            Self::InFlight(_) => "in_flight",
            Self::Unread => "unread",
            Self::Confirming => "confirming",
            Self::ReceiptMissing => "receipt_missing",
            Self::NonceUsedUnidentified => "nonce_used_unidentified",
            Self::DepthUnproven => "depth_unproven",
            Self::Conflicting => "conflicting",
            Self::Unreadable => "unreadable",
            Self::HistoryTooShort => "history_too_short",
            Self::CancelPendingExpiry => "cancel_pending_expiry",
            Self::NonceReadBeforeSigning => "nonce_read_before_signing",
            Self::StatusesBehind => "statuses_behind",
            Self::BehindEarlierNonce => "behind_earlier_nonce",
            Self::NoAttempt => "no_attempt",
        }
    }
}

impl fmt::Display for Why {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Terminal => f.write_str("terminal"),
            Self::Paced(_) => f.write_str("recently sent or answered"),
            Self::InFlight(_) => f.write_str("in flight"),
            Self::Unread => f.write_str("no endpoint read"),
            Self::Confirming => f.write_str("landed, not yet at the confirmation depth"),
            Self::ReceiptMissing => f.write_str("landed, receipt not readable yet"),
            Self::NonceUsedUnidentified => {
                f.write_str("nonce used, the transaction that used it not identified")
            }
            Self::DepthUnproven => {
                f.write_str("landed, its depth not linked to the block on that endpoint")
            }
            Self::Conflicting => f.write_str("endpoints disagree about what used the nonce"),
            Self::Unreadable => f.write_str("a read failed"),
            Self::HistoryTooShort => {
                f.write_str("the endpoint's history does not reach the signing slot")
            }
            Self::CancelPendingExpiry => {
                f.write_str("cancel asked for; waiting for the blockhash to expire")
            }
            Self::NonceReadBeforeSigning => {
                f.write_str("the nonce account was read before the signing slot")
            }
            Self::StatusesBehind => {
                f.write_str("the statuses were read from a node behind the expiry's slot")
            }
            Self::BehindEarlierNonce => f.write_str("waiting behind an earlier nonce"),
            Self::NoAttempt => f.write_str("no attempt recorded"),
        }
    }
}
