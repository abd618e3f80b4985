//! JSON-RPC over HTTP to a set of endpoints of one chain.
//!
//! Reads are hedged: a read goes to the best-ranked endpoint and, if no answer came within a
//! delay derived from that endpoint's recent latency, also to the next; the first good answer
//! wins, and endpoints that fail are demoted for a while. Sends are never hedged, never
//! batched and never retried here: one raw transaction, one endpoint, one request.

use crate::hedge::{AfterFailure, HedgedRead, Ranking};
use crate::{Error, Result, RpcError};
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use serde_json::{Value, json};
use sigcast_telemetry::{metrics, trace};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tracing::Instrument;

/// The largest answer read from an endpoint. The biggest sigcast asks for is a block with its
/// transactions (a few MiB on the busiest chains); anything larger is a broken or hostile
/// endpoint, and is cut off before it is held in memory.
pub const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;
/// The most of an endpoint's text (a value it answered) that an error, and so a log line or a
/// stored record, carries.
const MAX_QUOTED_BYTES: usize = 256;
/// The most of a node's error message kept: sends are classified by what it says ("nonce too
/// low", "already known"), which real nodes say within their first hundred bytes.
const MAX_NODE_MESSAGE_BYTES: usize = 4096;

#[derive(Debug)]
struct Endpoint {
    url: String,
    /// The URL without path or credentials, for metrics and debug lines.
    label: String,
}

/// One send: where it went and what came back.
#[derive(Debug)]
pub struct SendAttempt<T> {
    /// The endpoint the request went to: scheme, host and port (no path, which may hold a key).
    pub endpoint: String,
    /// Its result, or its failure.
    pub result: Result<T, RpcError>,
}

/// The endpoints of one chain.
#[derive(Debug)]
pub struct RpcPool {
    endpoints: Vec<Endpoint>,
    /// What the requests so far say of each endpoint.
    ranking: Mutex<Ranking>,
    /// The origin of the times `ranking` is given.
    origin: Instant,
    http: reqwest::Client,
    next_id: AtomicU64,
}

impl RpcPool {
    /// A pool over `urls`; each request times out after `timeout`.
    pub fn new(urls: &[String], timeout: Duration) -> Result<Self> {
        if urls.is_empty() {
            return Err(Error::NoEndpoints);
        }
        // reqwest is built without a default TLS provider; ring is ours.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(5)))
            .build()
            .map_err(|e| Error::Client(e.to_string()))?;
        let endpoints: Vec<Endpoint> = urls
            .iter()
            .map(|url| Endpoint {
                url: url.clone(),
                label: metrics::endpoint_label(url),
            })
            .collect();
        // Hedges of every endpoint exported from the start, at 0 until one fires.
        for endpoint in &endpoints {
            let labels = [("endpoint", endpoint.label.as_str())];
            metrics::declare(&metrics::metrics().hedges_fired, &labels);
            metrics::declare(&metrics::metrics().hedges_won, &labels);
        }
        Ok(Self {
            ranking: Mutex::new(Ranking::new(endpoints.len())),
            origin: Instant::now(),
            endpoints,
            http,
            next_id: AtomicU64::new(1),
        })
    }

    /// The configured endpoint URLs, in configuration order.
    pub fn urls(&self) -> Vec<&str> {
        self.endpoints.iter().map(|e| e.url.as_str()).collect()
    }

    pub(crate) fn ranked(&self) -> Vec<usize> {
        self.ranking().ranked(self.now())
    }

    /// Each endpoint's head as just read, in configuration order (`None`: no answer): one
    /// far behind the highest is ranked after the others (see [`Ranking::record_heads`]).
    pub fn record_heads(&self, heads: &[Option<u64>]) {
        self.ranking().record_heads(heads);
    }

    fn ranking(&self) -> std::sync::MutexGuard<'_, Ranking> {
        self.ranking.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The time, as `ranking` is given it.
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    /// The label of endpoint `index`.
    pub(crate) fn label(&self, index: usize) -> &str {
        &self.endpoints[index].label
    }

