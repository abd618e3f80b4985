/// What went wrong talking to one endpoint.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RpcError {
    /// No HTTP response: refused, reset, timed out. Whether a send arrived is unknown.
    #[error("transport to {endpoint}: {message}")]
    Transport {
        /// The endpoint.
        endpoint: String,
        /// What the client saw.
        message: String,
        /// Whether the request may have reached the node (anything but a refused connect).
        maybe_delivered: bool,
    },
    /// An HTTP status other than 200.
    #[error("HTTP {status} from {endpoint}")]
    Http {
        /// The endpoint.
        endpoint: String,
        /// The status code.
        status: u16,
    },
    /// A JSON-RPC error object from the node.
    #[error("node error {code} from {endpoint}: {message}")]
    Node {
        /// The endpoint.
        endpoint: String,
        /// JSON-RPC error code.
        code: i64,
        /// The node's message.
        message: String,
    },
    /// A reply that is not the JSON-RPC we asked for.
    #[error("malformed reply from {endpoint}: {message}")]
    Malformed {
        /// The endpoint.
        endpoint: String,
        /// What was wrong.
        message: String,
    },
}

impl RpcError {
    /// The endpoint that failed.
    pub fn endpoint(&self) -> &str {
        match self {
            RpcError::Transport { endpoint, .. }
            | RpcError::Http { endpoint, .. }
            | RpcError::Node { endpoint, .. }
            | RpcError::Malformed { endpoint, .. } => endpoint,
        }
    }
}

/// Errors of the pool.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Every endpoint failed a read; the last failure of each.
    #[error("no endpoint answered {method}: {}", .errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    AllEndpointsFailed {
        /// The JSON-RPC method.
        method: &'static str,
        /// What each endpoint said.
        errors: Vec<RpcError>,
    },
    /// An answer that is not what the method returns.
    #[error("unexpected result of {method}: {value}")]
    Unexpected {
        /// The JSON-RPC method.
        method: &'static str,
        /// What came back.
        value: String,
    },
    /// No endpoint configured.
    #[error("no RPC endpoint configured")]
    NoEndpoints,
    /// The HTTP client could not be built.
    #[error("building the HTTP client: {0}")]
    Client(String),
    /// A read made once for many callers failed: what it failed with, answered to each
    /// caller that waited for it.
    #[error("{0}")]
    Shared(String),
}

/// Result of the pool.
pub type Result<T, E = Error> = std::result::Result<T, E>;
