//! The gateway as an operator meets it.

use sigcast_e2e::{GatewayProcess, grpcurl};

const SUBMIT: &str = r#"{"op_id":"grpcurl-1","intent":{"evm_transfer":{"chain_id":31337,
  "from":"0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266",
  "to":"0x70997970C51812dc3A010C7d01b50e0d17dc79C8","value_wei":"1000000000000000000"}}}"#;

#[tokio::test(flavor = "multi_thread")]
async fn grpcurl_lists_by_reflection_submits_and_reads_back() {
    let gateway = GatewayProcess::start("").await;
    let addr = gateway.addr.to_string();

    let (ok, listed, err) = grpcurl(&["-plaintext", &addr, "list"]);
    assert!(ok, "{err}");
    // Exactly the services the gateway serves: not the signer's API, whose messages share the
    // descriptor set.
    let services: Vec<&str> = listed.lines().collect();
    assert_eq!(
        services,
        [
            "grpc.health.v1.Health",
            "grpc.reflection.v1.ServerReflection",
            "grpc.reflection.v1alpha.ServerReflection",
            "sigcast.operator.v1.OperatorService",
            "sigcast.v1.OperationService",
        ],
        "{listed}"
    );
    let (ok, described, err) = grpcurl(&[
        "-plaintext",
        &addr,
        "describe",
        "sigcast.v1.OperationService",
    ]);
    assert!(
        ok && described.contains("rpc SubmitOperation"),
        "{err}{described}"
    );

    let (ok, out, err) = grpcurl(&[
        "-plaintext",
        "-d",
        SUBMIT,
        &addr,
        "sigcast.v1.OperationService/SubmitOperation",
    ]);
    assert!(ok, "{err}");
    let submitted: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(submitted["operation"]["state"], "OPERATION_STATE_RECEIVED");
    assert_eq!(
        submitted["operation"]["account"],
        "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"
    );
    assert!(
        submitted.get("replayed").is_none(),
        "first submit is not a replay: {out}"
    );

    let (ok, out, err) = grpcurl(&[
        "-plaintext",
        "-d",
        SUBMIT,
        &addr,
        "sigcast.v1.OperationService/SubmitOperation",
    ]);
    assert!(ok, "{err}");
    let replayed: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(replayed["replayed"], true);
    assert_eq!(replayed["operation"], submitted["operation"]);

    let (ok, out, err) = grpcurl(&[
        "-plaintext",
        "-d",
        r#"{"op_id":"grpcurl-1"}"#,
        &addr,
        "sigcast.v1.OperationService/GetOperation",
    ]);
    assert!(ok, "{err}");
    let got: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(got["operation"], submitted["operation"]);

    let (ok, out, err) = grpcurl(&["-plaintext", &addr, "grpc.health.v1.Health/Check"]);
    assert!(ok && out.contains("SERVING"), "{err}{out}");
}