    pub(crate) async fn call(
        &self,
        index: usize,
        method: &str,
        params: &Value,
    ) -> Result<Value, RpcError> {
        self.call_as(index, method, params, Ok).await
    }

    /// One request to endpoint `index`, its answer read by `parse`. An answer that is not
    /// what `method` returns (`parse` fails) counts against the endpoint like no answer: a
    /// node that answers nonsense is as broken as one that does not answer.
    pub(crate) async fn call_as<T>(
        &self,
        index: usize,
        method: &str,
        params: &Value,
        parse: impl FnOnce(Value) -> Result<T, Value>,
    ) -> Result<T, RpcError> {
        let endpoint = &self.endpoints[index];
        let started = Instant::now();
        let result = self.post(endpoint, method, params).await.and_then(|value| {
            parse(value).map_err(|value| RpcError::Malformed {
                endpoint: endpoint.label.clone(),
                message: format!("{method} answered {}", quoted(&value.to_string())),
            })
        });
        let elapsed = started.elapsed();
        self.ranking()
            .record(index, elapsed, crate::hedge::answered(&result), self.now());
        let m = metrics::metrics();
        let labels = [("endpoint", endpoint.label.as_str()), ("method", method)];
        m.rpc_duration
            .get_or_create(&metrics::owned(&labels))
            .observe(elapsed.as_secs_f64());
        let outcome = match &result {
            Ok(_) => "ok",
            Err(RpcError::Node { .. }) => "node_error",
            Err(RpcError::Malformed { .. }) => "malformed",
            Err(_) => "failed",
        };
        metrics::inc(
            &m.rpc_requests,
            &[labels[0], labels[1], ("result", outcome)],
        );
        result
    }

    /// One request, in a client span of its own when made for an operation (see
    /// [`trace::jsonrpc_span`]). Errors name the endpoint by its label: URLs often carry API
    /// keys.
    async fn post(
        &self,
        endpoint: &Endpoint,
        method: &str,
        params: &Value,
    ) -> Result<Value, RpcError> {
        let span = trace::jsonrpc_span(method, &endpoint.label);
        let result = self
            .post_untraced(endpoint, method, params)
            .instrument(span.clone())
            .await;
        if let Err(error) = &result {
            let node_code = match error {
                RpcError::Node { code, .. } => Some(*code),
                _ => None,
            };
            trace::record_failure(&span, node_code, &error.to_string());
        }
        result
    }

