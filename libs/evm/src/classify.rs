//! What a failed `eth_sendRawTransaction` means. Nodes word their errors differently (geth and
//! its forks, anvil, erigon, nethermind, besu); the classes are what sigcast acts on.
//!
//! The rule that keeps sends at most once: anything not positively recognised is `Unknown`,
//! and an unknown outcome is resolved only by reading chain state, never by sending again
//! something new.

use crate::RpcError;

/// The meaning of a send's failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendClass {
    /// The node already has this exact transaction: as good as accepted.
    AlreadyKnown,
    /// The node refused the transaction and it was never applied (funds, gas, size, fee
    /// fields). The nonce stays free.
    Rejected,
    /// The node refused the transaction for its fees (below the base fee or the pool's
    /// minimum). Never applied; a replacement with higher fees may be accepted.
    Underpriced,
    /// The nonce is already used or taken in the pool — possibly by this very operation's
    /// earlier attempt. Resolved by reading receipts and the account nonce.
    NonceUsed,
    /// No answer, a 5xx, a reset, or a message not recognised: the transaction may or may not
    /// be in the pool. Resolved by reading chain state.
    Unknown,
}

const ALREADY_KNOWN: &[&str] = &[
    "already known",                // geth, erigon, anvil
    "known transaction",            // older geth, besu ("Known transaction")
    "alreadyknown",                 // nethermind (AlreadyKnown)
    "transaction already imported", // anvil, openethereum
    "already imported",             // besu
    "already in the pool",
];

const NONCE_USED: &[&str] = &[
    "nonce too low",                       // geth, erigon, anvil
    "oldnonce",                            // nethermind (OldNonce)
    "nonce_too_low",                       // besu (NONCE_TOO_LOW)
    "replacement transaction underpriced", // geth, erigon, anvil: same nonce pending
    "replacement_underpriced",             // besu
    "replacementnotallowed",               // nethermind
    "already used",                        // besu: "Nonce ... already used"
];

const REJECTED: &[&str] = &[
    "insufficient funds",              // geth, anvil, erigon
    "insufficientfunds",               // nethermind
    "upfront_cost_exceeds_balance",    // besu
    "intrinsic gas too low",           // geth, erigon
    "intrinsic_gas_exceeds_gas_limit", // besu
    "exceeds block gas limit",         // geth, erigon
    "gaslimitexceeded",                // nethermind
    "exceeds_block_gas_limit",         // besu
    // Not "invalid chain id", "invalid sender" or "invalid signature" (geth, nethermind's
    // InvalidChainId, besu's WRONG_CHAIN_ID, anvil): the signer signs for the chain id it
    // verified, so such an answer is the endpoint's (another chain behind its URL, a load
    // balancer or a DNS name moved) and says nothing of the transaction on its own chain.
    // Taken as "never applied", it let a valid operation's nonce be filled and the operation
    // REJECTED (review, sixteenth session).
    "oversized data",                                       // geth
    "max priority fee per gas higher than max fee per gas", // geth
    "tip higher than fee cap",
];

const UNDERPRICED: &[&str] = &[
    "max fee per gas less than block base fee", // geth, erigon, anvil
    "feetoolow",                                // nethermind (FeeTooLow)
    "gas_price_below_current_base_fee",         // besu
    "gas_price_too_low",                        // besu
    "transaction underpriced",                  // geth: below the pool's minimum
];

/// Classifies a failed send.
pub fn classify_send_error(error: &RpcError) -> SendClass {
    match error {
        RpcError::Node { message, .. } => classify_message(message),
        // Transport failures, HTTP errors (5xx, 429, proxies' 502) and replies we cannot read
        // say nothing about whether the node took the transaction.
        RpcError::Transport { .. } | RpcError::Http { .. } | RpcError::Malformed { .. } => {
            SendClass::Unknown
        }
    }
}

fn classify_message(message: &str) -> SendClass {
    let lower = message.to_ascii_lowercase();
    // Order matters: "replacement transaction underpriced" also contains "transaction
    // underpriced", and must count as a used nonce, not as a rejection.
    if ALREADY_KNOWN.iter().any(|m| lower.contains(m)) {
        SendClass::AlreadyKnown
    } else if NONCE_USED.iter().any(|m| lower.contains(m)) {
        SendClass::NonceUsed
    } else if UNDERPRICED.iter().any(|m| lower.contains(m)) {
        SendClass::Underpriced
    } else if REJECTED.iter().any(|m| lower.contains(m)) {
        SendClass::Rejected
    } else {
        SendClass::Unknown
    }
}

