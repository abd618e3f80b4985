//! A fault-injecting HTTP proxy between a sigcast service and a real node.
//!
//! It forwards JSON-RPC requests to the node unchanged. On `eth_sendRawTransaction` it injects,
//! with a seeded probability, the failures that make a send's outcome unknown:
//! forward-then-drop-the-reply, drop-before-forwarding, a 502 after forwarding, a connection
//! reset after forwarding, and a reply delayed past the client's timeout. Reads pass through.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One kind of injected failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fault {
    /// The node receives the send; the client gets no reply (connection closed).
    ForwardThenDrop,
    /// The client's connection is closed before anything is forwarded.
    DropBeforeForward,
    /// The node receives the send; the client gets HTTP 502.
    ForwardThen502,
    /// The node receives the send; the client's connection is reset (RST).
    ForwardThenReset,
    /// The node receives the send; the reply comes after `delay`.
    Delay,
}

const FAULTS: [Fault; 5] = [
    Fault::ForwardThenDrop,
    Fault::DropBeforeForward,
    Fault::ForwardThen502,
    Fault::ForwardThenReset,
    Fault::Delay,
];

/// What the proxy saw and did.
#[derive(Debug, Default, Clone)]
pub struct ProxyStats {
    /// `eth_sendRawTransaction` requests received.
    pub sends: usize,
    /// Faults injected, by kind.
    pub faults: Vec<Fault>,
    /// Requests of any kind forwarded to the node.
    pub forwarded: usize,
    /// Sends forwarded without a fault that the node answered "nonce too low": a resend of
    /// bytes already included (the sender's check not yet run), an unknown outcome to it too.
    pub nonce_used_answers: usize,
    /// The block of each `eth_getBlockReceipts` request forwarded, as asked.
    pub block_lists: Vec<String>,
}

/// A running proxy; stops when dropped.
pub struct FaultProxy {
    /// The URL to give the client instead of the node's.
    pub url: String,
    stats: Arc<Mutex<ProxyStats>>,
    down: Arc<std::sync::atomic::AtomicBool>,
    lose_sends: Arc<std::sync::atomic::AtomicBool>,
    refusal: Arc<Mutex<Option<SendReply>>>,
    inflation: Arc<std::sync::atomic::AtomicU64>,
    stale_base_fee: Arc<Mutex<Option<u128>>>,
    task: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// Proxies to `upstream` (host:port), injecting a fault on a share `fault_rate` of sends,
    /// chosen by an RNG seeded with `seed`; `delay` is how late a delayed reply comes.
    pub async fn start(upstream: SocketAddr, fault_rate: f64, seed: u64, delay: Duration) -> Self {
        Self::launch(upstream, fault_rate, seed, delay, None).await
    }

    /// A slow endpoint: forwards everything, and answers every request `lag` late.
    pub async fn slow(upstream: SocketAddr, lag: Duration) -> Self {
        Self::launch(upstream, 0.0, 0, Duration::ZERO, Some(lag)).await
    }

