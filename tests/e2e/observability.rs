//! Observability end to end: spans exported over OTLP to a real gRPC receiver (the
//! opentelemetry-proto service in Python), one trace per operation across the three service
//! processes and a restart; metrics read over HTTP, parsed by the reference Prometheus
//! parser, and checked against what a fault run did.

use crate::clients::repo;
use crate::evm::{DEV, recipient, transfer, wait_terminal};
use serde_json::Value;
use sigcast_e2e::{Stack, StackOptions};
use sigcast_proto::pb;
use std::collections::{BTreeSet, HashMap};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The OTLP receiver process; killed when dropped.
struct Receiver {
    child: Child,
    port: u16,
    spans: std::path::PathBuf,
}

impl Receiver {
    fn start(dir: &std::path::Path) -> Self {
        let spans = dir.join("spans.jsonl");
        let mut child = Command::new("python3")
            .arg(repo().join("tests/tools/otlp_receiver.py"))
            .arg(&spans)
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the OTLP receiver");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .strip_prefix("listening on ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("receiver said {line:?}"));
        Self { child, port, spans }
    }

    fn spans(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.spans)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The trace id an operation must have, derived here independently of the services:
/// SHA-256("sigcast/trace/v1\0" ‖ op_id), first 16 bytes, hex.
fn derived_trace_id(op_id: &str) -> String {
    use sha2::Digest;
    let digest =
        sha2::Sha256::digest([b"sigcast/trace/v1\0".as_slice(), op_id.as_bytes()].concat());
    hex::encode(&digest[..16])
}

