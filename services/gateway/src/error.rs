//! The one place where the gateway's errors become gRPC statuses, each with its code, a
//! message a person can act on, and the standard detail a program can read.

use sigcast_proto::{FieldViolation, pb};
use std::collections::HashMap;
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

/// Why a gateway call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request broke one or more field rules.
    #[error("invalid request: {}", described(.0))]
    InvalidArgument(Vec<FieldViolation>),
    /// The op_id is taken by another intent.
    #[error(
        "op_id {op_id:?} already names an operation with a different intent (stored fingerprint {stored}, \
         submitted {submitted}); nothing was changed. Use a new op_id for a new intent."
    )]
    OpIdConflict {
        /// The op_id.
        op_id: String,
        /// Fingerprint of the stored intent.
        stored: String,
        /// Fingerprint of the submitted intent.
        submitted: String,
    },
    /// The signing key's policy forbids the intent; nothing was recorded.
    #[error("the policy of key {account} forbids this operation: {rule}; nothing was recorded")]
    PolicyDenied {
        /// The signing account.
        account: String,
        /// The rule broken.
        rule: String,
    },
    /// The caller may not do this (`[[callers]]`); nothing was recorded or changed.
    #[error("{rule}; nothing was recorded or changed")]
    CallerDenied {
        /// The rule, in words.
        rule: String,
    },
    /// A listener that authenticates callers got a call naming no one; nothing was recorded
    /// or changed.
    #[error(
        "the caller has no identity (a client certificate with a URI or DNS name, or the \
         mesh's forwarded one); nothing was recorded or changed"
    )]
    Unidentified,
    /// The op_id names another caller's operation: nothing about it is told.
    #[error("op_id {0:?} is already used; choose another")]
    OpIdTaken(String),
    /// The caller, or the gateway, has as many watches open as allowed.
    #[error("{0}")]
    TooManyWatches(String),
    /// No such operation.
    #[error("no operation with op_id {0:?}")]
    NotFound(String),
    /// The operation is in a state that forbids the call.
    #[error("operation {op_id:?} is {state}: {why}")]
    FailedPrecondition {
        /// The op_id.
        op_id: String,
        /// Its state name.
        state: String,
        /// What that means for the call.
        why: &'static str,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] sigcast_store::Error),
}

impl Error {
    /// A single broken field.
    pub(crate) fn invalid(violation: FieldViolation) -> Self {
        Self::InvalidArgument(vec![violation])
    }
}

/// Violations a status describes. A status travels in HTTP/2 trailers, which clients cap
/// (8 KiB in grpc-go and grpc-java, 16 KiB in hyper): a request with hundreds of broken
/// fields once drew a refusal no client could read, and the connection was torn down with it.
/// A caller fixes the first ones and sends again.
const MAX_VIOLATIONS_SHOWN: usize = 8;

/// The longest rule text a violation carries, in bytes.
const MAX_RULE_BYTES: usize = 160;

fn described(violations: &[FieldViolation]) -> String {
    let mut text = violations
        .iter()
        .take(MAX_VIOLATIONS_SHOWN)
        .map(|v| format!("{}: {}", v.field, clipped(&v.rule.0)))
        .collect::<Vec<_>>()
        .join("; ");
    if violations.len() > MAX_VIOLATIONS_SHOWN {
        let more = violations.len() - MAX_VIOLATIONS_SHOWN;
        text.push_str(&format!("; and {more} more"));
    }
    text
}

