//! One endpoint at a time: evidence must come from a single view of the chain (a head, and
//! the nonce, receipts and blocks read against it), so it is read through this interface
//! rather than through hedged reads. A simulated node implements it too.

use crate::RpcError;
use crate::pool::RpcPool;
use serde_json::Value;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;

/// One JSON-RPC endpoint.
pub trait Endpoint: Send + Sync {
    /// How it is named in evidence, logs and errors: scheme://host:port, never its path.
    fn label(&self) -> &str;

    /// One request, answered by this endpoint alone.
    fn request(
        &self,
        method: &str,
        params: Value,
    ) -> impl Future<Output = Result<Value, RpcError>> + Send;
}

/// An endpoint of a pool, with the pool's health accounting and metrics.
#[derive(Debug, Clone, Copy)]
pub struct PoolEndpoint<'p> {
    pool: &'p RpcPool,
    index: usize,
}

impl RpcPool {
    /// Every endpoint, best-ranked first (healthy before demoted, faster first).
    pub fn ranked_endpoints(&self) -> Vec<PoolEndpoint<'_>> {
        self.ranked()
            .into_iter()
            .map(|index| PoolEndpoint { pool: self, index })
            .collect()
    }
}

impl Endpoint for PoolEndpoint<'_> {
    fn label(&self) -> &str {
        self.pool.label(self.index)
    }

    async fn request(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        self.pool.call(self.index, method, &params).await
    }
}

/// An endpoint whose answers to reads that cannot change within one pass over the work are
/// kept for the pass: blocks and state at a block number, the chain id, how far back history
/// reaches. The head ("latest", a block height) is kept only briefly: a pass over thousands of
/// operations outlasts blocks, and a receipt newer than a stale head would wait a pass for no
/// reason. Dropped with the pass, so nothing read here outlives it.
#[derive(Debug)]
pub struct PassCache<E> {
    inner: E,
    answers: Mutex<HashMap<String, (std::time::Instant, Value)>>,
}

impl<E> PassCache<E> {
    /// A cache in front of `inner`, empty.
    pub fn new(inner: E) -> Self {
        Self {
            inner,
            answers: Mutex::new(HashMap::new()),
        }
    }
}

/// How long a head read is reused.
const HEAD_FOR: std::time::Duration = std::time::Duration::from_millis(250);

/// How long a read's answer may be reused within a pass, if at all.
fn reusable_for(method: &str, params: &Value) -> Option<std::time::Duration> {
    let latest = params.get(0).and_then(Value::as_str) == Some("latest")
        || params.get(1).and_then(Value::as_str) == Some("latest");
    match method {
        "eth_blockNumber" | "getBlockHeight" => Some(HEAD_FOR),
        "eth_getBlockByNumber" | "eth_getTransactionCount" if latest => Some(HEAD_FOR),
        "eth_getBlockByNumber"
        | "eth_getTransactionCount"
        | "eth_chainId"
        | "getFirstAvailableBlock"
        | "getGenesisHash"
        | "minimumLedgerSlot" => Some(std::time::Duration::MAX),
        _ => None,
    }
}

impl<E: Endpoint> Endpoint for PassCache<E> {
    fn label(&self) -> &str {
        self.inner.label()
    }

    async fn request(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        let Some(reuse) = reusable_for(method, &params) else {
            return self.inner.request(method, params).await;
        };
        let key = format!("{method}{params}");
        if let Some((at, value)) = self
            .answers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            && at.elapsed() < reuse
        {
            return Ok(value.clone());
        }
        // A block asked for without its transactions is read for its header; the hashes it
        // lists (a thousand at a thousand transactions a block) would be copied with every
        // answer from the cache, once per operation checked, and read by none.
        let header_only = method == "eth_getBlockByNumber"
            && params.get(1).and_then(Value::as_bool) == Some(false);
        let mut value = self.inner.request(method, params).await?;
        if header_only && let Some(block) = value.as_object_mut() {
            block.remove("transactions");
        }
        self.answers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, (std::time::Instant::now(), value.clone()));
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A node that answers every block with two transactions, counting what it is asked.
    struct Node(Mutex<usize>);

    impl Endpoint for Node {
        fn label(&self) -> &str {
            "http://node:8545"
        }

        async fn request(&self, _method: &str, params: Value) -> Result<Value, RpcError> {
            *self.0.lock().unwrap() += 1;
            let full = params[1].as_bool().unwrap();
            let tx = |n: u64| {
                if full {
                    json!({"nonce": n})
                } else {
                    json!(format!("0x{n}"))
                }
            };
            Ok(json!({"number": params[0], "hash": "0xb1", "transactions": [tx(1), tx(2)]}))
        }
    }

    #[tokio::test]
    async fn a_block_read_for_its_header_is_kept_and_answered_without_its_transactions() {
        let cache = PassCache::new(Node(Mutex::new(0)));
        for _ in 0..2 {
            let header = cache
                .request("eth_getBlockByNumber", json!(["0x5", false]))
                .await
                .unwrap();
            assert_eq!(header, json!({"number": "0x5", "hash": "0xb1"}));
        }
        assert_eq!(
            *cache.inner.0.lock().unwrap(),
            1,
            "the second from the cache"
        );
        let full = cache
            .request("eth_getBlockByNumber", json!(["0x5", true]))
            .await
            .unwrap();
        assert_eq!(full["transactions"].as_array().unwrap().len(), 2);
    }
}