const SERVICES: [&str; 3] = ["sigcast-gateway", "sigcast-signer", "sigcast-broadcaster"];

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_operation_is_one_trace_across_the_three_services_and_a_restart() {
    let scratch = tempfile::tempdir().unwrap();
    let receiver = Receiver::start(scratch.path());
    let mut stack = Stack::start(StackOptions {
        accounts: 2,
        // Blocks every 3 s: time to restart the broadcaster while an operation is in flight.
        block_time: Some(3),
        otlp_endpoint: Some(format!("http://127.0.0.1:{}", receiver.port)),
        ..Default::default()
    })
    .await;
    let mut client = stack.client().await;
    let mut ids: Vec<String> = (0..20).map(|i| format!("traced-{i:02}")).collect();
    for (i, id) in ids.iter().enumerate() {
        client
            .submit_operation(transfer(id, DEV[i % 2], &recipient(i), 1_000 + i as u64))
            .await
            .unwrap();
    }
    wait_terminal(&stack, &ids, Duration::from_secs(120)).await;

    // One more, and a restart of the broadcaster while it is sent but not yet confirmed.
    client
        .submit_operation(transfer("traced-restart", DEV[0], &recipient(99), 4_242))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let op = client
            .get_operation(pb::GetOperationRequest {
                op_id: "traced-restart".into(),
            })
            .await
            .unwrap()
            .into_inner()
            .operation
            .unwrap();
        if op.state() == pb::OperationState::Sent {
            break;
        }
        assert!(
            op.state() != pb::OperationState::Confirmed,
            "confirmed before the restart"
        );
        assert!(Instant::now() < deadline, "{op:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Let the first process export its spans, then restart it without warning.
    tokio::time::sleep(Duration::from_millis(500)).await;
    stack.broadcasters[0].kill9();
    stack.broadcasters[0].restart().await;
    ids.push("traced-restart".into());
    let done = wait_terminal(&stack, &ids, Duration::from_secs(120)).await;
    assert!(
        done.values()
            .all(|op| op.state() == pb::OperationState::Confirmed)
    );

    // Every operation: spans from all three services, all under its derived trace id.
    let deadline = Instant::now() + Duration::from_secs(30);
    let by_op = loop {
        let mut by_op: HashMap<String, Vec<Value>> = HashMap::new();
        for span in receiver.spans() {
            if let Some(op_id) = span["op_id"].as_str() {
                by_op
                    .entry(op_id.to_owned())
                    .or_default()
                    .push(span.clone());
            }
        }
        let complete = ids.iter().all(|id| {
            let services: BTreeSet<&str> = by_op
                .get(id)
                .map(|spans| spans.iter().filter_map(|s| s["service"].as_str()).collect())
                .unwrap_or_default();
            SERVICES.iter().all(|s| services.contains(s))
        });
        if complete {
            break by_op;
        }
        assert!(
            Instant::now() < deadline,
            "spans so far: {by_op:#?}\n{}",
            stack.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    for id in &ids {
        let spans = &by_op[id];
        let traces: BTreeSet<&str> = spans
            .iter()
            .filter_map(|s| s["trace_id"].as_str())
            .collect();
        assert_eq!(
            traces,
            BTreeSet::from([derived_trace_id(id).as_str()]),
            "{id}: exactly one trace, the derived one"
        );
        // The signer's span hangs under the broadcaster span that asked for the signature
        // (traceparent in the gRPC metadata).
        let broadcaster_spans: BTreeSet<&str> = spans
            .iter()
            .filter(|s| s["service"] == "sigcast-broadcaster")
            .filter_map(|s| s["span_id"].as_str())
            .collect();
        assert!(
            spans
                .iter()
                .filter(|s| s["service"] == "sigcast-signer")
                .any(|s| broadcaster_spans
                    .contains(s["parent_span_id"].as_str().unwrap_or_default())),
            "{id}: signer span under a broadcaster span: {spans:#?}"
        );
    }
    // Across the restart: two broadcaster processes added to the one trace.
    let instances: BTreeSet<&str> = by_op["traced-restart"]
        .iter()
        .filter(|s| s["service"] == "sigcast-broadcaster")
        .filter_map(|s| s["instance"].as_str())
        .collect();
    assert_eq!(
        instances.len(),
        2,
        "both broadcaster processes: {instances:?}"
    );
    // No key in any spelling, and no signed payload, in anything exported.
    let exported = std::fs::read_to_string(&receiver.spans).unwrap();
    assert!(exported.contains("\"events\""), "the receiver keeps events");
    for needle in crate::keys::DEV_KEYS
        .iter()
        .flat_map(|k| crate::keys::spellings(k))
    {
        assert!(!exported.contains(&needle), "a dev key was exported");
    }
    let store = sigcast_store::Store::open(&sigcast_store::StoreConfig::sqlite(
        stack.dir.path().join("sigcast.db"),
    ))
    .unwrap();
    let root = store.root().clone();
    for id in &ids {
        let payload = store
            .read(|tx| sigcast_store::accounts::payload(tx, &root, id, 1))
            .unwrap()
            .unwrap();
        assert!(
            !exported.contains(&hex::encode(&payload)),
            "{id}: signed payload exported"
        );
    }
    // OpenTelemetry's conventions, on every span of one operation's trace.
    check_conventions(&receiver.spans(), "traced-00");

    // A refusal: the signer holds no key for this account. The broadcaster's client span is
    // an error (every failed call is, for a client); the signer's server span is not (a
    // refusal is the caller's problem, not the server failing).
    let refused = "traced-no-key";
    client
        .submit_operation(transfer(
            refused,
            "0x0000000000000000000000000000000000000001",
            &recipient(7),
            1,
        ))
        .await
        .unwrap();
    let settled = wait_terminal(&stack, &[refused.to_owned()], Duration::from_secs(60)).await;
    assert_eq!(settled[refused].state(), pb::OperationState::Rejected);
    let sign_calls = |spans: &[Value]| -> Vec<Value> {
        spans
            .iter()
            .filter(|s| s["trace_id"] == derived_trace_id(refused))
            .filter(|s| s["name"] == "sigcast.signer.v1.SignerService/SignOperations")
            .cloned()
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let calls = loop {
        let calls = sign_calls(&receiver.spans());
        if calls.iter().any(|s| s["kind"] == "SPAN_KIND_CLIENT")
            && calls.iter().any(|s| s["kind"] == "SPAN_KIND_SERVER")
        {
            break calls;
        }
        assert!(
            Instant::now() < deadline,
            "both ends of the refused call: {calls:#?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    for call in &calls {
        // PERMISSION_DENIED
        assert_eq!(call["attributes"]["rpc.grpc.status_code"], "7", "{call:#}");
        let expected = if call["kind"] == "SPAN_KIND_CLIENT" {
            "STATUS_CODE_ERROR"
        } else {
            "STATUS_CODE_UNSET"
        };
        assert_eq!(call["status"]["code"], expected, "{call:#}");
    }
    ids.push(refused.to_owned());

    // Nothing else was exported: every span belongs to an operation's trace.
    let known: BTreeSet<String> = ids.iter().map(|id| derived_trace_id(id)).collect();
    for span in receiver.spans() {
        assert!(
            known.contains(span["trace_id"].as_str().unwrap()),
            "stray span {span}"
        );
    }
}

/// OpenTelemetry's semantic conventions on every span of `op_id`'s trace: a kind on each;
/// RPC spans named `service/method` with `rpc.system`, `rpc.service`, `rpc.method` and an
/// integer `rpc.grpc.status_code`, a client naming its server; one client span per JSON-RPC
/// call naming the node by host and port, never its path; our own attributes under `sigcast.`;
/// the signer's server span under the broadcaster's client span.
fn check_conventions(spans: &[Value], op_id: &str) {
    let trace: Vec<&Value> = spans
        .iter()
        .filter(|s| s["trace_id"] == derived_trace_id(op_id))
        .collect();
    let show = || format!("{trace:#?}");
    // Namespaces of the conventions (and tracing-opentelemetry's code.* and thread.*).
    const NAMESPACES: [&str; 5] = ["sigcast.", "rpc.", "server.", "code.", "thread."];
    for span in &trace {
        let kind = span["kind"].as_str().unwrap();
        assert!(
            ["SPAN_KIND_INTERNAL", "SPAN_KIND_SERVER", "SPAN_KIND_CLIENT"].contains(&kind),
            "{span:#}"
        );
        for key in span["attributes"].as_object().unwrap().keys() {
            assert!(
                NAMESPACES.iter().any(|n| key.starts_with(n)),
                "attribute {key} outside the conventions' namespaces: {span:#}"
            );
        }
        let attribute = |key: &str| span["attributes"][key].as_str();
        let rpc_system = attribute("rpc.system");
        if kind != "SPAN_KIND_INTERNAL" {
            assert!(
                rpc_system.is_some(),
                "an RPC span without rpc.system: {span:#}"
            );
        }
        match rpc_system {
            Some("grpc") => {
                let name = format!(
                    "{}/{}",
                    attribute("rpc.service").unwrap(),
                    attribute("rpc.method").unwrap()
                );
                assert_eq!(span["name"], name.as_str(), "{span:#}");
                assert_eq!(
                    span["attribute_types"]["rpc.grpc.status_code"], "int_value",
                    "{span:#}"
                );
                if kind == "SPAN_KIND_CLIENT" {
                    assert!(attribute("server.address").is_some(), "{span:#}");
                }
            }
            Some("jsonrpc") => {
                assert_eq!(kind, "SPAN_KIND_CLIENT", "{span:#}");
                assert_eq!(span["name"].as_str(), attribute("rpc.method"), "{span:#}");
                assert_eq!(attribute("server.address"), Some("127.0.0.1"), "{span:#}");
                assert_eq!(span["attribute_types"]["server.port"], "int_value");
            }
            Some(other) => panic!("rpc.system {other}: {span:#}"),
            None => {}
        }
    }
    let named = |name: &str, kind: &str| -> Vec<&&Value> {
        trace
            .iter()
            .filter(|s| s["name"] == name && s["kind"] == kind)
            .collect()
    };
    for (name, kind) in [
        (
            "sigcast.v1.OperationService/SubmitOperation",
            "SPAN_KIND_SERVER",
        ),
        (
            "sigcast.signer.v1.SignerService/SignOperations",
            "SPAN_KIND_CLIENT",
        ),
        (
            "sigcast.signer.v1.SignerService/SignOperations",
            "SPAN_KIND_SERVER",
        ),
        ("eth_sendRawTransaction", "SPAN_KIND_CLIENT"),
        ("eth_getTransactionReceipt", "SPAN_KIND_CLIENT"),
    ] {
        assert!(
            !named(name, kind).is_empty(),
            "no {kind} span {name}: {}",
            show()
        );
    }
    // A successful server call has no error status; its code is OK (0).
    let submit = named(
        "sigcast.v1.OperationService/SubmitOperation",
        "SPAN_KIND_SERVER",
    )[0];
    assert_eq!(submit["status"]["code"], "STATUS_CODE_UNSET");
    assert_eq!(submit["attributes"]["rpc.grpc.status_code"], "0");
    assert_eq!(submit["attributes"]["sigcast.op_id"], op_id);
    // The signer's server span hangs under the broadcaster's client span.
    let clients: BTreeSet<&str> = named(
        "sigcast.signer.v1.SignerService/SignOperations",
        "SPAN_KIND_CLIENT",
    )
    .iter()
    .map(|s| s["span_id"].as_str().unwrap())
    .collect();
    for server in named(
        "sigcast.signer.v1.SignerService/SignOperations",
        "SPAN_KIND_SERVER",
    ) {
        assert!(
            clients.contains(server["parent_span_id"].as_str().unwrap()),
            "signer span not under the broadcaster's call: {}",
            show()
        );
    }
    // The signer's work on the operation hangs under its server span.
    let servers: BTreeSet<&str> = named(
        "sigcast.signer.v1.SignerService/SignOperations",
        "SPAN_KIND_SERVER",
    )
    .iter()
    .map(|s| s["span_id"].as_str().unwrap())
    .collect();
    let signatures = named("Signature", "SPAN_KIND_INTERNAL");
    assert!(!signatures.is_empty(), "no Signature span: {}", show());
    for signature in signatures {
        assert!(
            servers.contains(signature["parent_span_id"].as_str().unwrap()),
            "the signer's Signature span is not under its call: {}",
            show()
        );
    }
    // Sends and receipts are read by the broadcaster for this operation, under its stages.
    let internal: BTreeSet<&str> = trace
        .iter()
        .filter(|s| s["kind"] == "SPAN_KIND_INTERNAL")
        .map(|s| s["span_id"].as_str().unwrap())
        .collect();
    for call in named("eth_sendRawTransaction", "SPAN_KIND_CLIENT") {
        assert!(
            internal.contains(call["parent_span_id"].as_str().unwrap()),
            "{call:#}"
        );
    }
}

/// G7 in the signer, whose calls' spans are left out of log lines: a line made deep inside a
/// signature (here the JSON-RPC pool's, when the node is unreachable while the signer reads
/// the account's nonce and fees) names the operation it was made for.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_signer_line_made_inside_a_signature_names_its_operation() {
    let stack = Stack::start(StackOptions {
        accounts: 1,
        signer_proxy: true,
        signer_env: vec![("RUST_LOG".into(), "info,sigcast_jsonrpc=debug".into())],
        ..Default::default()
    })
    .await;
    let proxy = stack.signer_proxy.as_ref().unwrap();
    proxy.set_down(true);
    let mut client = stack.client().await;
    client
        .submit_operation(transfer("deep-1", DEV[0], &recipient(8), 1_234))
        .await
        .unwrap();
    let signer = &stack.signers[0];
    let failed_read = |line: &str| line.contains("read failed") && !line.contains("eth_chainId");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !signer.log().lines().any(failed_read) {
        assert!(
            Instant::now() < deadline,
            "the signer read nothing while its node was down:\n{}",
            signer.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    proxy.set_down(false);
    let done = wait_terminal(&stack, &["deep-1".into()], Duration::from_secs(60)).await;
    assert_eq!(done["deep-1"].state(), pb::OperationState::Confirmed);
    for line in signer.log().lines().filter(|l| failed_read(l)) {
        assert!(
            line.contains("sigcast.op_id=deep-1"),
            "a line made while signing deep-1 does not name it: {line}"
        );
    }
}

/// G7 for a store failure the gateway answers: the line it logs names the operation of the
/// call (the call's span, which also does, is left out of log lines).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_store_failure_under_a_call_is_logged_with_the_call_s_operation() {
    let stack = Stack::start(StackOptions {
        accounts: 1,
        ..Default::default()
    })
    .await;
    let mut client = stack.client().await;
    client
        .submit_operation(transfer("unreadable-1", DEV[0], &recipient(9), 1_234))
        .await
        .unwrap();
    let done = wait_terminal(&stack, &["unreadable-1".into()], Duration::from_secs(60)).await;
    assert_eq!(done["unreadable-1"].state(), pb::OperationState::Confirmed);
    // Another process overwrites the record with bytes that are no operation.
    let store = sigcast_store::Store::open(&sigcast_store::StoreConfig::sqlite(
        stack.dir.path().join("sigcast.db"),
    ))
    .unwrap();
    let key = store.root().pack(&("op", "unreadable-1"));
    assert!(
        store.read(|tx| tx.get(&key)).unwrap().is_some(),
        "the record's key"
    );
    store.run(|tx| tx.set(&key, b"\xff\xff\xff")).unwrap();
    let refused = client
        .get_operation(pb::GetOperationRequest {
            op_id: "unreadable-1".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Internal, "{refused:?}");
    let log = stack.gateway.log();
    let line = log
        .lines()
        .find(|l| l.contains("store holds an unreadable record"))
        .unwrap_or_else(|| panic!("no line about the unreadable record:\n{log}"));
    assert!(line.contains("sigcast.op_id=unreadable-1"), "{line}");
}

/// The spans of calls (gRPC, JSON-RPC) are for traces: a log line inside one names its
/// operation through the line itself or the operation's span, without the call's dozen
/// convention attributes before it (`rpc{…}`, `jsonrpc{…}`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn log_lines_name_their_operation_without_the_attributes_of_call_spans() {
    let stack = Stack::start(StackOptions::default()).await;
    let mut client = stack.client().await;
    client
        .submit_operation(transfer("logged-1", DEV[0], &recipient(7), 1_234))
        .await
        .unwrap();
    let done = wait_terminal(&stack, &["logged-1".into()], Duration::from_secs(60)).await;
    assert_eq!(
        done["logged-1"].state(),
        pb::OperationState::Confirmed,
        "{:?}",
        done["logged-1"]
    );
    for service in stack
        .signers
        .iter()
        .chain(&stack.broadcasters)
        .chain([&stack.gateway])
    {
        let log = service.log();
        assert!(
            log.lines().any(|l| l.contains("sigcast.op_id=logged-1")),
            "{} logged nothing naming the operation:\n{log}",
            service.binary
        );
        for line in log.lines() {
            assert!(
                !line.contains("rpc{"),
                "{}: a call span's attributes in a log line: {line}",
                service.binary
            );
        }
    }
}

/// GET /metrics from `addr`, parsed by the reference parser: sample → value.
/// A service's /metrics text.
async fn metrics_text(addr: std::net::SocketAddr) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: sigcast\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // The body may be chunked: let hyper's framing go, keep the text lines.
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_owned()
    }
}

/// `text` parsed by the reference parser (`tests/tools/parse_metrics.py ARGS`).
fn parse_metrics(text: &str, args: &[&str]) -> Value {
    let mut parser = Command::new("python3")
        .arg(repo().join("tests/tools/parse_metrics.py"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut parser.stdin.take().unwrap(), text.as_bytes()).unwrap();
    let output = parser.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "does not parse as Prometheus text: {}\n{text}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// A service's samples: `{"name{labels}": value}`.
pub(crate) async fn scrape(addr: std::net::SocketAddr) -> HashMap<String, f64> {
    serde_json::from_value(parse_metrics(&metrics_text(addr).await, &[])).unwrap()
}

/// Labels Prometheus gives every scraped target: queries may group by them, services do not
/// export them.
const TARGET_LABELS: [&str; 5] = ["namespace", "job", "instance", "pod", "container"];

/// Checks every series an alert or a dashboard panel of the chart queries against what the
/// services at `addrs` export: each metric a declared family's sample name, each label it
/// matches on one its samples carry, each label a query groups by on one of its metrics.
/// Returns what could not be checked for want of samples (a family nothing has touched yet).
async fn check_monitoring_queries(addrs: &[std::net::SocketAddr]) -> Vec<String> {
    // Families of all the services, merged.
    let mut families: HashMap<String, (String, BTreeSet<String>, BTreeSet<String>)> =
        HashMap::new();
    for addr in addrs {
        let declared = parse_metrics(&metrics_text(*addr).await, &["--families"]);
        for (name, family) in declared.as_object().unwrap() {
            let entry = families.entry(name.clone()).or_insert_with(|| {
                (
                    family["type"].as_str().unwrap().to_owned(),
                    BTreeSet::new(),
                    BTreeSet::new(),
                )
            });
            let strings = |key: &str| {
                family[key]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_str().unwrap().to_owned())
                    .collect::<Vec<_>>()
            };
            entry.1.extend(strings("samples"));
            entry.2.extend(strings("labels"));
        }
    }
    let sample_names = |family: &str, kind: &str| -> Vec<String> {
        match kind {
            "counter" => vec![format!("{family}_total")],
            "histogram" => ["_bucket", "_sum", "_count"]
                .iter()
                .map(|s| format!("{family}{s}"))
                .collect(),
            _ => vec![family.to_owned()],
        }
    };
    let output = Command::new("python3")
        .arg(repo().join("tests/tools/monitoring.py"))
        .arg("queries")
        .arg(repo().join("deploy/helm/sigcast"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let queries: Vec<Value> = serde_json::from_slice(&output.stdout).unwrap();
    assert!(queries.len() >= 20, "alerts and panels: {queries:?}");
    let mut unchecked = Vec::new();
    for query in &queries {
        let source = query["source"].as_str().unwrap();
        let metrics = query["metrics"].as_object().unwrap();
        assert!(!metrics.is_empty(), "{source} queries no sigcast series");
        // The labels of the query's metrics that have samples; None if none has.
        let mut known_labels: Option<BTreeSet<String>> = None;
        for (metric, matched) in metrics {
            let (family, (_, samples, labels)) = families
                .iter()
                .find(|(name, (kind, _, _))| sample_names(name, kind).contains(metric))
                .unwrap_or_else(|| panic!("{source}: {metric} is not exported by any service"));
            let matched: Vec<&str> = matched
                .as_array()
                .unwrap()
                .iter()
                .map(|l| l.as_str().unwrap())
                .filter(|l| !TARGET_LABELS.contains(l))
                .collect();
            if samples.is_empty() {
                unchecked.push(format!(
                    "{source}: labels {matched:?} of {family} (no sample)"
                ));
                continue;
            }
            for label in matched {
                assert!(
                    labels.contains(label),
                    "{source}: {metric} has no label {label} (it has {labels:?})"
                );
            }
            known_labels
                .get_or_insert_with(BTreeSet::new)
                .extend(labels.iter().cloned());
        }
        let grouped: Vec<&str> = query["by"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l.as_str().unwrap())
            .filter(|l| !TARGET_LABELS.contains(l))
            .collect();
        match &known_labels {
            Some(labels) => {
                for label in &grouped {
                    assert!(
                        labels.contains(*label),
                        "{source}: groups by {label}, which none of its series has ({labels:?})"
                    );
                }
            }
            None if !grouped.is_empty() => {
                unchecked.push(format!("{source}: grouping by {grouped:?} (no sample)"))
            }
            None => {}
        }
    }
    unchecked
}

fn dechunk(mut body: &str) -> String {
    let mut text = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        text.push_str(&rest[..size]);
        body = &rest[size + 2..];
    }
    text
}

/// The sum of the samples named `name` whose labels contain every one of `labels`; a series
/// with no such sample fails the test (a missing series is not a zero).
pub(crate) fn total(samples: &HashMap<String, f64>, name: &str, labels: &[&str]) -> f64 {
    let matching: Vec<f64> = samples
        .iter()
        .filter(|(key, _)| key.starts_with(&format!("{name}{{")))
        .filter(|(key, _)| labels.iter().all(|l| key.contains(l)))
        .map(|(_, v)| *v)
        .collect();
    assert!(
        !matching.is_empty(),
        "no sample of {name} with {labels:?}: the series is not exported"
    );
    matching.iter().sum()
}

/// As `total`, for a series that may rightly have no sample yet (a counter nothing bumped).
pub(crate) fn total_or_zero(samples: &HashMap<String, f64>, name: &str, labels: &[&str]) -> f64 {
    samples
        .iter()
        .filter(|(key, _)| key.starts_with(&format!("{name}{{")))
        .filter(|(key, _)| labels.iter().all(|l| key.contains(l)))
        .map(|(_, v)| v)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn metrics_parse_as_prometheus_text_and_count_what_a_fault_run_did() {
    let stack = Stack::start(StackOptions {
        accounts: 2,
        faults: Some((0.5, 0x0b5e)),
        ..Default::default()
    })
    .await;
    let mut client = stack.client().await;
    let ids: Vec<String> = (0..30).map(|i| format!("metered-{i:02}")).collect();
    for (i, id) in ids.iter().enumerate() {
        client
            .submit_operation(transfer(id, DEV[i % 2], &recipient(i), 1_000 + i as u64))
            .await
            .unwrap();
    }
    // Five replays, one conflict, one malformed request.
    for (i, id) in ids.iter().enumerate().take(5) {
        let replay = client
            .submit_operation(transfer(id, DEV[i % 2], &recipient(i), 1_000 + i as u64))
            .await
            .unwrap();
        assert!(replay.into_inner().replayed);
    }
    client
        .submit_operation(transfer(&ids[0], DEV[0], &recipient(0), 7))
        .await
        .unwrap_err();
    client
        .submit_operation(transfer("", DEV[0], &recipient(0), 7))
        .await
        .unwrap_err();
    let done = wait_terminal(&stack, &ids, Duration::from_secs(300)).await;
    assert!(
        done.values()
            .all(|op| op.state() == pb::OperationState::Confirmed)
    );

    let gateway = scrape(stack.metrics_addr("gateway")).await;
    assert_eq!(
        total(&gateway, "sigcast_submits_total", &["result=\"created\""]),
        30.0
    );
    assert_eq!(
        total(&gateway, "sigcast_submits_total", &["result=\"replayed\""]),
        5.0
    );
    assert_eq!(
        total(&gateway, "sigcast_submits_total", &["result=\"conflict\""]),
        1.0
    );
    assert_eq!(
        total(&gateway, "sigcast_submits_total", &["result=\"invalid\""]),
        1.0
    );

    let signer = scrape(stack.metrics_addr("signer-0")).await;
    assert_eq!(
        total(
            &signer,
            "sigcast_signatures_total",
            &["purpose=\"SIGN_PURPOSE_INITIAL\""]
        ),
        30.0
    );
    assert_eq!(
        total(
            &signer,
            "sigcast_operation_transitions_total",
            &["state=\"SIGNED\""]
        ),
        30.0
    );

    // Each SignOperations batch timed in each of its stages (a call dropped midway times the
    // stages it reached).
    let batches: Vec<f64> = ["read", "prepare", "commit"]
        .iter()
        .map(|stage| {
            total(
                &signer,
                "sigcast_signer_batch_seconds_count",
                &[&format!("stage=\"{stage}\"")],
            )
        })
        .collect();
    let calls = total(
        &signer,
        "sigcast_grpc_server_requests_total",
        &["method=\"SignOperations\""],
    );
    assert!(
        batches[2] > 0.0
            && batches[2] <= batches[1]
            && batches[1] <= batches[0]
            && batches[0] <= calls,
        "{batches:?} for {calls} calls: one batch per call at most, never one per operation"
    );
    assert!(
        total(
            &signer,
            "sigcast_signer_batch_seconds_sum",
            &["stage=\"commit\""]
        ) > 0.0
    );

    // The broadcaster's send counters agree with what the proxy saw, send for send.
    let broadcaster = scrape(stack.metrics_addr("broadcaster-0")).await;
    let stats = stack.proxy.as_ref().unwrap().stats();
    println!(
        "proxy: {} sends, {} faulted",
        stats.sends,
        stats.faults.len()
    );
    assert!(!stats.faults.is_empty());
    // Every faulted send is an unknown outcome; so is a resend the node answered "nonce too
    // low" (its bytes already included, the check not yet run, as under load), and nothing else.
    let unknown = total(
        &broadcaster,
        "sigcast_attempts_total",
        &["outcome=\"unknown\""],
    ) as usize;
    assert!(
        (stats.faults.len()..=stats.faults.len() + stats.nonce_used_answers).contains(&unknown),
        "{unknown} unknown outcomes for {} faulted sends and {} nonce-too-low answers",
        stats.faults.len(),
        stats.nonce_used_answers
    );
    assert_eq!(
        total(&broadcaster, "sigcast_attempts_total", &[]) as usize,
        stats.sends,
        "every send counted once"
    );
    assert_eq!(
        total_or_zero(&broadcaster, "sigcast_resends_total", &[]) as usize
            + total(
                &broadcaster,
                "sigcast_operation_transitions_total",
                &["state=\"SENT\""]
            ) as usize,
        stats.sends,
        "a send is a first send or a byte-identical resend"
    );
    assert_eq!(
        total(
            &broadcaster,
            "sigcast_operation_transitions_total",
            &["state=\"CONFIRMED\""]
        ),
        30.0
    );
    let still_unknown = done
        .values()
        .filter(|op| {
            op.attempts
                .iter()
                .any(|a| a.outcome() == pb::AttemptOutcome::Unknown)
        })
        .count();
    assert!(
        still_unknown > 0,
        "no operation kept an unknown outcome: 0 == 0 would prove nothing"
    );
    assert_eq!(
        total(
            &broadcaster,
            "sigcast_unknown_outcomes_resolved_total",
            &["resolution=\"CONFIRMED\""]
        ) as usize,
        still_unknown,
        "operations settled from chain state after an unknown send"
    );
    // Nothing left in flight once every operation is terminal (the gauge follows the passes).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let broadcaster = scrape(stack.metrics_addr("broadcaster-0")).await;
    assert_eq!(
        total(&broadcaster, "sigcast_operations_in_flight", &[]),
        0.0
    );
    // Each stage of the passes was timed.
    for stage in ["sign", "send", "check", "pass"] {
        assert!(
            total(
                &broadcaster,
                "sigcast_broadcaster_pass_seconds_count",
                &[&format!("stage=\"{stage}\"")]
            ) > 0.0,
            "{stage}"
        );
    }
    // Every service says what build it runs, and exports its own process under the standard
    // names.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    for (name, service) in [
        ("gateway", "sigcast-gateway"),
        ("signer-0", "sigcast-signer"),
        ("broadcaster-0", "sigcast-broadcaster"),
    ] {
        let scraped = scrape(stack.metrics_addr(name)).await;
        let label = format!("service=\"{service}\"");
        assert_eq!(
            total(&scraped, "sigcast_build_info", &[label.as_str()]),
            1.0,
            "{name}: {scraped:?}"
        );
        let sample = |metric: &str| {
            *scraped
                .get(&format!("{metric}{{}}"))
                .unwrap_or_else(|| panic!("{name}: no {metric}: {scraped:?}"))
        };
        assert!(sample("process_cpu_seconds_total") > 0.0, "{name}");
        assert!(sample("process_resident_memory_bytes") > 1e6, "{name}");
        assert!(sample("process_open_fds") >= 3.0, "{name}");
        let started = sample("process_start_time_seconds");
        assert!(
            started > now - 600.0 && started <= now + 1.0,
            "{name}: {started}"
        );
    }
    // Calls served, by method and code.
    let gateway = scrape(stack.metrics_addr("gateway")).await;
    assert!(
        total(
            &gateway,
            "sigcast_grpc_server_requests_total",
            &["method=\"SubmitOperation\"", "code=\"OK\""]
        ) >= 1.0
    );
    let signer = scrape(stack.metrics_addr("signer-0")).await;
    assert!(
        total(
            &signer,
            "sigcast_grpc_server_requests_total",
            &["method=\"SignOperations\"", "code=\"OK\""]
        ) >= 1.0
    );
    // Reads were timed per endpoint and method; the endpoint label carries no path.
    assert!(
        total(
            &broadcaster,
            "sigcast_rpc_duration_seconds_count",
            &["method=\"eth_getTransactionReceipt\""]
        ) > 0.0
    );
    let endpoint_labelled: Vec<&String> = broadcaster
        .keys()
        .filter(|k| k.contains("endpoint=\"http://127.0.0.1:"))
        .collect();
    assert!(!endpoint_labelled.is_empty(), "{broadcaster:?}");
    assert!(
        endpoint_labelled
            .iter()
            .all(|k| k.matches('/').count() == 2),
        "an endpoint label with a path: {endpoint_labelled:?}"
    );
    // Each endpoint's head, and how far it lags the chain's highest (one endpoint: none).
    assert!(
        total(
            &broadcaster,
            "sigcast_chain_head",
            &["chain=\"eip155:31337\""]
        ) > 0.0
    );
    assert_eq!(
        total(
            &broadcaster,
            "sigcast_chain_head_lag",
            &["chain=\"eip155:31337\""]
        ),
        0.0
    );

    // The chart's alerts and dashboard query only what these services export.
    let unchecked = check_monitoring_queries(&[
        stack.metrics_addr("gateway"),
        stack.metrics_addr("signer-0"),
        stack.metrics_addr("broadcaster-0"),
    ])
    .await;
    assert!(
        unchecked.is_empty(),
        "every family the chart queries has samples to check labels against: {unchecked:#?}"
    );
}
