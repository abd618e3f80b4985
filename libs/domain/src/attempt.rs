//! Why an attempt exists: the first signature, or one of the declared replacements.

/// Why an operation has an attempt. Stored as text in the record (`Attempt.reason`): the
/// strings below are part of the stored data format and of the public API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AttemptReason {
    /// The operation's first signature.
    Initial,
    /// The same intent at the same nonce with higher fees.
    FeeBump,
    /// A zero-value self-transfer (EVM) or a nonce advance (Solana durable nonce) at the same
    /// nonce, taking it instead of the operation: the operation can then never apply.
    Cancel,
    /// The same self-transfer, taking the nonce of an operation the node refused, so that the
    /// account's later nonces can proceed.
    GapFill,
    /// A new signature after chain state proved that no earlier attempt can land.
    Resign,
}

impl AttemptReason {
    /// The stored text.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Initial => "",
            Self::FeeBump => "fee_bump",
            Self::Cancel => "cancel",
            Self::GapFill => "gap_fill",
            Self::Resign => "resign",
        }
    }

    /// Parses the stored text; `None` for text no version wrote.
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "" => Self::Initial,
            "fee_bump" => Self::FeeBump,
            "cancel" => Self::Cancel,
            "gap_fill" => Self::GapFill,
            "resign" => Self::Resign,
            _ => return None,
        })
    }

    /// A self-transfer that takes the nonce instead of the operation: final, never replaced.
    pub fn takes_the_nonce_instead(self) -> bool {
        matches!(self, Self::Cancel | Self::GapFill)
    }
}

impl std::fmt::Display for AttemptReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Initial => "initial",
            other => other.as_str(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::AttemptReason::*;
    use super::*;

    #[test]
    fn stored_reasons_are_pinned() {
        // Records written by any version carry these strings: changing one misreads them.
        for (reason, text) in [
            (Initial, ""),
            (FeeBump, "fee_bump"),
            (Cancel, "cancel"),
            (GapFill, "gap_fill"),
            (Resign, "resign"),
        ] {
            assert_eq!(reason.as_str(), text);
            assert_eq!(AttemptReason::parse(text), Some(reason));
        }
        assert_eq!(AttemptReason::parse("bump"), None);
    }

    #[test]
    fn only_self_transfers_take_the_nonce_and_reasons_print_their_names() {
        for (reason, takes, shown) in [
            (Initial, false, "initial"),
            (FeeBump, false, "fee_bump"),
            (Cancel, true, "cancel"),
            (GapFill, true, "gap_fill"),
            (Resign, false, "resign"),
        ] {
            assert_eq!(reason.takes_the_nonce_instead(), takes, "{reason:?}");
            assert_eq!(reason.to_string(), shown);
        }
    }
}
