//! Exhausted resources, on the real processes: out of file descriptors (the listeners back off
//! instead of spinning, and serve again once descriptors are free); a full store (writes
//! refused as UNAVAILABLE with nothing half-written, reads served, health showing it, writes
//! taken again once there is room).

use sigcast_e2e::{GatewayProcess, free_addr};
use sigcast_proto::pb;
use sigcast_proto::sigcast::v1::operation_service_client::OperationServiceClient;
use std::process::Command;
use std::time::{Duration, Instant};

/// CPU time (user + system) `pid` has used, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the parenthesised command name; utime and stime are the 14th and 15th.
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    let per_second: u64 = String::from_utf8(
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
    .trim()
    .parse()
    .unwrap();
    ticks as f64 / per_second as f64
}

fn open_descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// Sets the soft limit on open files of `pid` (util-linux `prlimit`).
fn limit_files(pid: u32, soft: u64) {
    let status = Command::new("prlimit")
        .args(["--pid", &pid.to_string(), &format!("--nofile={soft}:")])
        .status()
        .expect("prlimit (util-linux)");
    assert!(status.success());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gateway_out_of_file_descriptors_backs_off_and_serves_again() {
    let metrics = free_addr();
    let mut gateway = GatewayProcess::start(&format!("metrics_listen = \"{metrics}\"\n")).await;
    let pid = gateway.service.pid();
    // Serving before: one call, and the metrics endpoint.
    let mut client = OperationServiceClient::connect(format!("http://{}", gateway.addr))
        .await
        .unwrap();
    let get = pb::GetOperationRequest {
        op_id: "nothing-here".into(),
    };
    assert_eq!(
        client.get_operation(get.clone()).await.unwrap_err().code(),
        tonic::Code::NotFound
    );

    // A few descriptors to spare, then more connections than that, to both listeners.
    let soft_limit = std::fs::read_to_string(format!("/proc/{pid}/limits"))
        .unwrap()
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3)?.parse::<u64>().ok())
        .unwrap();
    limit_files(pid, open_descriptors(pid) as u64 + 4);
    let mut held = Vec::new();
    for _ in 0..24 {
        held.push(std::net::TcpStream::connect(gateway.addr).unwrap());
        held.push(std::net::TcpStream::connect(metrics).unwrap());
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let log = gateway.log();
    assert!(
        log.contains("accept failed; backing off"),
        "the listeners never ran out of descriptors:\n{log}"
    );

    // Connections wait in the kernel's queue; the listeners must not spin on them. A loop
    // retrying at once burns a whole core (1 s of CPU a second); backing off, almost none.
    let (cpu, wall) = (cpu_seconds(pid), Instant::now());
    tokio::time::sleep(Duration::from_secs(3)).await;
    let share = (cpu_seconds(pid) - cpu) / wall.elapsed().as_secs_f64();
    assert!(
        share < 0.3,
        "the gateway used {:.0}% of a core while out of descriptors",
        share * 100.0
    );
    // The connection it already had is still served.
    assert_eq!(
        client.get_operation(get.clone()).await.unwrap_err().code(),
        tonic::Code::NotFound
    );

    // Descriptors back: new connections are served, on both listeners.
    drop(held);
    limit_files(pid, soft_limit);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let fresh = async {
            let mut fresh = OperationServiceClient::connect(format!("http://{}", gateway.addr))
                .await
                .ok()?;
            fresh.get_operation(get.clone()).await.err()
        };
        if let Ok(Some(status)) = tokio::time::timeout(Duration::from_secs(5), fresh).await
            && status.code() == tonic::Code::NotFound
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not serving new connections again"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let scrape = async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(metrics).await.ok()?;
        let request = b"GET /metrics HTTP/1.1\r\nHost: sigcast\r\nConnection: close\r\n\r\n";
        stream.write_all(request).await.ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await.ok()?;
        Some(response)
    };
    let response = tokio::time::timeout(Duration::from_secs(10), scrape).await;
    assert!(
        matches!(&response, Ok(Some(r)) if r.starts_with("HTTP/1.1 200")),
        "metrics not served again: {response:?}"
    );
    assert!(gateway.service.is_running());
}