/// What a send's answer means to the protocol: accepted (or already known), refused (for its
/// fees, or for anything else: never applied), or unknown (resolved from chain state).
pub fn send_outcome<T>(result: &Result<T, RpcError>) -> sigcast_protocol::SendOutcome {
    use sigcast_protocol::SendOutcome;
    match result {
        Ok(_) => SendOutcome::Accepted,
        Err(error) => match classify_send_error(error) {
            SendClass::AlreadyKnown => SendOutcome::Accepted,
            SendClass::Rejected => SendOutcome::Refused {
                underpriced: false,
                message: error.to_string(),
            },
            SendClass::Underpriced => SendOutcome::Refused {
                underpriced: true,
                message: error.to_string(),
            },
            SendClass::NonceUsed | SendClass::Unknown => SendOutcome::Unknown,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(message: &str) -> RpcError {
        RpcError::Node {
            endpoint: "e".into(),
            code: -32000,
            message: message.into(),
        }
    }

    #[test]
    fn message_families_of_each_client() {
        let cases = [
            // geth
            ("already known", SendClass::AlreadyKnown),
            ("known transaction: 0x4f…", SendClass::AlreadyKnown),
            (
                "nonce too low: next nonce 5, tx nonce 4",
                SendClass::NonceUsed,
            ),
            ("replacement transaction underpriced", SendClass::NonceUsed),
            (
                "insufficient funds for gas * price + value: balance 0, tx cost 21000",
                SendClass::Rejected,
            ),
            (
                "intrinsic gas too low: gas 20000, minimum needed 21000",
                SendClass::Rejected,
            ),
            (
                "max fee per gas less than block base fee: address 0x…, maxFeePerGas: 1, baseFee: 7",
                SendClass::Underpriced,
            ),
            (
                "transaction underpriced: tip needed 1, tip permitted 0",
                SendClass::Underpriced,
            ),
            ("invalid sender", SendClass::Unknown),
            // anvil
            ("transaction already imported", SendClass::AlreadyKnown),
            ("nonce too low", SendClass::NonceUsed),
            (
                "Insufficient funds for gas * price + value",
                SendClass::Rejected,
            ),
            ("Invalid signature", SendClass::Unknown),
            // erigon
            ("ALREADY_EXISTS: already known", SendClass::AlreadyKnown),
            ("NONCE_TOO_LOW: nonce too low", SendClass::NonceUsed),
            (
                "INSUFFICIENT_FUNDS: insufficient funds",
                SendClass::Rejected,
            ),
            // nethermind
            ("AlreadyKnown", SendClass::AlreadyKnown),
            (
                "OldNonce, Current nonce: 5, nonce of rejected tx: 4",
                SendClass::NonceUsed,
            ),
            (
                "InsufficientFunds, Account 0x… balance: 0, cumulative cost: 21000",
                SendClass::Rejected,
            ),
            ("FeeTooLow, MaxFeePerGas too low", SendClass::Underpriced),
            ("GAS_PRICE_BELOW_CURRENT_BASE_FEE", SendClass::Underpriced),
            ("InvalidChainId", SendClass::Unknown),
            // besu
            ("Known transaction", SendClass::AlreadyKnown),
            (
                "Transaction nonce is too distant from current sender nonce",
                SendClass::Unknown,
            ),
            ("NONCE_TOO_LOW", SendClass::NonceUsed),
            ("REPLACEMENT_UNDERPRICED", SendClass::NonceUsed),
            (
                "Upfront cost exceeds account balance (UPFRONT_COST_EXCEEDS_BALANCE)",
                SendClass::Rejected,
            ),
            ("WRONG_CHAIN_ID", SendClass::Unknown),
            // A nonce ahead of the node's view is early, not invalid: the same bytes later.
            ("nonce too high", SendClass::Unknown),
            ("NonceGap", SendClass::Unknown),
            // The signer signed for the chain it verified: a chain id or a signature refused is
            // the endpoint's (another chain behind its URL), not the transaction's.
            ("invalid chain id for signer", SendClass::Unknown),
            ("INVALID_SIGNATURE", SendClass::Unknown),
            // anything else
            ("internal error", SendClass::Unknown),
            ("", SendClass::Unknown),
        ];
        for (message, class) in cases {
            assert_eq!(classify_send_error(&node(message)), class, "{message:?}");
        }
    }

    #[test]
    fn transport_and_http_failures_are_unknown() {
        let reset = RpcError::Transport {
            endpoint: "e".into(),
            message: "reset".into(),
            maybe_delivered: true,
        };
        assert_eq!(classify_send_error(&reset), SendClass::Unknown);
        assert_eq!(
            classify_send_error(&RpcError::Http {
                endpoint: "e".into(),
                status: 502
            }),
            SendClass::Unknown
        );
        let junk = RpcError::Malformed {
            endpoint: "e".into(),
            message: "not json".into(),
        };
        assert_eq!(classify_send_error(&junk), SendClass::Unknown);
    }
}
