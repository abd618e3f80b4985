//! sigcast's EVM adapter: builds transactions from intents with alloy, reads and writes EVM
//! JSON-RPC through the shared endpoint pool, and classifies node errors.
//!
//! It never holds or loads keys: it hands out the hash to sign and assembles the signed bytes
//! from a signature made elsewhere (the signer). A send here goes to exactly one endpoint and
//! is never retried here: what a failed send means is decided by reading chain state.

mod classify;
mod error;
pub mod evidence;
mod rpc;
mod tx;
mod wire;

pub use classify::{SendClass, classify_send_error, send_outcome};
pub use error::{Error, Result, RpcError};
pub use rpc::{EvmRpc, Receipt, base_fee, eip1559_fees_from};
pub use sigcast_jsonrpc::{RpcPool, SendAttempt};
pub use tx::{
    DecodedTx, FeeLimits, Fees, SignedTx, TxParams, UnsignedTx, build_transaction, decode_signed,
    params_of,
};

pub use alloy_primitives::{Address, B256, Signature, U256, hex};