    async fn launch(
        upstream: SocketAddr,
        fault_rate: f64,
        seed: u64,
        delay: Duration,
        lag: Option<Duration>,
    ) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let url = format!("http://{}", listener.local_addr().unwrap());
        let stats = Arc::new(Mutex::new(ProxyStats::default()));
        let rng = Arc::new(Mutex::new(StdRng::seed_from_u64(seed)));
        let shared = stats.clone();
        let down = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let is_down = down.clone();
        let lose_sends = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let losing = lose_sends.clone();
        let refusal: Arc<Mutex<Option<SendReply>>> = Arc::default();
        let refusing = refusal.clone();
        let inflation = Arc::new(std::sync::atomic::AtomicU64::new(1));
        let inflating = inflation.clone();
        let stale_base_fee: Arc<Mutex<Option<u128>>> = Arc::default();
        let stale = stale_base_fee.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if is_down.load(std::sync::atomic::Ordering::SeqCst) {
                    drop(client); // an outage: nothing reaches the node, nothing comes back
                    continue;
                }
                let (stats, rng) = (shared.clone(), rng.clone());
                let faults = Faults {
                    rate: fault_rate,
                    delay,
                    lag,
                    lose_sends: losing.load(std::sync::atomic::Ordering::SeqCst),
                    fee_inflation: inflating.load(std::sync::atomic::Ordering::SeqCst),
                    stale_base_fee: *stale.lock().unwrap(),
                };
                let refusal = refusing.lock().unwrap().clone();
                tokio::spawn(async move {
                    let _ = serve(client, upstream, faults, refusal, stats, rng).await;
                });
            }
        });
        Self {
            url,
            stats,
            down,
            lose_sends,
            refusal,
            inflation,
            stale_base_fee,
            task,
        }
    }

    /// Multiplies the fees the node quotes (`eth_gasPrice`, `eth_maxPriorityFeePerGas`, a
    /// block's `baseFeePerGas`) by `factor`, as a compromised or broken endpoint might; 1 stops.
    pub fn set_inflating_fees(&self, factor: u64) {
        self.inflation
            .store(factor, std::sync::atomic::Ordering::SeqCst);
    }

    /// Answers every block read with `base_fee` per gas, as an endpoint still at an older head
    /// would (the rest of the block as the node has it); `None` stops.
    pub fn set_stale_base_fee(&self, base_fee: Option<u128>) {
        *self.stale_base_fee.lock().unwrap() = base_fee;
    }

    /// Answers every send with a node error carrying `message`, without forwarding it (as a
    /// node refusing the transaction would); `None` stops.
    pub fn set_refusing_sends(&self, message: Option<&str>) {
        *self.refusal.lock().unwrap() = message.map(|m| SendReply::Refused(m.to_owned()));
    }

    /// Answers every send as accepted without forwarding it (`true`), as an endpoint whose
    /// pool is full or private, or an unstaked Solana RPC, acknowledges what it drops; or stops.
    pub fn set_swallowing_sends(&self, swallow: bool) {
        *self.refusal.lock().unwrap() = swallow.then_some(SendReply::Accepted);
    }

    /// Loses every send before it reaches the node (`true`), while reads pass; or stops.
    pub fn set_losing_sends(&self, lose: bool) {
        self.lose_sends
            .store(lose, std::sync::atomic::Ordering::SeqCst);
    }

    /// Takes the node off the network (`true`) or back on.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, std::sync::atomic::Ordering::SeqCst);
    }

    /// What happened so far.
    pub fn stats(&self) -> ProxyStats {
        self.stats.lock().unwrap().clone()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reads one HTTP/1.1 request (headers and a Content-Length body); `None` at EOF.
async fn read_request(stream: &mut TcpStream) -> std::io::Result<Option<(Vec<u8>, Vec<u8>)>> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 8192];
    let header_end = loop {
        if let Some(pos) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break pos + 4;
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buffer.extend_from_slice(&chunk[..n]);
    };
    let headers = String::from_utf8_lossy(&buffer[..header_end]).to_ascii_lowercase();
    let length: usize = headers
        .lines()
        .find_map(|l| {
            l.strip_prefix("content-length:")
                .map(|v| v.trim().parse().unwrap_or(0))
        })
        .unwrap_or(0);
    while buffer.len() < header_end + length {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
    let body = buffer[header_end..header_end + length].to_vec();
    Ok(Some((buffer[..header_end].to_vec(), body)))
}

