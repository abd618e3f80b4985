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

impl<E: Endpoint> Endpoint for &E {
    fn label(&self) -> &str {
        (**self).label()
    }

    fn request(
        &self,
        method: &str,
        params: Value,
    ) -> impl Future<Output = Result<Value, RpcError>> + Send {
        (**self).request(method, params)
    }
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

impl<'p> PoolEndpoint<'p> {
    /// The pool's endpoint `index` (in configuration order).
    pub(crate) fn new(pool: &'p RpcPool, index: usize) -> Self {
        Self { pool, index }
    }
}

impl PoolEndpoint<'_> {
    /// Its place in the pool's configuration order.
    pub fn index(&self) -> usize {
        self.index
    }

    /// One request whose answer `parse` must accept: one it refuses counts against the
    /// endpoint's rank and in its metrics, as a malformed answer (see `RpcPool::read_as`).
    pub async fn request_as<T>(
        &self,
        method: &str,
        params: Value,
        parse: impl FnOnce(Value) -> Result<T, Value>,
    ) -> Result<T, RpcError> {
        self.pool.call_as(self.index, method, &params, parse).await
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
/// kept for the pass: blocks by hash, the chain id; blocks and state at a block number while
/// the head last read is the same block (its hash names the whole chain below it). The head
/// ("latest", a block height) is kept only briefly: a pass over thousands of operations
/// outlasts blocks, and a receipt newer than a stale head would wait a pass for no reason.
/// How far back history reaches is kept only until the next signature statuses it answers
/// (see [`PassCache::request`]). Dropped with the pass, so nothing read here outlives it.
#[derive(Debug)]
pub struct PassCache<E> {
    inner: E,
    answers: Mutex<HashMap<String, std::sync::Arc<Slot>>>,
    /// Signature statuses asked for at once, read together; when the last came back.
    statuses: crate::statuses::StatusBatches,
    /// The hash of the last head ("latest" block) read, what reads by number are kept under.
    head: Mutex<String>,
    /// What tells the time: the system's monotonic clock, or a simulation's.
    clock: fn() -> std::time::Instant,
}

/// One request's kept answer. Locked across the read, so that the checks of a pass asking
/// for the same thing at once (an account's nonce, a block) make one request, not one each.
#[derive(Debug, Default)]
struct Slot(tokio::sync::Mutex<SlotState>);

#[derive(Debug, Default)]
struct SlotState {
    /// The answer, when it was asked for, and the cache's event that asked (see
    /// `StatusBatches::event`).
    value: Option<(std::time::Instant, u64, Value)>,
    /// The last failure, and the event at which it came: answered to those who waited for it.
    failed: Option<(u64, RpcError)>,
}

impl<E> PassCache<E> {
    /// A cache in front of `inner`, empty.
    pub fn new(inner: E) -> Self {
        Self::with_clock(inner, std::time::Instant::now)
    }

    /// A cache in front of `inner`, empty, whose time is `clock`'s: a simulation's own, so
    /// that what is kept and for how long follows its simulated time, run after run.
    pub fn with_clock(inner: E, clock: fn() -> std::time::Instant) -> Self {
        Self {
            inner,
            answers: Mutex::new(HashMap::new()),
            statuses: Default::default(),
            head: Mutex::default(),
            clock,
        }
    }

    /// The hash of the last head read ("" before any).
    fn head(&self) -> String {
        self.head.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The endpoint behind the cache.
    pub fn inner(&self) -> &E {
        &self.inner
    }
}

/// How long a head read is reused.
const HEAD_FOR: std::time::Duration = std::time::Duration::from_millis(250);

/// Whether `params` ask about the head ("latest").
fn at_latest(params: &Value) -> bool {
    params.get(0).and_then(Value::as_str) == Some("latest")
        || params.get(1).and_then(Value::as_str) == Some("latest")
}

/// Whether `method` asks for a block, or state at a block, by its number: what a reorg
/// changes.
fn by_number(method: &str, params: &Value) -> bool {
    matches!(method, "eth_getBlockByNumber" | "eth_getTransactionCount") && !at_latest(params)
}

/// How long a read's answer may be reused within a pass, if at all.
fn reusable_for(method: &str, params: &Value) -> Option<std::time::Duration> {
    match method {
        "eth_blockNumber" | "getBlockHeight" | "getEpochInfo" => Some(HEAD_FOR),
        "eth_getBlockByNumber" | "eth_getTransactionCount" if at_latest(params) => Some(HEAD_FOR),
        "eth_getBlockByNumber"
        | "eth_getBlockByHash"
        | "eth_getTransactionCount"
        | "eth_chainId"
        | "getGenesisHash" => Some(std::time::Duration::MAX),
        _ if bounds_history(method) => Some(std::time::Duration::MAX),
        _ => None,
    }
}

/// Whether `method` answers the oldest slot the endpoint's history reaches.
fn bounds_history(method: &str) -> bool {
    matches!(method, "getFirstAvailableBlock" | "minimumLedgerSlot")
}

impl<E: Endpoint> Endpoint for PassCache<E> {
    fn label(&self) -> &str {
        self.inner.label()
    }

    /// A history bound (the first slot kept) is the evidence that a signature status read
    /// before it would have shown a landing: it must be read after those statuses (a node
    /// prunes forward only). So one read before the last statuses this cache answered is
    /// never reused: a bound of 0 read for one view, then a pruning, then another view's
    /// statuses with its landed transfer gone, would prove that transfer never landed.
    ///
    /// Signature statuses asked for by the views of a pass at once are read in one request
    /// (see [`crate::statuses`]).
    async fn request(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        if method == "getSignatureStatuses" {
            if let Some(signatures) = crate::statuses::batchable(&params) {
                return self.statuses.read(&self.inner, signatures).await;
            }
            let answer = self.inner.request(method, params).await;
            self.statuses.answered();
            return answer;
        }
        let Some(reuse) = reusable_for(method, &params) else {
            return self.inner.request(method, params).await;
        };
        // A block (or state at one) by number is kept under the head last read: once a head
        // of another hash is read (a new block, or a reorg), it is read again. Kept across a
        // reorg, block 9's header from before it made a receipt the node still answered from
        // the old block 9 look canonical in a view of the new chain.
        let key = match by_number(method, &params) {
            true => format!("{method}{params}@{}", self.head()),
            false => format!("{method}{params}"),
        };
        let slot = self
            .answers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(key)
            .or_default()
            .clone();
        let asked = self.statuses.event();
        let mut state = slot.0.lock().await;
        // A bound sent after this caller asked, or after the last statuses came back, was sent
        // after this caller's own statuses came back (it asks for the bound once they did): so
        // callers waiting on one read share the next, whatever statuses came back meanwhile.
        let kept_since = match bounds_history(method) {
            true => self.statuses.last_answered().map(|last| last.min(asked)),
            false => None,
        };
        if let Some((at, sent, value)) = &state.value
            && (self.clock)().saturating_duration_since(*at) < reuse
            && kept_since.is_none_or(|since| *sent > since)
        {
            return Ok(value.clone());
        }
        // A read that failed while this one waited for it: its answer (one node that does
        // not answer is not asked again, one timeout after another, by every waiting check).
        if let Some((failed, error)) = &state.failed
            && *failed > asked
        {
            return Err(error.clone());
        }
        // A block asked for by number without its transactions is read for its header; the
        // hashes it lists (a thousand at a thousand transactions a block) would be copied with
        // every answer from the cache, once per operation checked, and read by none. By hash,
        // a block is read for the transactions it holds, once per block (the walk for
        // inclusions keeps what it read).
        let header_only = method == "eth_getBlockByNumber"
            && params.get(1).and_then(Value::as_bool) == Some(false);
        let (at, sent) = ((self.clock)(), self.statuses.event());
        let reads_head = method == "eth_getBlockByNumber" && at_latest(&params);
        match self.inner.request(method, params).await {
            Ok(mut value) => {
                if reads_head && let Some(hash) = value.get("hash").and_then(Value::as_str) {
                    *self.head.lock().unwrap_or_else(|p| p.into_inner()) = hash.to_owned();
                }
                if header_only && let Some(block) = value.as_object_mut() {
                    block.remove("transactions");
                }
                state.value = Some((at, sent, value.clone()));
                Ok(value)
            }
            Err(error) => {
                state.failed = Some((self.statuses.event(), error.clone()));
                Err(error)
            }
        }
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

    /// A node that takes 50 ms to answer a nonce (or fails to), counting what it is asked.
    struct Slow {
        asked: Mutex<usize>,
        fails: bool,
    }

    impl Endpoint for Slow {
        fn label(&self) -> &str {
            "http://slow:8545"
        }

        async fn request(&self, _method: &str, _params: Value) -> Result<Value, RpcError> {
            *self.asked.lock().unwrap() += 1;
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            match self.fails {
                true => Err(RpcError::Http {
                    endpoint: self.label().into(),
                    status: 503,
                }),
                false => Ok(json!("0x7")),
            }
        }
    }

    #[tokio::test]
    async fn reads_of_one_thing_at_once_are_one_read() {
        // Found under load: the checks of a pass run side by side, and every check of an
        // account asked the node for its nonce before the first answer was kept.
        for fails in [false, true] {
            let cache = PassCache::new(Slow {
                asked: Mutex::new(0),
                fails,
            });
            let reads =
                (0..16).map(|_| cache.request("eth_getTransactionCount", json!(["0xabc", "0x10"])));
            let answers = futures::future::join_all(reads).await;
            assert!(answers.iter().all(|a| a.is_ok() != fails), "{answers:?}");
            assert_eq!(*cache.inner.asked.lock().unwrap(), 1, "fails: {fails}");
            if fails {
                // A failure answers those who waited for it, not those who come after.
                let _ = cache
                    .request("eth_getTransactionCount", json!(["0xabc", "0x10"]))
                    .await;
                assert_eq!(*cache.inner.asked.lock().unwrap(), 2);
            }
        }
    }

    /// A node that answers anything, counting what it is asked by method.
    #[derive(Default)]
    struct Counting(Mutex<HashMap<String, usize>>);

    impl Endpoint for Counting {
        fn label(&self) -> &str {
            "http://counting:8899"
        }

        async fn request(&self, method: &str, _params: Value) -> Result<Value, RpcError> {
            *self.0.lock().unwrap().entry(method.into()).or_default() += 1;
            Ok(json!(0))
        }
    }

    #[tokio::test]
    async fn a_history_bound_is_kept_only_until_the_next_statuses_answered() {
        let cache = PassCache::new(Counting::default());
        let asked = |method: &str| cache.inner.0.lock().unwrap().get(method).copied();
        for method in ["minimumLedgerSlot", "getFirstAvailableBlock"] {
            for _ in 0..2 {
                cache.request(method, json!([])).await.unwrap();
            }
            assert_eq!(asked(method), Some(1), "{method}: kept between statuses");
        }
        cache
            .request("getSignatureStatuses", json!([["S"], {}]))
            .await
            .unwrap();
        for method in ["minimumLedgerSlot", "getFirstAvailableBlock"] {
            for _ in 0..2 {
                cache.request(method, json!([])).await.unwrap();
            }
            assert_eq!(
                asked(method),
                Some(2),
                "{method}: read again after statuses, once"
            );
        }
        cache.request("getGenesisHash", json!([])).await.unwrap();
        cache
            .request("getSignatureStatuses", json!([["S"], {}]))
            .await
            .unwrap();
        cache.request("getGenesisHash", json!([])).await.unwrap();
        assert_eq!(
            asked("getGenesisHash"),
            Some(1),
            "what bounds no history is kept"
        );
    }

    /// A node whose history bound takes 100 ms to read and comes back one higher each time.
    #[derive(Default)]
    struct SlowBound(Mutex<u64>);

    impl Endpoint for SlowBound {
        fn label(&self) -> &str {
            "http://slow-bound:8899"
        }

        async fn request(&self, method: &str, _params: Value) -> Result<Value, RpcError> {
            if method != "minimumLedgerSlot" {
                return Ok(json!({ "value": [null] }));
            }
            let read = {
                let mut reads = self.0.lock().unwrap();
                *reads += 1;
                *reads
            };
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            Ok(json!(read))
        }
    }

    #[tokio::test]
    async fn views_waiting_on_one_bound_read_share_the_next_whatever_statuses_come_back_meanwhile()
    {
        // A view asks for the bound once its own statuses came back. Views that asked while a
        // read sent before them was in flight need a new one, and share it, even though other
        // statuses come back while it is read: it was sent after each of them asked.
        let cache = PassCache::new(SlowBound::default());
        let statuses = || cache.request("getSignatureStatuses", json!([["S"], {}]));
        let bound = || cache.request("minimumLedgerSlot", json!([]));
        let after = |ms| tokio::time::sleep(std::time::Duration::from_millis(ms));
        statuses().await.unwrap();
        let (first, second, third, ()) = tokio::join!(
            bound(),
            async {
                after(20).await;
                statuses().await.unwrap();
                bound().await
            },
            async {
                after(40).await;
                statuses().await.unwrap();
                bound().await
            },
            async {
                // While the second read is in flight.
                after(150).await;
                statuses().await.unwrap();
            },
        );
        assert_eq!(first.unwrap(), json!(1));
        assert_eq!(
            second.unwrap(),
            json!(2),
            "sent before it asked: read again"
        );
        assert_eq!(third.unwrap(), json!(2), "the read sent after it asked");
        assert_eq!(*cache.inner().0.lock().unwrap(), 2);
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
        let by_hash = cache
            .request("eth_getBlockByHash", json!(["0xb1", false]))
            .await
            .unwrap();
        assert_eq!(
            by_hash["transactions"].as_array().map(Vec::len),
            Some(2),
            "by hash, with the hashes of its transactions"
        );
    }
}
