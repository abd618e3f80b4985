//! The chains the broadcaster serves: where a payload is sent (one endpoint, once), and how
//! the evidence of an operation is read (one endpoint at a time, through a cache that lives
//! for one pass).

use serde_json::json;
use sigcast_domain::Chain as ChainId;
use sigcast_evm::{Address, B256, EvmRpc};
use sigcast_jsonrpc::{Endpoint, PassCache, PoolEndpoint, quantity};
use sigcast_proto::pb;
use sigcast_protocol::{EvmView, SendOutcome, SolanaView};
use sigcast_solana::SolanaRpc;
use sigcast_telemetry::metrics;
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
    /// Sends `raw` to one endpoint, once (`turn`: its earlier sends, see
    /// [`sigcast_jsonrpc::RpcPool::send`]); what it answered, as the protocol reads it.
    pub(crate) async fn send(&self, raw: &[u8], turn: u32) -> (String, SendOutcome) {
        match self {
            Chain::Evm(rpc) => {
                let sent = rpc.send_raw(raw, turn).await;
                let outcome = sigcast_evm::send_outcome(&sent.result);
                (sent.endpoint, outcome)
            }
            Chain::Solana(rpc) => {
                let sent = rpc.send_transaction(raw, turn).await;
                let outcome = sigcast_solana::send_outcome(&sent.result);
                (sent.endpoint, outcome)
            }
        }
    }

    /// Its endpoints' pool.
    fn pool(&self) -> &sigcast_jsonrpc::RpcPool {
        match self {
            Chain::Evm(rpc) => rpc,
            Chain::Solana(rpc) => rpc,
        }
    }

    /// The endpoints, best first, each behind a cache for one pass.
    pub(crate) fn endpoints(&self) -> Vec<PassCache<PoolEndpoint<'_>>> {
        self.pool()
            .ranked_endpoints()
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

