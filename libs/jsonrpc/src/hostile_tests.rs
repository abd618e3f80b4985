//! Endpoints that misbehave on purpose, over real HTTP: each answer is bounded in size and
//! time, counted against its endpoint, never returned as a result, and never a panic.

use crate::{RpcError, RpcPool, quantity};
use serde_json::{Value, json};
use sigcast_telemetry::metrics;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// What a hostile endpoint does with a request.
#[derive(Debug, Clone, Copy)]
enum Hostile {
    /// A `Content-Length` of 1 GiB, then bytes until the client hangs up.
    DeclaresHuge,
    /// Chunked, endless: `[[[[…` until the client hangs up.
    Endless,
    /// Headers, then one byte every 200 ms, forever.
    Trickles,
    /// Not JSON.
    NotJson,
    /// The answer to another request (its id plus one).
    OtherId,
    /// A result of the wrong type: a JSON number, not a quantity string.
    WrongType,
    /// A quantity past u64.
    Overflows,
    /// An `error` that is not a JSON-RPC error object, 1 MiB of it.
    HugeBadError,
    /// A batch (an array) for a single request.
    Array,
    /// Not hostile: `"0x1"` with the request's id.
    Honest,
    /// Not hostile: the id echoed as a string, as some proxies do.
    StringId,
    /// Not hostile: an error with a null id (the node could not read the request's id).
    NullIdError,
}

/// A JSON body as an HTTP/1.1 200 answer.
fn http_ok(body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Reads one HTTP request with a JSON body; its JSON-RPC id.
async fn read_request(socket: &mut TcpStream) -> Option<Value> {
    let mut seen = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        let n = socket.read(&mut buffer).await.ok()?;
        if n == 0 {
            return None;
        }
        seen.extend_from_slice(&buffer[..n]);
        let text = String::from_utf8_lossy(&seen);
        if let Some(split) = text.find("\r\n\r\n") {
            let length: usize = text[..split]
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse().ok())?
                })
                .unwrap_or(0);
            if seen.len() >= split + 4 + length {
                let body: Value = serde_json::from_slice(&seen[split + 4..]).ok()?;
                return body.get("id").cloned();
            }
        }
    }
}

/// An endpoint answering every request the `hostile` way; its URL.
async fn endpoint(hostile: Hostile) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                while let Some(id) = read_request(&mut socket).await {
                    let id = id.as_u64().unwrap_or(0);
                    let written = match hostile {
                        Hostile::DeclaresHuge => {
                            let head = "HTTP/1.1 200 OK\r\ncontent-length: 1073741824\r\n\r\n";
                            let _ = socket.write_all(head.as_bytes()).await;
                            let chunk = vec![b' '; 64 * 1024];
                            while socket.write_all(&chunk).await.is_ok() {}
                            return;
                        }
                        Hostile::Endless => {
                            let head = "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n";
                            let _ = socket.write_all(head.as_bytes()).await;
                            let chunk = format!("10000\r\n{}\r\n", "[".repeat(0x10000));
                            while socket.write_all(chunk.as_bytes()).await.is_ok() {}
                            return;
                        }
                        Hostile::Trickles => {
                            let head = "HTTP/1.1 200 OK\r\ncontent-length: 1000000\r\n\r\n{";
                            let _ = socket.write_all(head.as_bytes()).await;
                            loop {
                                tokio::time::sleep(Duration::from_millis(200)).await;
                                if socket.write_all(b" ").await.is_err() {
                                    return;
                                }
                            }
                        }
                        Hostile::NotJson => {
                            socket.write_all(&http_ok("{\"jsonrpc\":\"2.0\",")).await
                        }
                        Hostile::OtherId => {
                            let body = json!({"jsonrpc": "2.0", "id": id + 1, "result": "0x1"});
                            socket.write_all(&http_ok(&body.to_string())).await
                        }
                        Hostile::WrongType => {
                            let body = json!({"jsonrpc": "2.0", "id": id, "result": 17});
                            socket.write_all(&http_ok(&body.to_string())).await
                        }
                        Hostile::Overflows => {
                            let result = format!("0x1{}", "0".repeat(40));
                            let body = json!({"jsonrpc": "2.0", "id": id, "result": result});
                            socket.write_all(&http_ok(&body.to_string())).await
                        }
                        Hostile::HugeBadError => {
                            let error = "e".repeat(1 << 20);
                            let body = json!({"jsonrpc": "2.0", "id": id, "error": error});
                            socket.write_all(&http_ok(&body.to_string())).await
                        }
                        Hostile::Honest => {
                            let body = json!({"jsonrpc": "2.0", "id": id, "result": "0x1"});
                            socket.write_all(&http_ok(&body.to_string())).await
                        }
                        Hostile::StringId => {
                            let body =
                                json!({"jsonrpc": "2.0", "id": id.to_string(), "result": "0x1"});
                            socket.write_all(&http_ok(&body.to_string())).await
                        }
                        Hostile::NullIdError => {
                            let error = json!({"code": -32000, "message": "nonce too low"});
                            let body = json!({"jsonrpc": "2.0", "id": null, "error": error});
                            socket.write_all(&http_ok(&body.to_string())).await
                        }
                        Hostile::Array => {
                            let body = json!([{"jsonrpc": "2.0", "id": id, "result": "0x1"}]);
                            socket.write_all(&http_ok(&body.to_string())).await
                        }
                    };
                    if written.is_err() {
                        return;
                    }
                }
            });
        }
    });
    format!("http://{addr}")
}