#[tokio::test(flavor = "multi_thread")]
async fn grpcurl_shows_the_status_code_and_the_named_field() {
    let gateway = GatewayProcess::start("").await;
    let addr = gateway.addr.to_string();
    let bad = r#"{"op_id":"x","intent":{"evm_transfer":{"chain_id":31337,"from":"0x12","to":"0x70997970C51812dc3A010C7d01b50e0d17dc79C8","value_wei":"1"}}}"#;
    let (ok, _, err) = grpcurl(&[
        "-plaintext",
        "-d",
        bad,
        &addr,
        "sigcast.v1.OperationService/SubmitOperation",
    ]);
    assert!(!ok);
    assert!(err.contains("Code: InvalidArgument"), "{err}");
    assert!(
        err.contains(r#""field":"intent.evm_transfer.from""#),
        "BadRequest decoded by reflection: {err}"
    );
    let (ok, _, err) = grpcurl(&[
        "-plaintext",
        "-d",
        r#"{"op_id":"missing"}"#,
        &addr,
        "sigcast.v1.OperationService/GetOperation",
    ]);
    assert!(!ok && err.contains("Code: NotFound"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn file_config_applies_and_sigterm_stops_cleanly() {
    // Chain 5 accepted only because the config file says so.
    let mut gateway = GatewayProcess::start("[chains]\nevm_chain_ids = [5]\n").await;
    let addr = gateway.addr.to_string();
    let on_chain_5 = SUBMIT.replace("31337", "5");
    let (ok, _, err) = grpcurl(&[
        "-plaintext",
        "-d",
        &on_chain_5,
        &addr,
        "sigcast.v1.OperationService/SubmitOperation",
    ]);
    assert!(ok, "{err}");
    // A new op_id on a chain the file leaves out (under the op_id just used, the answer is
    // the conflict with its operation, whatever the chain).
    let (ok, _, err) = grpcurl(&[
        "-plaintext",
        "-d",
        &SUBMIT.replace("grpcurl-1", "grpcurl-2"),
        &addr,
        "sigcast.v1.OperationService/SubmitOperation",
    ]);
    assert!(!ok && err.contains("unknown chain 31337"), "{err}");

    let status = gateway.terminate();
    assert!(
        status.success(),
        "exit status {status}; log:\n{}",
        gateway.log()
    );
    assert!(
        gateway.log().contains("gateway stopped"),
        "{}",
        gateway.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sigterm_the_public_service_turns_not_serving_and_the_gateway_exits_within_its_drain() {
    use tonic_health::pb::health_check_response::ServingStatus;
    // What the chart's readiness probe asks: the Pod leaves its Services as shutdown begins.
    // A short drain: the open watch below never ends by itself, and must not hold the
    // gateway past it.
    let mut gateway = GatewayProcess::start("[limits]\nrequest_timeout_ms = 2000\n").await;
    let mut watch = health_watch(gateway.addr, "sigcast.v1.OperationService").await;
    let status = |answer: Option<tonic_health::pb::HealthCheckResponse>| {
        ServingStatus::try_from(answer.expect("an answer").status).unwrap()
    };
    assert_eq!(
        status(watch.message().await.unwrap()),
        ServingStatus::Serving
    );
    let stopping = tokio::task::spawn_blocking(move || {
        let exit = gateway.terminate();
        (exit, gateway)
    });
    let next = tokio::time::timeout(std::time::Duration::from_secs(10), watch.message())
        .await
        .expect("told before the gateway exits")
        .unwrap();
    assert_eq!(status(next), ServingStatus::NotServing);
    let (exit, gateway) = stopping.await.unwrap();
    assert!(
        exit.success(),
        "exit status {exit}; log:\n{}",
        gateway.log()
    );
    assert!(
        gateway
            .log()
            .contains("calls still open after the drain period"),
        "{}",
        gateway.log()
    );
}

/// A Health/Watch stream on `service` of the server at `addr`.
async fn health_watch(
    addr: std::net::SocketAddr,
    service: &str,
) -> tonic::Streaming<tonic_health::pb::HealthCheckResponse> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    tonic_health::pb::health_client::HealthClient::new(channel)
        .watch(tonic_health::pb::HealthCheckRequest {
            service: service.into(),
        })
        .await
        .unwrap()
        .into_inner()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_signer_and_broadcaster_exit_on_sigterm_with_a_health_watch_open() {
    let stack = sigcast_e2e::Stack::start(sigcast_e2e::StackOptions {
        accounts: 1,
        ..Default::default()
    })
    .await;
    let sigcast_e2e::Stack {
        mut signers,
        mut broadcasters,
        ..
    } = stack;
    for mut service in [signers.remove(0), broadcasters.remove(0)] {
        let mut watch = health_watch(service.addr, "").await;
        watch.message().await.unwrap().expect("the current status");
        // Within the test harness's 20 s, which fails the test otherwise.
        let (exit, service) = tokio::task::spawn_blocking(move || (service.terminate(), service))
            .await
            .unwrap();
        assert!(
            exit.success(),
            "{}: {exit}\n{}",
            service.binary,
            service.log()
        );
        drop(watch);
    }
}