/// The health of `service` (empty: the whole server) as the gateway at `addr` reports it.
async fn health(addr: std::net::SocketAddr, service: &str) -> i32 {
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    tonic_health::pb::health_client::HealthClient::new(channel)
        .check(tonic_health::pb::HealthCheckRequest {
            service: service.to_owned(),
        })
        .await
        .unwrap()
        .into_inner()
        .status
}

const SERVING: i32 = tonic_health::pb::health_check_response::ServingStatus::Serving as i32;
const NOT_SERVING: i32 = tonic_health::pb::health_check_response::ServingStatus::NotServing as i32;

fn big_call(op_id: &str) -> pb::SubmitOperationRequest {
    pb::SubmitOperationRequest {
        op_id: op_id.to_owned(),
        intent: Some(pb::Intent {
            kind: Some(pb::intent::Kind::EvmContractCall(pb::EvmContractCall {
                chain_id: 31337,
                from: "0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266".into(),
                to: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8".into(),
                data: vec![0xab; 60_000],
                value_wei: String::new(),
                gas_limit: Some(100_000),
            })),
        }),
    }
}

/// A gateway whose store may grow to `max_size_mb` (a full disk, as SQLite reports it).
async fn gateway_with_store_limit(
    dir: &std::path::Path,
    addr: std::net::SocketAddr,
    max_size_mb: u64,
) -> sigcast_e2e::Service {
    let toml = format!(
        "listen = \"{addr}\"\n[store]\npath = \"{}\"\n",
        dir.join("sigcast.db").display()
    );
    sigcast_e2e::Service::start_with_env(
        "sigcast-gateway",
        dir,
        addr,
        &toml,
        vec![(
            "SIGCAST_GATEWAY__STORE__MAX_SIZE_MB".into(),
            max_size_mb.to_string(),
        )],
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_store_refuses_writes_as_unavailable_keeps_reads_shows_in_health_and_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let addr = free_addr();
    let mut gateway = gateway_with_store_limit(dir.path(), addr, 1).await;
    assert_eq!(health(addr, "sigcast.store").await, SERVING);
    let mut client = OperationServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap();

    let mut accepted = 0;
    let refusal = loop {
        match client
            .submit_operation(big_call(&format!("big-{accepted}")))
            .await
        {
            Ok(_) => accepted += 1,
            Err(status) => break status,
        }
        assert!(accepted < 100, "1 MiB held more than 100 calls of 60 kB");
    };
    let refused = format!("big-{accepted}");
    assert_eq!(refusal.code(), tonic::Code::Unavailable, "{refusal:?}");
    assert!(
        refusal.message().contains("Retry with the same op_id"),
        "{refusal:?}"
    );
    assert_eq!(
        tonic_types::StatusExt::get_details_error_info(&refusal).map(|i| i.reason),
        Some("STORE_FULL".to_owned())
    );
    // Readiness shows it; the gateway serves reads meanwhile.
    assert_eq!(health(addr, "sigcast.store").await, NOT_SERVING);
    assert_eq!(health(addr, "").await, SERVING);
    let first = client
        .get_operation(pb::GetOperationRequest {
            op_id: "big-0".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(first.operation.unwrap().op_id, "big-0");
    let missing = client
        .get_operation(pb::GetOperationRequest {
            op_id: refused.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(
        missing.code(),
        tonic::Code::NotFound,
        "the refused submit left a trace"
    );
    let listed = client
        .list_operations(pb::ListOperationsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.operations.len(), accepted);

    // Space back: the same submit is accepted, nothing was lost, and health says so.
    gateway.terminate();
    let _gateway = gateway_with_store_limit(dir.path(), addr, 8).await;
    let mut client = OperationServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let retried = client
        .submit_operation(big_call(&refused))
        .await
        .unwrap()
        .into_inner();
    assert!(!retried.replayed);
    assert_eq!(health(addr, "sigcast.store").await, SERVING);
    let listed = client
        .list_operations(pb::ListOperationsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.operations.len(), accepted + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_store_held_by_another_process_makes_calls_wait_then_everything_resumes_without_loss() {
    use crate::evm::{DEV, recipient, transfer, wait_terminal};
    let stack = sigcast_e2e::Stack::start(sigcast_e2e::StackOptions {
        accounts: 1,
        gateway_env: vec![(
            "SIGCAST_GATEWAY__LIMITS__REQUEST_TIMEOUT_MS".into(),
            "3000".into(),
        )],
        ..Default::default()
    })
    .await;
    let mut client = stack.client().await;
    let before: Vec<String> = (0..3).map(|i| format!("held-{i}")).collect();
    for (i, op_id) in before.iter().enumerate() {
        client
            .submit_operation(transfer(op_id, DEV[0], &recipient(i), 1_000 + i as u64))
            .await
            .unwrap();
    }

    // Another process takes the store's write lock and keeps it for 8 s: to every service
    // the store is unreachable for writes meanwhile.
    let db = stack.dir.path().join("sigcast.db");
    let holder = std::thread::spawn(move || {
        let conn = rusqlite::Connection::open(db).unwrap();
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        std::thread::sleep(Duration::from_secs(8));
        conn.execute_batch("COMMIT").unwrap();
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let during = client
        .submit_operation(transfer("held-3", DEV[0], &recipient(3), 1_003))
        .await
        .unwrap_err();
    // The gateway's request timeout (3 s) ends the call; it may still complete once the
    // lock is released, so the answer says: retry (UNAVAILABLE, which retry policies retry;
    // tonic's own timeout said CANCELLED "Timeout expired").
    assert_eq!(during.code(), tonic::Code::Unavailable, "{during:?}");
    assert!(
        during.message().contains("retry with the same op_id"),
        "{during:?}"
    );
    // Reads go on meanwhile (WAL: readers do not wait for the writer).
    let read = client
        .get_operation(pb::GetOperationRequest {
            op_id: "held-0".into(),
        })
        .await
        .unwrap();
    assert_eq!(read.into_inner().operation.unwrap().op_id, "held-0");
    holder.join().unwrap();

    // The caller's retry with the same op_id: accepted once (or found accepted).
    client
        .submit_operation(transfer("held-3", DEV[0], &recipient(3), 1_003))
        .await
        .unwrap();
    let mut all = before.clone();
    all.push("held-3".into());
    let done = wait_terminal(&stack, &all, Duration::from_secs(90)).await;
    for op_id in &all {
        assert_eq!(
            done[op_id].state(),
            pb::OperationState::Confirmed,
            "{op_id}\n{}",
            stack.logs()
        );
    }
    let node = sigcast_evm::EvmRpc::new(
        std::slice::from_ref(&stack.anvil.url),
        Duration::from_secs(5),
    )
    .unwrap();
    assert_eq!(
        node.nonce(DEV[0].parse().unwrap()).await.unwrap(),
        4,
        "each operation landed exactly once"
    );
}

/// Polls the health of `service` at `addr` until it is `want`.
async fn health_becomes(addr: std::net::SocketAddr, service: &str, want: i32) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if health(addr, service).await == want {
            return;
        }
        assert!(Instant::now() < deadline, "{service} never became {want}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_broadcaster_reports_each_dependency_s_readiness_apart() {
    let mut stack = sigcast_e2e::Stack::start(sigcast_e2e::StackOptions {
        accounts: 1,
        ..Default::default()
    })
    .await;
    let addr = stack.broadcasters[0].addr;
    for service in [
        "sigcast.store",
        "sigcast.signer",
        "sigcast.chain.eip155:31337",
    ] {
        health_becomes(addr, service, SERVING).await;
    }
    // The signer down: only its readiness says so.
    stack.signers[0].kill9();
    health_becomes(addr, "sigcast.signer", NOT_SERVING).await;
    assert_eq!(health(addr, "sigcast.chain.eip155:31337").await, SERVING);
    assert_eq!(health(addr, "sigcast.store").await, SERVING);
    assert_eq!(
        health(addr, "").await,
        SERVING,
        "the process itself is alive"
    );
    stack.signers[0].restart().await;
    health_becomes(addr, "sigcast.signer", SERVING).await;
}
