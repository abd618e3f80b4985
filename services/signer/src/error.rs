//! The signer's errors and the one place they become gRPC statuses.

use tonic::Status;

/// Why an operation was not signed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No such operation in the store: the signer signs recorded operations only.
    #[error("no operation with op_id {0:?} is recorded")]
    NotFound(String),
    /// The operation cannot be signed in its state.
    #[error("operation {op_id:?} is {state}; it cannot be signed")]
    NotSignable {
        /// The op_id.
        op_id: String,
        /// Its state.
        state: String,
    },
    /// The signer holds no key for the operation's account.
    #[error("operation {op_id:?}: this signer holds no key for account {account}")]
    NoKey {
        /// The op_id.
        op_id: String,
        /// The account.
        account: String,
    },
    /// The key's policy forbids the operation. Nothing was signed.
    #[error("operation {op_id:?} refused by the key's policy: {rule}")]
    PolicyDenied {
        /// The op_id.
        op_id: String,
        /// The rule it broke.
        rule: String,
    },
    /// The transaction would not fit a Solana packet: no node would take it. Nothing was
    /// signed.
    #[error(
        "operation {op_id:?}: its transaction would take {bytes} bytes, more than the {max} of \
         a Solana packet; nothing was signed"
    )]
    TooLarge {
        /// The op_id.
        op_id: String,
        /// The transaction's bytes.
        bytes: usize,
        /// The most a packet holds.
        max: usize,
    },
    /// The operation's chain is not configured here.
    #[error("operation {op_id:?}: this signer has no endpoints for chain {chain}")]
    UnknownChain {
        /// The op_id.
        op_id: String,
        /// The chain.
        chain: String,
    },
    /// The stored intent does not parse (written by an incompatible version).
    #[error("operation {op_id:?} holds an intent this signer cannot read: {reason}")]
    BadIntent {
        /// The op_id.
        op_id: String,
        /// Why.
        reason: String,
    },
    /// The interlock refused: the nonce belongs to another operation.
    #[error("interlock: {0}")]
    Interlock(#[from] sigcast_store::accounts::NonceTaken),
    /// The interlock refused: different signed bytes are already stored for this attempt.
    #[error(
        "interlock: operation {op_id:?} already holds other signed bytes for attempt {attempt}; \
         nothing was signed over them"
    )]
    PayloadDiffers {
        /// The op_id.
        op_id: String,
        /// The attempt.
        attempt: u32,
    },
    /// Every durable-nonce account of the key is held by an operation in flight.
    #[error(
        "operation {op_id:?} waits: all {count} durable-nonce accounts of {account} are held by operations in flight"
    )]
    NonceAccountsBusy {
        /// The op_id.
        op_id: String,
        /// The key.
        account: String,
        /// How many nonce accounts it has.
        count: usize,
    },
    /// The durable-nonce interlock refused: another operation in flight holds the account.
    #[error(
        "interlock: nonce account {nonce_account} is held by operation {holder:?}, not {op_id:?}"
    )]
    NonceAccountHeld {
        /// The op_id.
        op_id: String,
        /// The nonce account.
        nonce_account: String,
        /// The operation holding it.
        holder: String,
    },
    /// Reading chain state failed.
    #[error("reading chain state for op {op_id:?}: {source}")]
    Chain {
        /// The op_id.
        op_id: String,
        /// The failure.
        source: sigcast_jsonrpc::Error,
    },
    /// The chain's endpoints serve another chain than the one configured: nothing is signed
    /// for it until the configuration is fixed.
    #[error(
        "operation {op_id:?}: the endpoints configured for chain {configured} serve chain {served}"
    )]
    WrongChain {
        /// The op_id.
        op_id: String,
        /// The chain id configured.
        configured: u64,
        /// The chain id the endpoints answered.
        served: u64,
    },
    /// A replacement the fee caps leave no room for (no node would take one less than 10%
    /// above the attempt it replaces), or one more fee bump than the key's policy allows:
    /// nothing is signed, the earlier attempt stands.
    #[error("operation {op_id:?}: no replacement of attempt {attempt}: {why}; it stands")]
    FeeCap {
        /// The op_id.
        op_id: String,
        /// The attempt it would replace.
        attempt: u32,
        /// Which cap.
        why: String,
    },
    /// Signing itself failed.
    #[error("signing op {op_id:?} at nonce {nonce}: {reason}")]
    Sign {
        /// The op_id.
        op_id: String,
        /// The nonce.
        nonce: u64,
        /// Why.
        reason: String,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] sigcast_store::Error),
    /// The request names a purpose this signer does not know.
    #[error("purpose: unknown value {0}")]
    UnknownPurpose(i32),
    /// A field of the request is malformed.
    #[error("{field}: {rule}")]
    InvalidField {
        /// The field.
        field: &'static str,
        /// What was wrong, and what it must be.
        rule: String,
    },
}

