//! JSON-RPC over HTTP to a set of endpoints of one chain.
//!
//! Reads are hedged: a read goes to the best-ranked endpoint and, if no answer came within a
//! delay derived from that endpoint's recent latency, also to the next; the first good answer
//! wins, and endpoints that fail are demoted for a while. Sends are never hedged, never
//! batched and never retried here: one raw transaction, one endpoint, one request.

use crate::{Error, Result, RpcError};
use alloy_primitives::{Address, B256};
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use serde_json::{Value, json};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Consecutive failures after which an endpoint is demoted.
const DEMOTE_AFTER: u32 = 3;
/// How long a demoted endpoint stays at the back of the line.
const DEMOTION: Duration = Duration::from_secs(10);
/// Hedge delay bounds.
const MIN_HEDGE: Duration = Duration::from_millis(20);
const MAX_HEDGE: Duration = Duration::from_millis(1_000);
/// Hedge delay for an endpoint with no latency measured yet.
const FIRST_HEDGE: Duration = Duration::from_millis(150);

#[derive(Debug)]
struct Health {
    latency_ewma: Option<Duration>,
    consecutive_failures: u32,
    demoted_until: Option<Instant>,
}

#[derive(Debug)]
struct Endpoint {
    url: String,
    health: Mutex<Health>,
}

impl Endpoint {
    fn record(&self, elapsed: Duration, ok: bool) {
        let mut h = self.health.lock().unwrap_or_else(|p| p.into_inner());
        if ok {
            h.consecutive_failures = 0;
            h.demoted_until = None;
            h.latency_ewma = Some(match h.latency_ewma {
                Some(avg) => (avg * 4 + elapsed) / 5,
                None => elapsed,
            });
        } else {
            h.consecutive_failures += 1;
            if h.consecutive_failures >= DEMOTE_AFTER {
                h.demoted_until = Some(Instant::now() + DEMOTION);
            }
        }
    }

    /// Sort key: healthy before demoted, then faster first.
    fn rank(&self, now: Instant) -> (bool, Duration) {
        let h = self.health.lock().unwrap_or_else(|p| p.into_inner());
        (
            h.demoted_until.is_some_and(|until| until > now),
            h.latency_ewma.unwrap_or(FIRST_HEDGE),
        )
    }

    fn hedge_delay(&self) -> Duration {
        let h = self.health.lock().unwrap_or_else(|p| p.into_inner());
        h.latency_ewma
            .map_or(FIRST_HEDGE, |avg| (avg * 2).clamp(MIN_HEDGE, MAX_HEDGE))
    }
}

/// One send: where it went and what came back.
#[derive(Debug)]
pub struct SendAttempt {
    /// The endpoint the raw transaction went to.
    pub endpoint: String,
    /// The hash the node returned, or its failure.
    pub result: Result<B256, RpcError>,
}

/// A transaction receipt, as far as sigcast needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    /// Transaction hash.
    pub tx_hash: B256,
    /// Block it was included in.
    pub block_number: u64,
    /// That block's hash.
    pub block_hash: String,
    /// Execution succeeded (status 1) or reverted (status 0).
    pub success: bool,
}

