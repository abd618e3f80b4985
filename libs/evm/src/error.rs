pub use sigcast_jsonrpc::RpcError;

/// Errors of the EVM adapter.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading from or writing to the endpoints failed.
    #[error(transparent)]
    Rpc(#[from] sigcast_jsonrpc::Error),
    /// An intent this adapter cannot build (not an EVM intent).
    #[error("not an EVM intent: {0}")]
    NotEvm(String),
}

/// Result of the EVM adapter.
pub type Result<T, E = Error> = std::result::Result<T, E>;