/// This process's resident memory, in bytes.
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

fn malformed_count(url: &str) -> u64 {
    let labels = [
        ("endpoint", metrics::endpoint_label(url)),
        ("method", "eth_blockNumber".to_owned()),
        ("result", "malformed".to_owned()),
    ];
    let labels: Vec<(&'static str, &str)> = labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
    metrics::metrics()
        .rpc_requests
        .get_or_create(&metrics::owned(&labels))
        .get()
}

const ALL: [Hostile; 9] = [
    Hostile::DeclaresHuge,
    Hostile::Endless,
    Hostile::Trickles,
    Hostile::NotJson,
    Hostile::OtherId,
    Hostile::WrongType,
    Hostile::Overflows,
    Hostile::HugeBadError,
    Hostile::Array,
];

#[tokio::test]
async fn no_hostile_answer_is_taken_for_a_result_and_each_counts_against_its_endpoint() {
    for hostile in ALL {
        let bad = endpoint(hostile).await;
        let good = endpoint(Hostile::Honest).await;
        let pool = RpcPool::new(&[bad.clone(), good], Duration::from_secs(1)).unwrap();
        let parse = |v: Value| quantity(&v).ok_or(v);
        for _ in 0..4 {
            // Bounded: the read ends, from the honest endpoint, whatever the other one does.
            let read = tokio::time::timeout(
                Duration::from_secs(30),
                pool.read_as("eth_blockNumber", json!([]), parse),
            )
            .await
            .expect("a read that never ends");
            assert_eq!(read.unwrap(), 1);
        }
        assert_eq!(
            pool.ranked()[0],
            1,
            "{hostile:?}: the hostile endpoint still ranks first"
        );
        // Alone, the hostile endpoint's answer is an error, never a result.
        let alone = tokio::time::timeout(
            Duration::from_secs(30),
            pool.read_from(&bad, "eth_blockNumber", json!([])),
        )
        .await
        .expect("a read that never ends");
        let error = match alone.map(|v| parse(v).map_err(|v| v.to_string())) {
            Ok(Ok(n)) => panic!("{hostile:?}: taken for a result: {n}"),
            Ok(Err(value)) => value,
            Err(error) => error.to_string(),
        };
        assert!(error.len() < 1024, "an error quoting {} bytes", error.len());
    }
}

#[tokio::test]
async fn an_answer_that_is_not_the_method_s_type_is_counted_malformed() {
    for hostile in [Hostile::WrongType, Hostile::Overflows, Hostile::OtherId] {
        let bad = endpoint(hostile).await;
        let pool = RpcPool::new(std::slice::from_ref(&bad), Duration::from_secs(1)).unwrap();
        let before = malformed_count(&bad);
        let read = pool
            .read_as("eth_blockNumber", json!([]), |v| quantity(&v).ok_or(v))
            .await;
        assert!(read.is_err(), "{read:?}");
        assert_eq!(malformed_count(&bad), before + 1);
    }
}

#[tokio::test]
async fn an_endless_answer_is_cut_off_before_it_is_held_in_memory() {
    for hostile in [Hostile::Endless, Hostile::DeclaresHuge] {
        let bad = endpoint(hostile).await;
        // Long enough for hundreds of MiB over loopback: only the size limit ends the read.
        let pool = RpcPool::new(std::slice::from_ref(&bad), Duration::from_secs(60)).unwrap();
        let before = resident_bytes();
        for _ in 0..5 {
            match pool.read_from(&bad, "eth_blockNumber", json!([])).await {
                Err(RpcError::Malformed { message, .. }) => {
                    assert!(message.contains("bytes"), "{message}")
                }
                other => panic!("{other:?}"),
            }
        }
        let grown = resident_bytes().saturating_sub(before);
        assert!(
            grown < 64 * 1024 * 1024,
            "five endless answers grew memory by {} MiB",
            grown >> 20
        );
    }
}

#[tokio::test]
async fn a_trickling_answer_ends_at_the_timeout_as_an_unknown_outcome() {
    let bad = endpoint(Hostile::Trickles).await;
    let pool = RpcPool::new(&[bad], Duration::from_secs(1)).unwrap();
    let sent = tokio::time::timeout(
        Duration::from_secs(30),
        pool.send("eth_sendRawTransaction", json!(["0x00"]), 0),
    )
    .await
    .expect("a send that never ends");
    match sent.result {
        Err(RpcError::Transport {
            maybe_delivered: true,
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn an_id_echoed_as_a_string_and_an_error_with_a_null_id_are_answers() {
    let url = endpoint(Hostile::StringId).await;
    let pool = RpcPool::new(std::slice::from_ref(&url), Duration::from_secs(1)).unwrap();
    assert_eq!(
        pool.read_as("eth_blockNumber", json!([]), |v| quantity(&v).ok_or(v))
            .await
            .unwrap(),
        1
    );
    let url = endpoint(Hostile::NullIdError).await;
    let pool = RpcPool::new(std::slice::from_ref(&url), Duration::from_secs(1)).unwrap();
    let sent = pool
        .send("eth_sendRawTransaction", json!(["0x00"]), 0)
        .await;
    match sent.result {
        Err(RpcError::Node {
            code: -32000,
            message,
            ..
        }) => assert_eq!(message, "nonce too low"),
        other => panic!("{other:?}"),
    }
}