fn clipped(text: &str) -> String {
    if text.len() <= MAX_RULE_BYTES {
        return text.to_owned();
    }
    let mut end = MAX_RULE_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// Result of gateway calls.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<Error> for Status {
    fn from(error: Error) -> Status {
        let message = error.to_string();
        match error {
            Error::InvalidArgument(violations) => {
                let details = ErrorDetails::with_bad_request(
                    violations
                        .into_iter()
                        .take(MAX_VIOLATIONS_SHOWN)
                        .map(|v| tonic_types::FieldViolation::new(v.field, clipped(&v.rule.0)))
                        .collect::<Vec<_>>(),
                );
                Status::with_error_details(Code::InvalidArgument, message, details)
            }
            Error::OpIdConflict {
                op_id,
                stored,
                submitted,
            } => {
                let metadata = HashMap::from([
                    ("op_id".to_owned(), op_id),
                    ("stored_fingerprint".to_owned(), stored),
                    ("submitted_fingerprint".to_owned(), submitted),
                ]);
                let details = ErrorDetails::with_error_info("OP_ID_CONFLICT", "sigcast", metadata);
                Status::with_error_details(Code::AlreadyExists, message, details)
            }
            Error::PolicyDenied { account, rule } => {
                let metadata =
                    HashMap::from([("account".to_owned(), account), ("rule".to_owned(), rule)]);
                let details = ErrorDetails::with_error_info("POLICY_DENIED", "sigcast", metadata);
                Status::with_error_details(Code::PermissionDenied, message, details)
            }
            Error::CallerDenied { rule } => {
                let metadata = HashMap::from([("rule".to_owned(), rule)]);
                let details =
                    ErrorDetails::with_error_info("CALLER_NOT_ALLOWED", "sigcast", metadata);
                Status::with_error_details(Code::PermissionDenied, message, details)
            }
            Error::Unidentified => {
                let details =
                    ErrorDetails::with_error_info("CALLER_UNIDENTIFIED", "sigcast", HashMap::new());
                Status::with_error_details(Code::Unauthenticated, message, details)
            }
            // A conflict as the contract names it (a client keys on the reason), without the
            // other caller's fingerprint.
            Error::OpIdTaken(op_id) => {
                let metadata = HashMap::from([("op_id".to_owned(), op_id.clone())]);
                let details = ErrorDetails::with_error_info("OP_ID_CONFLICT", "sigcast", metadata);
                Status::with_error_details(Code::AlreadyExists, message, details)
            }
            Error::TooManyWatches(_) => Status::resource_exhausted(message),
            Error::NotFound(_) => Status::not_found(message),
            Error::FailedPrecondition { op_id, state, .. } => {
                let details =
                    ErrorDetails::with_precondition_failure_violation("STATE", op_id, state);
                Status::with_error_details(Code::FailedPrecondition, message, details)
            }
            Error::Store(store_error) => store_status(store_error, None),
        }
    }
}

impl Error {
    /// The caller's status for this error of a call about `op_id`. A store failure is logged
    /// naming the operation: log lines do not carry the call's span (`sigcast_telemetry::init`).
    pub(crate) fn status_for(self, op_id: &str) -> Status {
        match self {
            Error::Store(store_error) => store_status(store_error, Some(op_id)),
            other => other.into(),
        }
    }
}

/// The status for a store failure, logged with the operation of the call (`-` for a call
/// about none, a list).
fn store_status(error: sigcast_store::Error, op_id: Option<&str>) -> Status {
    use sigcast_store::Error as E;
    let op_id = op_id.unwrap_or("-");
    match &error {
        // Data this version cannot read is not something a retry fixes.
        E::Corrupt { .. } => {
            tracing::error!(sigcast.op_id = %op_id, %error, "store holds an unreadable record");
            Status::internal(format!(
                "the store holds a record this version cannot read: {error}"
            ))
        }
        error if error.is_full() => {
            let details = ErrorDetails::with_error_info("STORE_FULL", "sigcast", HashMap::new());
            Status::with_error_details(
                Code::Unavailable,
                format!(
                    "the store is out of space ({error}); nothing was accepted or changed, and \
                     reads go on. Retry with the same op_id once space is freed"
                ),
                details,
            )
        }
        _ => {
            tracing::warn!(sigcast.op_id = %op_id, %error, "store unavailable");
            Status::unavailable(format!(
                "the store is unavailable ({error}); retry with the same op_id: either nothing was \
                 accepted, or the accept is durable and the retry replays it"
            ))
        }
    }
}

/// The name of a state as the API spells it, for messages.
pub(crate) fn state_name(op: &pb::Operation) -> String {
    op.state().as_str_name().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_of_hundreds_of_fields_fits_in_the_trailers_clients_accept() {
        let violations = (0..500)
            .map(|i| FieldViolation {
                field: format!("intent.solana_instructions.instructions[{i}].program_id"),
                rule: sigcast_domain::Rule("x".repeat(10_000)),
            })
            .collect();
        let status = Status::from(Error::InvalidArgument(violations));
        // The details repeat the message; base64 in grpc-status-details-bin.
        let details = status.details().len() * 4 / 3;
        assert!(
            status.message().len() + details < 8 * 1024,
            "{} + {details} bytes",
            status.message().len()
        );
        assert!(
            status.message().ends_with("; and 492 more"),
            "{}",
            status.message()
        );
        let shown = status.get_details_bad_request().unwrap().field_violations;
        assert_eq!(shown.len(), MAX_VIOLATIONS_SHOWN);
        assert_eq!(
            shown[0].field,
            "intent.solana_instructions.instructions[0].program_id"
        );
    }
}