/// The endpoints of one chain.
#[derive(Debug)]
pub struct RpcPool {
    endpoints: Vec<Endpoint>,
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
        let endpoints = urls
            .iter()
            .map(|url| Endpoint {
                url: url.clone(),
                health: Mutex::new(Health {
                    latency_ewma: None,
                    consecutive_failures: 0,
                    demoted_until: None,
                }),
            })
            .collect();
        Ok(Self {
            endpoints,
            http,
            next_id: AtomicU64::new(1),
        })
    }

    /// The configured endpoint URLs, in configuration order.
    pub fn urls(&self) -> Vec<&str> {
        self.endpoints.iter().map(|e| e.url.as_str()).collect()
    }

    fn ranked(&self) -> Vec<usize> {
        let now = Instant::now();
        let mut order: Vec<usize> = (0..self.endpoints.len()).collect();
        order.sort_by_key(|&i| self.endpoints[i].rank(now));
        order
    }

    async fn call(&self, index: usize, method: &str, params: &Value) -> Result<Value, RpcError> {
        let endpoint = &self.endpoints[index];
        let started = Instant::now();
        let result = self.post(&endpoint.url, method, params).await;
        endpoint.record(
            started.elapsed(),
            result.is_ok() || matches!(result, Err(RpcError::Node { .. })),
        );
        result
    }

    async fn post(&self, url: &str, method: &str, params: &Value) -> Result<Value, RpcError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        let response = self
            .http
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string())
            .send()
            .await
            .map_err(|e| RpcError::Transport {
                endpoint: url.to_owned(),
                message: e.to_string(),
                maybe_delivered: !e.is_connect(),
            })?;
        let status = response.status();
        if !status.is_success() {
            return Err(RpcError::Http {
                endpoint: url.to_owned(),
                status: status.as_u16(),
            });
        }
        let bytes = response.bytes().await.map_err(|e| RpcError::Transport {
            endpoint: url.to_owned(),
            message: e.to_string(),
            maybe_delivered: true,
        })?;
        let malformed = |message: String| RpcError::Malformed {
            endpoint: url.to_owned(),
            message,
        };
        let mut reply: Value =
            serde_json::from_slice(&bytes).map_err(|e| malformed(e.to_string()))?;
        if let Some(error) = reply.get("error") {
            return Err(RpcError::Node {
                endpoint: url.to_owned(),
                code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
                message: error
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
            });
        }
        match reply.get_mut("result") {
            Some(result) => Ok(result.take()),
            None => Err(malformed("no result and no error".into())),
        }
    }

    /// A hedged read: the first good answer of the ranked endpoints.
    pub async fn read(&self, method: &'static str, params: Value) -> Result<Value> {
        let order = self.ranked();
        let mut in_flight = FuturesUnordered::new();
        let mut errors = Vec::new();
        let mut launched = 0;
        let launch = |n: usize| {
            let index = order[n];
            let params = &params;
            async move { self.call(index, method, params).await }
        };
        in_flight.push(launch(0));
        launched += 1;
        loop {
            let delay = self.endpoints[order[launched - 1]].hedge_delay();
            tokio::select! {
                Some(result) = in_flight.next() => match result {
                    Ok(value) => return Ok(value),
                    Err(error) => {
                        tracing::debug!(%error, method, "read failed");
                        errors.push(error);
                        if launched < order.len() {
                            in_flight.push(launch(launched));
                            launched += 1;
                        } else if in_flight.is_empty() {
                            return Err(Error::AllEndpointsFailed { method, errors });
                        }
                    }
                },
                _ = tokio::time::sleep(delay), if launched < order.len() => {
                    tracing::debug!(method, endpoint = %self.endpoints[order[launched]].url, "hedging read");
                    in_flight.push(launch(launched));
                    launched += 1;
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

    /// Sends a signed transaction to the best endpoint, once.
    pub async fn send_raw(&self, raw: &[u8]) -> SendAttempt {
        let index = self.ranked()[0];
        let params = json!([format!("0x{}", hex_lower(raw))]);
        let result = self
            .call(index, "eth_sendRawTransaction", &params)
            .await
            .and_then(|value| {
                parse_b256(&value).ok_or_else(|| RpcError::Malformed {
                    endpoint: self.endpoints[index].url.clone(),
                    message: format!("not a transaction hash: {value}"),
                })
            });
        SendAttempt {
            endpoint: self.endpoints[index].url.clone(),
            result,
        }
    }

    /// `eth_chainId`.
    pub async fn chain_id(&self) -> Result<u64> {
        let value = self.read("eth_chainId", json!([])).await?;
        quantity(&value).ok_or_else(|| malformed_all("eth_chainId", &value))
    }

    /// `eth_blockNumber`.
    pub async fn block_number(&self) -> Result<u64> {
        let value = self.read("eth_blockNumber", json!([])).await?;
        quantity(&value).ok_or_else(|| malformed_all("eth_blockNumber", &value))
    }

    /// The account's nonce at the latest block: how many of its transactions are included.
    pub async fn nonce(&self, address: Address) -> Result<u64> {
        let value = self
            .read(
                "eth_getTransactionCount",
                json!([address.to_string(), "latest"]),
            )
            .await?;
        quantity(&value).ok_or_else(|| malformed_all("eth_getTransactionCount", &value))
    }

    /// The receipt of `hash`, if the answering endpoint has one.
    pub async fn receipt(&self, hash: B256) -> Result<Option<Receipt>> {
        let value = self
            .read("eth_getTransactionReceipt", json!([hash.to_string()]))
            .await?;
        Ok(parse_receipt(&value))
    }

    /// Balance in wei, as a decimal string.
    pub async fn balance(&self, address: Address) -> Result<alloy_primitives::U256> {
        let value = self
            .read("eth_getBalance", json!([address.to_string(), "latest"]))
            .await?;
        value
            .as_str()
            .and_then(|s| {
                alloy_primitives::U256::from_str_radix(s.trim_start_matches("0x"), 16).ok()
            })
            .ok_or_else(|| malformed_all("eth_getBalance", &value))
    }

    /// Current EIP-1559 fees: twice the latest base fee plus the node's suggested tip, so the
    /// transaction stays includable through several blocks of rising base fee.
    pub async fn eip1559_fees(&self) -> Result<crate::Fees> {
        let block = self
            .read("eth_getBlockByNumber", json!(["latest", false]))
            .await?;
        let base = block
            .get("baseFeePerGas")
            .and_then(quantity_u128)
            .unwrap_or(0);
        let tip = match self.read("eth_maxPriorityFeePerGas", json!([])).await {
            Ok(value) => quantity_u128(&value).unwrap_or(1_000_000_000),
            Err(_) => 1_000_000_000,
        };
        Ok(crate::Fees::Eip1559 {
            max_fee_per_gas: base * 2 + tip,
            max_priority_fee_per_gas: tip,
        })
    }

    /// `eth_gasPrice`, for legacy transactions.
    pub async fn gas_price(&self) -> Result<u128> {
        let value = self.read("eth_gasPrice", json!([])).await?;
        quantity_u128(&value).ok_or_else(|| malformed_all("eth_gasPrice", &value))
    }

    /// `eth_estimateGas` for a call.
    pub async fn estimate_gas(
        &self,
        from: Address,
        to: Address,
        value_wei: &str,
        data: &[u8],
    ) -> Result<u64> {
        let value = alloy_primitives::U256::from_str_radix(value_wei, 10).unwrap_or_default();
        let call = json!({
            "from": from.to_string(), "to": to.to_string(),
            "value": format!("0x{value:x}"), "data": format!("0x{}", hex_lower(data)),
        });
        let estimate = self.read("eth_estimateGas", json!([call])).await?;
        quantity(&estimate).ok_or_else(|| malformed_all("eth_estimateGas", &estimate))
    }
}

fn malformed_all(method: &'static str, value: &Value) -> Error {
    Error::AllEndpointsFailed {
        method,
        errors: vec![RpcError::Malformed {
            endpoint: "(hedged)".into(),
            message: format!("unexpected result {value}"),
        }],
    }
}

fn hex_lower(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A JSON-RPC quantity ("0x1a") as u64.
pub(crate) fn quantity(value: &Value) -> Option<u64> {
    u64::from_str_radix(value.as_str()?.strip_prefix("0x")?, 16).ok()
}

fn quantity_u128(value: &Value) -> Option<u128> {
    u128::from_str_radix(value.as_str()?.strip_prefix("0x")?, 16).ok()
}

fn parse_b256(value: &Value) -> Option<B256> {
    value.as_str()?.parse().ok()
}

/// Parses a receipt object; `None` for JSON null (no receipt).
pub(crate) fn parse_receipt(value: &Value) -> Option<Receipt> {
    if value.is_null() {
        return None;
    }
    Some(Receipt {
        tx_hash: parse_b256(value.get("transactionHash")?)?,
        block_number: quantity(value.get("blockNumber")?)?,
        block_hash: value.get("blockHash")?.as_str()?.to_owned(),
        success: quantity(value.get("status")?)? == 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receipts_parse_and_null_is_none() {
        let receipt = json!({
            "transactionHash": "0x88df016429689c079f3b2f6ad39fa052532c56795b733da78a91ebe6a713944b",
            "blockNumber": "0x1b4", "blockHash": "0xabc", "status": "0x0"
        });
        let parsed = parse_receipt(&receipt).unwrap();
        assert_eq!((parsed.block_number, parsed.success), (436, false));
        assert_eq!(parse_receipt(&Value::Null), None);
    }
}
