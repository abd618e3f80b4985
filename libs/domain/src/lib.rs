//! sigcast's domain model: what an operation is, which intents are valid, how an intent is
//! fingerprinted, which op_ids are allowed, and which state transitions an operation may make.
//!
//! Plain data and pure functions only. This crate must never do I/O, know about tokio, tonic,
//! a store backend or a chain client: every service parses and decides with it, and a
//! deterministic simulation must be able to drive it.

mod address;
mod amount;
mod attempt;
pub mod callers;
mod error;
mod fingerprint;
mod intent;
mod op_id;
pub mod policy;
mod state;

pub use address::{EvmAddress, SolanaPubkey};
pub use amount::{Lamports, Wei};
pub use attempt::AttemptReason;
pub use error::{Error, Result, Rule};
pub use fingerprint::Fingerprint;
pub use intent::{
    Chain, EvmContractCall, EvmTransfer, Intent, IntentRules, MAX_SOLANA_ACCOUNTS,
    MAX_SOLANA_INSTRUCTION_DATA, MAX_SOLANA_INSTRUCTIONS, SOLANA_PACKET_BYTES, SolanaAccountMeta,
    SolanaInstruction, SolanaInstructions, SolanaTransfer,
};
pub use op_id::{MAX_OP_ID_LEN, OpId, derive_op_id};
pub use state::{CancelEffect, OperationState};
