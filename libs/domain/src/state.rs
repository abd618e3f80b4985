//! The operation lifecycle: RECEIVED → SIGNED → SENT → CONFIRMED | REJECTED | CANCELLED.

use crate::error::{Error, Result};

/// Where an operation is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OperationState {
    /// Recorded, not signed.
    Received,
    /// Signed and persisted, not sent.
    Signed,
    /// At least one attempt sent, outcome not settled.
    Sent,
    /// Included on chain. Terminal.
    Confirmed,
    /// Proven never applied. Terminal.
    Rejected,
    /// Cancelled before it could apply. Terminal.
    Cancelled,
}

/// What a cancel request does to an operation in a given state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelEffect {
    /// Nothing was signed: the operation becomes CANCELLED now.
    CancelNow,
    /// A signature exists and may land: ask the broadcaster for an on-chain cancel
    /// (a replacement at the same nonce); CANCELLED only if that lands.
    RequestOnChainCancel,
    /// Already terminal: nothing can be cancelled.
    AlreadyTerminal,
}

impl OperationState {
    /// No transition leaves a terminal state.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Confirmed | Self::Rejected | Self::Cancelled)
    }

    /// Checks a transition against the lifecycle. Staying in a state is allowed (re-running a
    /// step after a crash must be harmless). SIGNED → CANCELLED is for a signed transaction
    /// that never left the store and can never be sent (a Solana blockhash that expires); a
    /// re-sign stays SENT with a new attempt. Nothing leaves a terminal state.
    pub fn transition(self, to: Self) -> Result<Self> {
        use OperationState::*;
        let allowed = self == to && !self.is_terminal()
            || matches!(
                (self, to),
                (Received, Signed | Rejected | Cancelled)
                    | (Signed, Sent | Cancelled)
                    | (Sent, Confirmed | Rejected | Cancelled)
            );
        if allowed {
            Ok(to)
        } else {
            Err(Error::IllegalTransition { from: self, to })
        }
    }

    /// What cancelling does in this state.
    pub fn cancel_effect(self) -> CancelEffect {
        match self {
            Self::Received => CancelEffect::CancelNow,
            Self::Signed | Self::Sent => CancelEffect::RequestOnChainCancel,
            Self::Confirmed | Self::Rejected | Self::Cancelled => CancelEffect::AlreadyTerminal,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::OperationState::*;
    use super::*;

    const ALL: [OperationState; 6] = [Received, Signed, Sent, Confirmed, Rejected, Cancelled];

    #[test]
    fn terminal_states_are_final() {
        for from in [Confirmed, Rejected, Cancelled] {
            for to in ALL {
                assert!(from.transition(to).is_err(), "{from:?} -> {to:?}");
            }
        }
    }

    #[test]
    fn the_lifecycle() {
        assert_eq!(Received.transition(Signed), Ok(Signed));
        assert_eq!(Signed.transition(Sent), Ok(Sent));
        assert_eq!(Sent.transition(Confirmed), Ok(Confirmed));
        assert_eq!(Sent.transition(Sent), Ok(Sent));
        assert!(Received.transition(Sent).is_err());
        assert!(Received.transition(Confirmed).is_err());
        assert!(
            Signed.transition(Rejected).is_err(),
            "a signed nonce must be consumed on chain before anything is proven"
        );
        assert!(
            Sent.transition(Signed).is_err(),
            "a re-sign is a new attempt of a SENT operation"
        );
    }

    #[test]
    fn cancel_effects() {
        assert_eq!(Received.cancel_effect(), CancelEffect::CancelNow);
        assert_eq!(Sent.cancel_effect(), CancelEffect::RequestOnChainCancel);
        assert_eq!(Confirmed.cancel_effect(), CancelEffect::AlreadyTerminal);
    }
}