/// Reads `op`'s evidence from `endpoint`; `None` if even its head could not be read, or if
/// the endpoint does not serve the operation's chain.
pub(crate) async fn read_view(
    endpoint: &impl Endpoint,
    op: &pb::Operation,
    chain: &Chain,
    recent: Option<&sigcast_evm::evidence::RecentReceipts>,
    confirmations: u64,
) -> Option<View> {
    match ChainId::parse(&op.chain).ok()? {
        ChainId::Evm { chain_id } => {
            // Asked of this endpoint (once a pass, cached): the one checked at start may since
            // serve another chain (a load balancer, a DNS name moved), and a nonce used there
            // would read as ours used by someone else.
            match sigcast_evm::evidence::served_chain_id(endpoint).await.ok() {
                Some(served) if served == chain_id => {}
                Some(served) => {
                    tracing::warn!(
                        endpoint = endpoint.label(),
                        served,
                        chain_id,
                        "endpoint serves another chain; its answers are not evidence"
                    );
                    metrics::inc(
                        &metrics::metrics().rpc_requests,
                        &[
                            ("endpoint", endpoint.label()),
                            ("method", "eth_chainId"),
                            ("result", "wrong_chain"),
                        ],
                    );
                    return None;
                }
                None => {
                    tracing::debug!(sigcast.op_id = %op.op_id, endpoint = endpoint.label(), "chain id unreadable");
                    return None;
                }
            }
            let nonce = sigcast_protocol::evm::nonce_of(op)?;
            let account: Address = op.account.parse().ok()?;
            let attempts: Vec<B256> = op
                .attempts
                .iter()
                .filter_map(|a| a.tx_id.parse().ok())
                .collect();
            match sigcast_evm::evidence::read_view(
                endpoint,
                account,
                nonce,
                &attempts,
                recent,
                confirmations,
            )
            .await
            {
                Ok(view) => Some(View::Evm(view)),
                Err(error) => {
                    tracing::debug!(sigcast.op_id = %op.op_id, %error, "evidence unreadable");
                    None
                }
            }
        }
        ChainId::Solana { .. } => {
            // As for EVM above: an endpoint of another cluster would show our attempts
            // nowhere and their blockhash expired.
            if let Chain::Solana(rpc) = chain
                && !rpc.serves_cluster(endpoint).await
            {
                metrics::inc(
                    &metrics::metrics().rpc_requests,
                    &[
                        ("endpoint", endpoint.label()),
                        ("method", "getGenesisHash"),
                        ("result", "wrong_chain"),
                    ],
                );
                return None;
            }
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

/// How long [`read_heads`] waits for one endpoint's head.
const HEAD_READ_WITHIN: std::time::Duration = std::time::Duration::from_millis(1_200);

/// Reads the head of every endpoint of the chain `name` at once: its block number (EVM) or
/// block height (Solana), from endpoints that serve this chain (an endpoint of another chain
/// or cluster has no head of ours). Exports each one's head and its lag behind the highest
/// (`chain_head`, `chain_head_lag`; an endpoint that did not answer has neither until it
/// does). Whether any endpoint answered: the chain's readiness.
pub(crate) async fn read_heads(name: &str, chain: &Chain) -> bool {
    let chain_id = match ChainId::parse(name) {
        Ok(ChainId::Evm { chain_id }) => Some(chain_id),
        _ => None,
    };
    let endpoints = chain.pool().ranked_endpoints();
    let heads = futures::future::join_all(endpoints.iter().map(|endpoint| async move {
        // Each endpoint within `HEAD_READ_WITHIN`, shorter than the readiness probe's own
        // limit: one endpoint that does not answer must not hide the others' heads.
        let head = tokio::time::timeout(HEAD_READ_WITHIN, async {
            match chain {
                Chain::Evm(_) => {
                    let served = endpoint.request("eth_chainId", json!([])).await;
                    match served.as_ref().ok().and_then(quantity) {
                        Some(served) if Some(served) == chain_id => endpoint
                            .request("eth_blockNumber", json!([]))
                            .await
                            .ok()
                            .as_ref()
                            .and_then(quantity),
                        _ => None,
                    }
                }
                Chain::Solana(rpc) if rpc.serves_cluster(endpoint).await => endpoint
                    .request("getBlockHeight", json!([]))
                    .await
                    .ok()
                    .and_then(|v| v.as_u64()),
                Chain::Solana(_) => None,
            }
        })
        .await
        .ok()
        .flatten();
        (endpoint.label().to_owned(), endpoint.index(), head)
    }))
    .await;
    // Reads go to an endpoint far behind only after the others.
    let mut by_index = vec![None; endpoints.len()];
    for (_, index, head) in &heads {
        if let Some(slot) = by_index.get_mut(*index) {
            *slot = *head;
        }
    }
    chain.pool().record_heads(&by_index);
    let heads: Vec<(String, Option<u64>)> = heads
        .into_iter()
        .map(|(label, _, head)| (label, head))
        .collect();
    let highest = heads.iter().filter_map(|(_, head)| *head).max();
    let m = metrics::metrics();
    for (endpoint, head) in &heads {
        let labels = metrics::owned(&[("chain", name), ("endpoint", endpoint)]);
        match (head, highest) {
            (Some(head), Some(highest)) => {
                m.chain_head
                    .get_or_create(&labels)
                    .set(i64::try_from(*head).unwrap_or(i64::MAX));
                m.chain_head_lag
                    .get_or_create(&labels)
                    .set(i64::try_from(highest - head).unwrap_or(i64::MAX));
            }
            _ => {
                m.chain_head.remove(&labels);
                m.chain_head_lag.remove(&labels);
            }
        }
    }
    highest.is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;
    use sigcast_jsonrpc::RpcError;
    use std::sync::Mutex;

    /// An endpoint of chain `chain_id` at block 5, where the account's nonce is past 7: the
    /// methods it was asked, in order.
    struct Node {
        chain_id: u64,
        genesis: &'static str,
        asked: Mutex<Vec<String>>,
    }

    impl Endpoint for Node {
        fn label(&self) -> &str {
            "http://node:8545"
        }

        async fn request(&self, method: &str, _params: Value) -> Result<Value, RpcError> {
            self.asked.lock().unwrap().push(method.to_owned());
            Ok(match method {
                "eth_chainId" => json!(format!("0x{:x}", self.chain_id)),
                "getGenesisHash" => json!(self.genesis),
                "eth_getBlockByNumber" => json!({
                    "number": "0x5",
                    "hash": format!("0x{}", "b5".repeat(32)),
                }),
                "eth_getTransactionCount" => json!("0x9"),
                _ => Value::Null,
            })
        }
    }

    fn op() -> pb::Operation {
        pb::Operation {
            op_id: "op-1".into(),
            chain: "eip155:31337".into(),
            account: "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266".into(),
            signing: Some(pb::operation::Signing::Evm(pb::EvmSigning { nonce: 7 })),
            ..Default::default()
        }
    }

    fn evm() -> Chain {
        Chain::Evm(
            EvmRpc::new(
                &["http://127.0.0.1:1".to_owned()],
                std::time::Duration::from_secs(1),
            )
            .unwrap(),
        )
    }

    fn solana(genesis: Option<&str>) -> Chain {
        Chain::Solana(
            SolanaRpc::new(
                &["http://127.0.0.1:1".to_owned()],
                std::time::Duration::from_secs(1),
            )
            .unwrap()
            .expecting_cluster("localnet", genesis),
        )
    }

    fn solana_op() -> pb::Operation {
        pb::Operation {
            op_id: "op-2".into(),
            chain: "solana:localnet".into(),
            account: "11111111111111111111111111111111".into(),
            signing: Some(pb::operation::Signing::Solana(pb::SolanaSigning {
                blockhash: "11111111111111111111111111111111".into(),
                last_valid_block_height: 150,
                nonce_account: String::new(),
                signing_slot: 1,
            })),
            attempts: vec![pb::Attempt {
                number: 1,
                tx_id: "1111111111111111111111111111111111111111111111111111111111111111".into(),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn an_endpoint_of_another_solana_cluster_gives_no_evidence() {
        let node = |genesis| Node {
            chain_id: 0,
            genesis,
            asked: Mutex::default(),
        };
        // Configured (or known by name): another genesis is refused, before anything else.
        let other = node("GenesisOfAnotherCluster");
        assert!(
            read_view(&other, &solana_op(), &solana(Some("OurGenesis")), None, 1)
                .await
                .is_none()
        );
        assert_eq!(*other.asked.lock().unwrap(), ["getGenesisHash"]);
        assert!(
            read_view(
                &node("OurGenesis"),
                &solana_op(),
                &solana(Some("OurGenesis")),
                None,
                1
            )
            .await
            .is_some()
        );
        // Not configured: pinned only once every configured endpoint answers the same hash;
        // here the configured one does not answer, so no endpoint's view counts.
        let unpinned = solana(None);
        assert!(
            read_view(&node("First"), &solana_op(), &unpinned, None, 1)
                .await
                .is_none()
        );
        // devnet is known by name.
        let devnet = Chain::Solana(
            SolanaRpc::new(
                &["http://127.0.0.1:1".to_owned()],
                std::time::Duration::from_secs(1),
            )
            .unwrap()
            .expecting_cluster("devnet", None),
        );
        assert!(
            read_view(&node("First"), &solana_op(), &devnet, None, 1)
                .await
                .is_none()
        );
    }

    #[tokio::test]
    async fn an_endpoint_serving_another_chain_gives_no_evidence() {
        let node = Node {
            chain_id: 1,
            genesis: "",
            asked: Mutex::default(),
        };
        assert!(read_view(&node, &op(), &evm(), None, 1).await.is_none());
        assert_eq!(*node.asked.lock().unwrap(), ["eth_chainId"]);
    }

    #[tokio::test]
    async fn an_endpoint_serving_the_operation_s_chain_is_read() {
        let node = Node {
            chain_id: 31337,
            genesis: "",
            asked: Mutex::default(),
        };
        let Some(View::Evm(view)) = read_view(&node, &op(), &evm(), None, 1).await else {
            panic!("no view");
        };
        assert_eq!(view.head.number, 5);
        assert_eq!(view.account_nonce, Some(9));
    }
}