    async fn post_untraced(
        &self,
        endpoint: &Endpoint,
        method: &str,
        params: &Value,
    ) -> Result<Value, RpcError> {
        let (url, label) = (endpoint.url.as_str(), endpoint.label.as_str());
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        let mut response = self
            .http
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string())
            .send()
            .await
            .map_err(|e| RpcError::Transport {
                endpoint: label.to_owned(),
                maybe_delivered: !e.is_connect(),
                // reqwest's message names the whole URL; the label stands for it.
                message: e.without_url().to_string(),
            })?;
        let status = response.status();
        if !status.is_success() {
            return Err(RpcError::Http {
                endpoint: label.to_owned(),
                status: status.as_u16(),
            });
        }
        let malformed = |message: String| RpcError::Malformed {
            endpoint: label.to_owned(),
            message,
        };
        let too_large = || malformed(format!("an answer over {MAX_RESPONSE_BYTES} bytes"));
        if response
            .content_length()
            .is_some_and(|n| n > MAX_RESPONSE_BYTES as u64)
        {
            return Err(too_large());
        }
        // Read piece by piece, so an endless answer is cut off at the limit (and a trickling
        // one by the client's timeout, which covers the body).
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| RpcError::Transport {
            endpoint: label.to_owned(),
            message: e.without_url().to_string(),
            maybe_delivered: true,
        })? {
            if bytes.len() + chunk.len() > MAX_RESPONSE_BYTES {
                return Err(too_large());
            }
            bytes.extend_from_slice(&chunk);
        }
        let reply: Value =
            serde_json::from_slice(&bytes).map_err(|e| malformed(format!("not JSON: {e}")))?;
        let Value::Object(mut reply) = reply else {
            return Err(malformed(format!(
                "not a JSON-RPC response object: {}",
                quoted(&reply.to_string())
            )));
        };
        // An answer to another request (a confused proxy, a shared connection) says nothing
        // about this one. Some proxies echo the id as a string; a node that could not read
        // the request at all answers its error with a null id.
        let answers_this = match reply.get("id") {
            Some(Value::Number(n)) => n.as_u64() == Some(id),
            Some(Value::String(s)) => *s == id.to_string(),
            Some(Value::Null) => reply.contains_key("error"),
            _ => false,
        };
        if !answers_this {
            return Err(malformed(format!(
                "the answer to request {id} carries id {}",
                quoted(&reply.get("id").map(Value::to_string).unwrap_or_default())
            )));
        }
        if let Some(error) = reply.get("error") {
            let code = error.get("code").and_then(Value::as_i64);
            let message = error.get("message").and_then(Value::as_str);
            return match (code, message) {
                (Some(code), Some(message)) => Err(RpcError::Node {
                    endpoint: label.to_owned(),
                    code,
                    message: clip(message, MAX_NODE_MESSAGE_BYTES),
                }),
                _ => Err(malformed(format!(
                    "an error that is not a JSON-RPC error object: {}",
                    quoted(&error.to_string())
                ))),
            };
        }
        match reply.remove("result") {
            Some(result) => Ok(result),
            None => Err(malformed("no result and no error".into())),
        }
    }

    /// A hedged read: the first good answer of the ranked endpoints.
    pub async fn read(&self, method: &'static str, params: Value) -> Result<Value> {
        self.read_as(method, params, Ok).await
    }

    /// A hedged read whose answer `parse` must accept: the first answer it accepts wins; one
    /// it refuses counts against its endpoint, and the read goes on to the next.
    pub async fn read_as<T>(
        &self,
        method: &'static str,
        params: Value,
        parse: impl Fn(Value) -> Result<T, Value> + Copy,
    ) -> Result<T> {
        let params = &params;
        self.hedged(method, |endpoint| {
            self.call_as(endpoint.index(), method, params, parse)
        })
        .await
    }

    /// A hedged read of what `read` makes of one endpoint (several requests to it, say, that
    /// must come from one view): the first endpoint's answer it accepts wins, as for one
    /// request; `method` names it in errors and logs.
    pub async fn hedged<'p, T, F>(
        &'p self,
        method: &'static str,
        read: impl Fn(crate::PoolEndpoint<'p>) -> F,
    ) -> Result<T>
    where
        F: std::future::Future<Output = Result<T, RpcError>>,
    {
        let (mut read_state, first) = HedgedRead::start(&self.ranking(), self.now());
        let mut in_flight = FuturesUnordered::new();
        let mut errors = Vec::new();
        let launch = |index: usize| {
            let answer = read(crate::PoolEndpoint::new(self, index));
            async move { (index, answer.await) }
        };
        in_flight.push(launch(first));
        loop {
            let hedge_in = read_state
                .hedge_at(&self.ranking())
                .map(|at| at.saturating_sub(self.now()));
            tokio::select! {
                Some((index, result)) = in_flight.next() => match result {
                    Ok(value) => {
                        // The requests still in flight are dropped here; `won` counts what
                        // they cost.
                        if read_state.won(index, self.now(), &mut self.ranking()) {
                            let endpoint = self.endpoints[index].label.as_str();
                            metrics::inc(&metrics::metrics().hedges_won, &[("endpoint", endpoint)]);
                        }
                        return Ok(value);
                    }
                    Err(error) => {
                        tracing::debug!(%error, method, "read failed");
                        errors.push(error);
                        match read_state.failed(index, self.now()) {
                            AfterFailure::Ask(next) => in_flight.push(launch(next)),
                            AfterFailure::Wait => {}
                            AfterFailure::Failed => {
                                return Err(Error::AllEndpointsFailed { method, errors });
                            }
                        }
                    }
                },
                _ = tokio::time::sleep(hedge_in.unwrap_or_default()), if hedge_in.is_some() => {
                    if let Some(next) = read_state.hedge(self.now()) {
                        // Counted by the endpoint the hedge goes to, as a win is: won / fired
                        // is how often hedging to that endpoint paid off.
                        let endpoint = self.endpoints[next].label.as_str();
                        tracing::debug!(method, endpoint, "hedging read");
                        metrics::inc(&metrics::metrics().hedges_fired, &[("endpoint", endpoint)]);
                        in_flight.push(launch(next));
                    }
                }
            }
        }
    }

    /// A read from one endpoint only, for evidence that must come from a single view of the
    /// chain (a nonce and the receipts checked against it).
    pub async fn read_from(
        &self,
        url: &str,
        method: &str,
        params: Value,
    ) -> Result<Value, RpcError> {
        let index = self
            .endpoints
            .iter()
            .position(|e| e.url == url)
            .unwrap_or(0);
        self.call(index, method, &params).await
    }

    /// A write: sent once to one endpoint, never hedged, never batched, never retried here.
    /// `turn` counts the earlier sends of the same bytes: the first goes to the best-ranked
    /// endpoint, each next one to the next in rank, round. An endpoint that acknowledges a
    /// transaction and drops it (a full or private pool, an unstaked Solana RPC) answers
    /// like a healthy one and keeps its rank: sent there every time, the transaction would
    /// never land while another endpoint would carry it.
    pub async fn send(&self, method: &str, params: Value, turn: u32) -> SendAttempt<Value> {
        let ranked = self.ranked();
        let index = ranked[turn as usize % ranked.len()];
        let result = self.call(index, method, &params).await;
        SendAttempt {
            endpoint: self.endpoints[index].label.clone(),
            result,
        }
    }
}