/// Forwards one request body to the node and returns its whole HTTP response.
async fn forward(upstream: SocketAddr, body: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut node = TcpStream::connect(upstream).await?;
    let head = format!(
        "POST / HTTP/1.1\r\nHost: {upstream}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    node.write_all(head.as_bytes()).await?;
    node.write_all(body).await?;
    let mut response = Vec::new();
    node.read_to_end(&mut response).await?;
    Ok(response)
}

/// `response` (a whole HTTP response to `request`) with each fee quote (`eth_gasPrice`,
/// `eth_maxPriorityFeePerGas`, a block's `baseFeePerGas`) replaced by `rewrite(method, quote)`;
/// anything else, or anything it cannot read, unchanged.
fn rewrite_fees(
    request: &[u8],
    response: Vec<u8>,
    rewrite: impl Fn(&str, u128) -> u128,
) -> Vec<u8> {
    use serde_json::Value;
    let Ok(request) = serde_json::from_slice::<Value>(request) else {
        return response;
    };
    let Some(split) = response.windows(4).position(|w| w == b"\r\n\r\n") else {
        return response;
    };
    let Ok(mut reply) = serde_json::from_slice::<Value>(&response[split + 4..]) else {
        return response;
    };
    let method = request["method"].as_str().unwrap_or_default();
    let rewritten = |quantity: &mut Value| {
        if let Some(n) = quantity
            .as_str()
            .and_then(|q| u128::from_str_radix(q.trim_start_matches("0x"), 16).ok())
        {
            *quantity = Value::String(format!("{:#x}", rewrite(method, n)));
        }
    };
    match method {
        "eth_gasPrice" | "eth_maxPriorityFeePerGas" => rewritten(&mut reply["result"]),
        "eth_getBlockByNumber" => {
            if let Some(base) = reply["result"].get_mut("baseFeePerGas") {
                rewritten(base);
            }
        }
        _ => return response,
    }
    let body = reply.to_string();
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// What the proxy does to one connection's request.
/// How the proxy answers a send it does not forward.
#[derive(Debug, Clone)]
enum SendReply {
    /// A node error carrying this message.
    Refused(String),
    /// Success.
    Accepted,
}

#[derive(Clone, Copy)]
struct Faults {
    /// Share of sends faulted.
    rate: f64,
    /// How late a delayed reply comes.
    delay: Duration,
    /// Every reply this late (a slow endpoint).
    lag: Option<Duration>,
    /// Every send lost before it reaches the node.
    lose_sends: bool,
    /// Fee quotes multiplied by this.
    fee_inflation: u64,
    /// Every block read answers this base fee.
    stale_base_fee: Option<u128>,
}

async fn serve(
    mut client: TcpStream,
    upstream: SocketAddr,
    faults: Faults,
    refusal: Option<SendReply>,
    stats: Arc<Mutex<ProxyStats>>,
    rng: Arc<Mutex<StdRng>>,
) -> std::io::Result<()> {
    let Faults {
        rate: fault_rate,
        delay,
        lag,
        lose_sends,
        fee_inflation,
        stale_base_fee,
    } = faults;
    // One request per connection: the node's reply says `Connection: close`, and so do we.
    let Some((_head, body)) = read_request(&mut client).await? else {
        return Ok(());
    };
    let text = String::from_utf8_lossy(&body);
    let is_send = text.contains("eth_sendRawTransaction") || text.contains("\"sendTransaction\"");
    let fault = if is_send {
        let mut rng = rng.lock().unwrap();
        let fault = if lose_sends {
            Some(Fault::DropBeforeForward)
        } else {
            (rng.gen_bool(fault_rate)).then(|| FAULTS[rng.gen_range(0..FAULTS.len())])
        };
        let mut stats = stats.lock().unwrap();
        stats.sends += 1;
        stats.faults.extend(fault);
        fault
    } else {
        None
    };
    if fault == Some(Fault::DropBeforeForward) {
        return Ok(());
    }
    if let Some(answer) = refusal.filter(|_| is_send) {
        let id = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v.get("id").cloned())
            .unwrap_or(serde_json::Value::Null);
        let reply = match answer {
            SendReply::Refused(message) => serde_json::json!({
                "jsonrpc": "2.0", "id": id,
                "error": { "code": -32003, "message": message }
            }),
            // What the caller learns of the transaction's id is not read from a send's answer.
            SendReply::Accepted => serde_json::json!({
                "jsonrpc": "2.0", "id": id, "result": format!("0x{}", "00".repeat(32))
            }),
        }
        .to_string();
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            reply.len()
        );
        client.write_all(head.as_bytes()).await?;
        client.write_all(reply.as_bytes()).await?;
        return Ok(());
    }
    let mut response = forward(upstream, &body).await?;
    {
        let mut stats = stats.lock().unwrap();
        stats.forwarded += 1;
        if text.contains("eth_getBlockReceipts")
            && let Ok(request) = serde_json::from_slice::<serde_json::Value>(&body)
            && request["method"] == "eth_getBlockReceipts"
        {
            stats.block_lists.push(request["params"][0].to_string());
        }
        if is_send
            && fault.is_none()
            && String::from_utf8_lossy(&response).contains("nonce too low")
        {
            stats.nonce_used_answers += 1;
        }
    }
    if fee_inflation > 1 {
        response = rewrite_fees(&body, response, |_, quote| {
            quote.saturating_mul(u128::from(fee_inflation))
        });
    }
    if let Some(base_fee) = stale_base_fee {
        response = rewrite_fees(&body, response, |method, quote| match method {
            "eth_getBlockByNumber" => base_fee,
            _ => quote,
        });
    }
    if let Some(lag) = lag {
        tokio::time::sleep(lag).await;
    }
    match fault {
        Some(Fault::ForwardThenDrop) => return Ok(()),
        Some(Fault::ForwardThen502) => {
            client
                .write_all(
                    b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                )
                .await?;
            return Ok(());
        }
        Some(Fault::ForwardThenReset) => {
            client.set_zero_linger()?;
            return Ok(());
        }
        Some(Fault::Delay) => tokio::time::sleep(delay).await,
        _ => {}
    }
    client.write_all(&response).await?;
    Ok(())
}
