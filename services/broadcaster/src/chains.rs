//! The chains the broadcaster serves: where a payload is sent (one endpoint, once), and how
//! the evidence of an operation is read (one endpoint at a time, through a cache that lives
//! for one pass).

use sigcast_domain::Chain as ChainId;
use sigcast_evm::{Address, B256, EvmRpc};
use sigcast_jsonrpc::{PassCache, PoolEndpoint, RpcError};
use sigcast_proto::pb;
use sigcast_protocol::{EvmView, SendOutcome, SolanaView};
use sigcast_solana::SolanaRpc;
use std::collections::HashMap;

/// One served chain's endpoints.
pub(crate) enum Chain {
    /// An EVM chain.
    Evm(EvmRpc),
    /// A Solana cluster.
    Solana(SolanaRpc),
}

/// The served chains by CAIP-2 name.
pub(crate) type Chains = HashMap<String, Chain>;

impl Chain {
    /// Sends `raw` to one endpoint, once; what it answered, as the protocol reads it.
    pub(crate) async fn send(&self, raw: &[u8]) -> (String, SendOutcome) {
        match self {
            Chain::Evm(rpc) => {
                let sent = rpc.send_raw(raw).await;
                let outcome = sigcast_evm::send_outcome(&sent.result);
                (sent.endpoint, outcome)
            }
            Chain::Solana(rpc) => {
                let sent = rpc.send_transaction(raw).await;
                let outcome = match &sent.result {
                    Ok(_) => SendOutcome::Accepted,
                    // A duplicate is as good as accepted; anything else is resolved from
                    // signature statuses, never from the message.
                    Err(RpcError::Node { message, .. })
                        if message.contains("already been processed") =>
                    {
                        SendOutcome::Accepted
                    }
                    Err(_) => SendOutcome::Unknown,
                };
                (sent.endpoint, outcome)
            }
        }
    }

    /// The endpoints, best first, each behind a cache for one pass.
    pub(crate) fn endpoints(&self) -> Vec<PassCache<PoolEndpoint<'_>>> {
        let pool = match self {
            Chain::Evm(rpc) => &**rpc,
            Chain::Solana(rpc) => &**rpc,
        };
        pool.ranked_endpoints()
            .into_iter()
            .map(PassCache::new)
            .collect()
    }
}

/// One view read from one endpoint for `op`, of the kind its chain needs.
pub(crate) enum View {
    /// EVM.
    Evm(EvmView),
    /// Solana.
    Solana(SolanaView),
}

/// Reads `op`'s evidence from `endpoint`; `None` if even its head could not be read.
pub(crate) async fn read_view(
    endpoint: &PassCache<PoolEndpoint<'_>>,
    op: &pb::Operation,
) -> Option<View> {
    match ChainId::parse(&op.chain).ok()? {
        ChainId::Evm { .. } => {
            let nonce = sigcast_protocol::evm::nonce_of(op)?;
            let account: Address = op.account.parse().ok()?;
            let attempts: Vec<B256> = op
                .attempts
                .iter()
                .filter_map(|a| a.tx_id.parse().ok())
                .collect();
            match sigcast_evm::evidence::read_view(endpoint, account, nonce, &attempts).await {
                Ok(view) => Some(View::Evm(view)),
                Err(error) => {
                    tracing::debug!(op.id = %op.op_id, %error, "evidence unreadable");
                    None
                }
            }
        }
        ChainId::Solana { .. } => {
            let signing = sigcast_protocol::solana::signing_of(op)?;
            let signatures: Vec<String> = op.attempts.iter().map(|a| a.tx_id.clone()).collect();
            let nonce_account: Option<[u8; 32]> =
                sigcast_protocol::solana::uses_durable_nonce(signing)
                    .then(|| {
                        bs58::decode(&signing.nonce_account)
                            .into_vec()
                            .ok()
                            .and_then(|v| v.try_into().ok())
                    })
                    .flatten();
            Some(View::Solana(
                sigcast_solana::evidence::read_view(endpoint, &signatures, nonce_account.as_ref())
                    .await,
            ))
        }
    }
}