impl Error {
    /// The reason a refusal is counted under, or `None` for a failure that is not a refusal.
    pub fn refusal_reason(&self) -> Option<&'static str> {
        Some(match self {
            Error::NoKey { .. } => REFUSED_NO_KEY,
            Error::PolicyDenied { .. } => REFUSED_BY_POLICY,
            Error::TooLarge { .. } => REFUSED_TOO_LARGE,
            Error::Interlock(_) | Error::PayloadDiffers { .. } | Error::NonceAccountHeld { .. } => {
                "INTERLOCK"
            }
            Error::NotSignable { .. } => "NOT_SIGNABLE",
            Error::NotFound(_) => "NOT_RECORDED",
            Error::FeeCap { .. } => AT_FEE_CAP,
            _ => return None,
        })
    }
}

/// Every reason a refusal is counted under (`signer_refusals_total{reason}`): those of
/// [`Error::refusal_reason`] and a caller the signer does not allow.
pub(crate) const REFUSAL_REASONS: [&str; 8] = [
    CALLER_NOT_ALLOWED,
    REFUSED_NO_KEY,
    REFUSED_BY_POLICY,
    REFUSED_TOO_LARGE,
    "INTERLOCK",
    "NOT_SIGNABLE",
    "NOT_RECORDED",
    AT_FEE_CAP,
];

/// Refusal reason: the caller is not one the signer serves.
pub(crate) const CALLER_NOT_ALLOWED: &str = "CALLER_NOT_ALLOWED";

/// ErrorInfo reason: the signer holds no key for the operation's account.
const REFUSED_NO_KEY: &str = "NO_KEY";
/// ErrorInfo reason: the key's policy forbids the operation.
const REFUSED_BY_POLICY: &str = "POLICY_DENIED";
/// ErrorInfo reason: the operation's transaction would not fit a packet.
const REFUSED_TOO_LARGE: &str = "TOO_LARGE";

/// ErrorInfo reason: a replacement would exceed the chain's fee cap.
const AT_FEE_CAP: &str = "FEE_CAP";

/// ErrorInfo reason: the operation waits for a durable-nonce account of its key.
const NONCE_ACCOUNTS_BUSY: &str = "NONCE_ACCOUNTS_BUSY";

fn refusal(message: String, reason: &str) -> Status {
    use tonic_types::{ErrorDetails, StatusExt};
    let details =
        ErrorDetails::with_error_info(reason, "sigcast-signer", std::collections::HashMap::new());
    Status::with_error_details(tonic::Code::PermissionDenied, message, details)
}

/// Result of signer calls.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<Error> for Status {
    fn from(error: Error) -> Status {
        let message = error.to_string();
        match error {
            Error::NotFound(_) => Status::not_found(message),
            Error::NotSignable { .. }
            | Error::UnknownChain { .. }
            | Error::Interlock(_)
            | Error::PayloadDiffers { .. }
            | Error::WrongChain { .. }
            | Error::BadIntent { .. } => Status::failed_precondition(message),
            // A refusal of the operation itself carries its reason, so a caller can tell it from
            // a refusal of the caller (an unlisted certificate), which must never reject work.
            Error::NoKey { .. } => refusal(message, REFUSED_NO_KEY),
            Error::PolicyDenied { .. } => refusal(message, REFUSED_BY_POLICY),
            Error::TooLarge { .. } => refusal(message, REFUSED_TOO_LARGE),
            // Waiting for a nonce account is not a failure: the caller retries later.
            Error::NonceAccountsBusy { .. } | Error::NonceAccountHeld { .. } => {
                let details = tonic_types::ErrorDetails::with_error_info(
                    NONCE_ACCOUNTS_BUSY,
                    "sigcast-signer",
                    std::collections::HashMap::new(),
                );
                use tonic_types::StatusExt;
                Status::with_error_details(tonic::Code::ResourceExhausted, message, details)
            }
            Error::Chain { .. } | Error::Store(_) => {
                Status::unavailable(format!("{message}; retry the same op_id"))
            }
            Error::FeeCap { .. } => {
                let details = tonic_types::ErrorDetails::with_error_info(
                    AT_FEE_CAP,
                    "sigcast-signer",
                    std::collections::HashMap::new(),
                );
                use tonic_types::StatusExt;
                Status::with_error_details(tonic::Code::FailedPrecondition, message, details)
            }
            Error::Sign { .. } => Status::internal(message),
            Error::UnknownPurpose(_) | Error::InvalidField { .. } => {
                Status::invalid_argument(message)
            }
        }
    }
}
