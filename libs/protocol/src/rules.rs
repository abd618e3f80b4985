//! The settings a decision depends on.

use crate::Commitment;
use std::time::Duration;

/// Settings of the decisions, from the broadcaster's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rules {
    /// EVM: blocks a transaction must be under (1 = included) before anything is settled from
    /// it, on the endpoint's canonical chain.
    pub confirmations: u64,
    /// Solana: the commitment at which a landed transaction settles the operation.
    pub solana_commitment: Commitment,
    /// An operation just sent or just answered is read again only after this long: no block
    /// can hold it sooner, and every read is load on the node that takes the sends.
    pub check_after: Duration,
    /// How long after its last send the same bytes go out again.
    pub rebroadcast_after: Duration,
    /// How long the newest attempt may wait, with the account's nonce at ours, before a fee
    /// bump; `None` turns fee bumps off.
    pub fee_bump_after: Option<Duration>,
    /// Most fee bumps of one operation; the signer also caps each one's fees.
    pub max_fee_bumps: u32,
}

impl Default for Rules {
    fn default() -> Self {
        Self {
            confirmations: 1,
            solana_commitment: Commitment::Confirmed,
            check_after: Duration::from_millis(500),
            rebroadcast_after: Duration::from_secs(6),
            fee_bump_after: Some(Duration::from_secs(60)),
            max_fee_bumps: 5,
        }
    }
}
