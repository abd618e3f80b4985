//! JSON-RPC over HTTP to the endpoints of one chain, shared by the EVM and Solana adapters.
//!
//! Reads are hedged across the endpoints; a write goes to exactly one endpoint, once: it is
//! never hedged, never batched and never retried here, because what a failed write means is
//! decided by reading chain state, not by sending again.

mod endpoint;
mod error;
pub mod hedge;
#[cfg(test)]
mod hostile_tests;
mod pool;
mod statuses;

pub use endpoint::{Endpoint, PassCache, PoolEndpoint};
pub use error::{Error, Result, RpcError};
pub use pool::{
    MAX_RESPONSE_BYTES, RpcPool, SendAttempt, quantity, quantity_u128, quoted, unexpected,
};
pub use sigcast_telemetry::metrics::endpoint_label;