/// At most [`MAX_QUOTED_BYTES`] of an endpoint's text, for an error.
pub fn quoted(text: &str) -> String {
    clip(text, MAX_QUOTED_BYTES)
}

/// At most `max` bytes of `text`, cut at a character boundary, saying how long it was.
fn clip(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &text[..end], text.len())
}

/// A JSON-RPC quantity ("0x1a") as u64.
pub fn quantity(value: &Value) -> Option<u64> {
    u64::from_str_radix(value.as_str()?.strip_prefix("0x")?, 16).ok()
}

/// A JSON-RPC quantity as u128.
pub fn quantity_u128(value: &Value) -> Option<u128> {
    u128::from_str_radix(value.as_str()?.strip_prefix("0x")?, 16).ok()
}

/// The error for a result that is not what `method` returns.
pub fn unexpected(method: &'static str, value: &Value) -> Error {
    Error::Unexpected {
        method,
        value: quoted(&value.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A JSON-RPC endpoint answering every request with `"0x1"` after `delay_ms`, counting
    /// the requests it received.
    async fn endpoint(
        delay_ms: std::sync::Arc<AtomicU64>,
        requests: std::sync::Arc<AtomicU64>,
    ) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let Ok((mut socket, _)) = listener.accept().await else {
                    return;
                };
                let (delay_ms, requests) = (delay_ms.clone(), requests.clone());
                tokio::spawn(async move {
                    let mut buffer = vec![0u8; 8192];
                    let mut seen = Vec::new();
                    loop {
                        let Ok(n) = socket.read(&mut buffer).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        seen.extend_from_slice(&buffer[..n]);
                        // One request per read is enough for these small bodies.
                        if !seen.windows(4).any(|w| w == b"\r\n\r\n") || !seen.ends_with(b"}") {
                            continue;
                        }
                        let split = seen.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
                        let id = serde_json::from_slice::<Value>(&seen[split + 4..])
                            .ok()
                            .and_then(|request| request.get("id").cloned())
                            .unwrap_or_default();
                        seen.clear();
                        requests.fetch_add(1, Ordering::Relaxed);
                        let delay = delay_ms.load(Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(delay)).await;
                        let body = json!({"jsonrpc": "2.0", "id": id, "result": "0x1"}).to_string();
                        let reply = format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if socket.write_all(reply.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        format!("http://{addr}")
    }

    #[tokio::test]
    async fn an_endpoint_that_turns_slow_is_ranked_behind_the_one_that_answers() {
        let counter = || std::sync::Arc::new(AtomicU64::new(0));
        let (delay_a, requests_a) = (counter(), counter());
        let (delay_b, requests_b) = (counter(), counter());
        let a = endpoint(delay_a.clone(), requests_a.clone()).await;
        let b = endpoint(delay_b, requests_b.clone()).await;
        let pool = RpcPool::new(&[a, b], Duration::from_secs(5)).unwrap();
        for _ in 0..10 {
            pool.read("eth_blockNumber", json!([])).await.unwrap();
        }
        // A, first and fast so far, now takes 2 s: every read hedges to B, which answers, and
        // A's request is dropped unanswered. That slowness must count against A.
        delay_a.store(2_000, Ordering::Relaxed);
        for _ in 0..20 {
            pool.read("eth_blockNumber", json!([])).await.unwrap();
        }
        assert_eq!(
            pool.ranked()[0],
            1,
            "the endpoint whose answers were abandoned as too slow still ranks first"
        );
        let a_before = requests_a.load(Ordering::Relaxed);
        for _ in 0..10 {
            pool.read("eth_blockNumber", json!([])).await.unwrap();
        }
        assert_eq!(
            requests_a.load(Ordering::Relaxed),
            a_before,
            "reads no longer start at the slow endpoint"
        );
        assert!(requests_b.load(Ordering::Relaxed) >= 30);
    }

    #[tokio::test]
    async fn hedges_fired_and_won_carry_the_same_labels_so_one_divides_the_other() {
        let counter = || std::sync::Arc::new(AtomicU64::new(0));
        let slow = endpoint(std::sync::Arc::new(AtomicU64::new(3_000)), counter()).await;
        let fast = endpoint(counter(), counter()).await;
        let pool = RpcPool::new(&[slow, fast.clone()], Duration::from_secs(5)).unwrap();
        // The slow endpoint ranks first (configured first, nothing measured yet), so the read
        // hedges to the fast one, which wins.
        let labels = metrics::owned(&[("endpoint", &fast)]);
        let count = || {
            let fired = metrics::metrics()
                .hedges_fired
                .get(&labels)
                .map(|c| c.get());
            let won = metrics::metrics().hedges_won.get(&labels).map(|c| c.get());
            (fired, won)
        };
        assert_eq!(count(), (Some(0), Some(0)), "exported at 0 from the start");
        pool.read("eth_blockNumber", json!([])).await.unwrap();
        assert_eq!(count(), (Some(1), Some(1)), "fired and won, by endpoint");
    }

    #[tokio::test]
    async fn an_endpoint_s_path_never_reaches_an_error_or_a_send_record() {
        // Providers put API keys in the path; nothing listens on port 1.
        let pool = RpcPool::new(
            &["http://127.0.0.1:1/v2/SECRETKEY".to_owned()],
            Duration::from_secs(2),
        )
        .unwrap();
        let sent = pool
            .send("eth_sendRawTransaction", json!(["0x00"]), 0)
            .await;
        assert_eq!(sent.endpoint, "http://127.0.0.1:1");
        let error = sent.result.unwrap_err().to_string();
        assert!(!error.contains("SECRETKEY"), "{error}");
        let read = pool.read("eth_blockNumber", json!([])).await.unwrap_err();
        assert!(!read.to_string().contains("SECRETKEY"), "{read}");
    }
}
