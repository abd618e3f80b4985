use crate::state::OperationState;

/// A rule a value broke, in words a caller can act on (e.g. "must be 1 to 128 characters").
///
/// Parsers return it without a field name; the API layer, which knows where the value came
/// from, pairs it with the field's path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule(pub String);

impl Rule {
    pub(crate) fn new(text: impl Into<String>) -> Self {
        Self(text.into())
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Errors of the domain rules.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// A state change the lifecycle does not allow.
    #[error("operation cannot go from {from:?} to {to:?}")]
    IllegalTransition {
        /// The current state.
        from: OperationState,
        /// The state asked for.
        to: OperationState,
    },
}

/// Result of the domain rules.
pub type Result<T, E = Error> = std::result::Result<T, E>;
