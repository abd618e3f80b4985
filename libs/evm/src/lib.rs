//! sigcast's EVM adapter: builds transactions from intents with alloy, talks JSON-RPC to a set
//! of endpoints (hedged reads, single-path sends), and classifies node errors.
//!
//! It never holds or loads keys: it hands out the hash to sign and assembles the signed bytes
//! from a signature made elsewhere (the signer). A send here goes to exactly one endpoint and
//! is never retried here: what a failed send means is decided by reading chain state.

mod classify;
mod error;
mod rpc;
mod tx;

pub use classify::{SendClass, classify_send_error};
pub use error::{Error, Result, RpcError};
pub use rpc::{Receipt, RpcPool, SendAttempt};
pub use tx::{Fees, SignedTx, TxParams, UnsignedTx, build_transaction, params_of};

pub use alloy_primitives::{Address, B256, Signature, U256};
