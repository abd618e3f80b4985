//! Callers at the gateway over mutual TLS, as a platform team deploys it: certificates made at
//! test time, identities from their URI SANs, `[[callers]]` deciding who uses which key, each
//! caller seeing only its own operations, the signer checking the recorded caller again, and a
//! client CA rotated on disk taking effect without a restart.

use crate::evm::{DEV, recipient, transfer, wait_terminal, wait_terminal_with};
use crate::mtls::{issue_with_san, new_ca};
use sigcast_e2e::{Service, Stack, StackOptions, free_addr};
use sigcast_evm::EvmRpc;
use sigcast_proto::pb;
use sigcast_proto::sigcast::operator::v1::GetAuditTrailRequest;
use sigcast_proto::sigcast::operator::v1::operator_service_client::OperatorServiceClient;
use sigcast_proto::sigcast::v1::operation_service_client::OperationServiceClient;
use std::path::Path;
use std::time::{Duration, Instant};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

pub(crate) const ALICE: &str = "spiffe://corp.example/ns/payments/sa/alice";
/// An operator: reads any operation's audit trail, uses no key.
const OPS: &str = "spiffe://corp.example/ns/ops/sa/oncall";
const BOB: &str = "spiffe://corp.example/ns/reports/sa/bob";

/// A client of the TLS gateway at `addr` presenting `name`'s certificate (none: no
/// certificate); the server is checked against `ca.pem`.
async fn client(
    addr: &str,
    pki: &Path,
    name: Option<&str>,
) -> Result<OperationServiceClient<Channel>, String> {
    channel(addr, pki, name)
        .await
        .map(OperationServiceClient::new)
}

/// A TLS channel to `addr` presenting `name`'s certificate (none: no certificate).
async fn channel(addr: &str, pki: &Path, name: Option<&str>) -> Result<Channel, String> {
    let read = |file: &str| std::fs::read(pki.join(file)).unwrap();
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(read("ca.pem")))
        .domain_name("localhost");
    if let Some(name) = name {
        tls = tls.identity(Identity::from_pem(
            read(&format!("{name}.pem")),
            read(&format!("{name}.key")),
        ));
    }
    // Deadlines as any client sets them: a connection the gateway refused mid-handshake once
    // left a call here waiting for good, under a loaded machine.
    Endpoint::from_shared(format!("https://{addr}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(10))
        .timeout(Duration::from_secs(30))
        .tls_config(tls)
        .map_err(|e| e.to_string())?
        .connect()
        .await
        .map_err(|e| format!("{e:?}"))
}

/// A Get of an op_id that does not exist, through `client`: answered only after a handshake
/// the gateway accepted.
async fn reaches(client: Result<OperationServiceClient<Channel>, String>) -> Result<(), String> {
    let mut client = client?;
    match client
        .get_operation(pb::GetOperationRequest {
            op_id: "probe".into(),
        })
        .await
    {
        Err(status) if status.code() == tonic::Code::NotFound => Ok(()),
        other => Err(format!("{other:?}")),
    }
}

fn error_reason(status: &tonic::Status) -> String {
    use tonic_types::StatusExt;
    status
        .get_error_details()
        .error_info()
        .map(|info| info.reason.clone())
        .unwrap_or_default()
}

/// Certificates made for the test: `ca` issues the gateway's (localhost) and Alice's and Bob's
/// client certificates (URI SANs); `other-ca` issues Mallory's. `client-ca.pem`, what the
/// gateway trusts, starts as a copy of `ca.pem`.
pub(crate) fn pki() -> tempfile::TempDir {
    let pki_dir = tempfile::tempdir().unwrap();
    let pki = pki_dir.path();
    new_ca(pki, "ca");
    issue_with_san(
        pki,
        "ca",
        "gateway",
        "serverAuth",
        "DNS:localhost,IP:127.0.0.1",
    );
    issue_with_san(pki, "ca", "alice", "clientAuth", &format!("URI:{ALICE}"));
    issue_with_san(pki, "ca", "bob", "clientAuth", &format!("URI:{BOB}"));
    issue_with_san(pki, "ca", "ops", "clientAuth", &format!("URI:{OPS}"));
    new_ca(pki, "other-ca");
    issue_with_san(
        pki,
        "other-ca",
        "mallory",
        "clientAuth",
        "URI:spiffe://elsewhere/mallory",
    );
    std::fs::copy(pki.join("ca.pem"), pki.join("client-ca.pem")).unwrap();
    pki_dir
}

/// Alice may make transfers from DEV[0] and cancel; Bob may use DEV[1] and not cancel.
pub(crate) fn callers_table() -> String {
    format!(
        "[[callers]]\nidentity = \"{ALICE}\"\naccounts = [\"{}\"]\nintent_kinds = [\"evm_transfer\"]\nmay_cancel = true\n\
         [[callers]]\nidentity = \"{BOB}\"\naccounts = [\"{}\"]\n",
        DEV[0], DEV[1]
    )
}

/// A second gateway on the stack's store, with mutual TLS and `callers`, started and waited
/// for (its listener speaks TLS only).
pub(crate) async fn tls_gateway(stack: &Stack, pki: &Path, callers: &str) -> (Service, String) {
    let gateway_dir = stack.dir.path().join("mtls-gateway");
    std::fs::create_dir(&gateway_dir).unwrap();
    let addr = free_addr();
    let p = |name: &str| pki.join(name).display().to_string();
    let toml = format!(
        "listen = \"{addr}\"\nwatch_poll_ms = 50\noperators = [\"{OPS}\"]\n[store]\npath = \"{}\"\n\
         [tls]\ncert = \"{}\"\nkey = \"{}\"\nclient_ca = \"{}\"\nreload_secs = 1\n{callers}",
        stack.dir.path().join("sigcast.db").display(),
        p("gateway.pem"),
        p("gateway.key"),
        p("client-ca.pem"),
    );
    let gateway = Service::start_unchecked("sigcast-gateway", &gateway_dir, addr, &toml);
    let addr = addr.to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    while reaches(client(&addr, pki, Some("alice")).await)
        .await
        .is_err()
    {
        assert!(
            Instant::now() < deadline,
            "the TLS gateway never answered; log:\n{}",
            gateway.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (gateway, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn callers_use_only_their_keys_see_only_their_operations_and_a_rotated_ca_needs_no_restart() {
    let pki_dir = pki();
    let pki = pki_dir.path();
    // The signer reads the same table. The stack's own gateway (plaintext, loopback, no table)
    // plays a misconfigured gateway: what it records carries no caller.
    let stack = Stack::start(StackOptions {
        accounts: 2,
        signer_tables: callers_table(),
        ..Default::default()
    })
    .await;
    let (gateway, addr) = tls_gateway(&stack, pki, &callers_table()).await;

    // Without a certificate, or with one of another CA: no handshake.
    assert!(reaches(client(&addr, pki, None).await).await.is_err());
    assert!(
        reaches(client(&addr, pki, Some("mallory")).await)
            .await
            .is_err()
    );

    let mut alice = client(&addr, pki, Some("alice")).await.unwrap();
    let mut bob = client(&addr, pki, Some("bob")).await.unwrap();
    let submitted = alice
        .submit_operation(transfer("alice-1", DEV[0], &recipient(0), 7_000))
        .await
        .unwrap()
        .into_inner()
        .operation
        .unwrap();
    assert_eq!(submitted.caller, ALICE, "the caller is recorded");

    // Alice may not use Bob's key: refused before anything is stored.
    let refused = alice
        .submit_operation(transfer("alice-2", DEV[1], &recipient(0), 1))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    assert_eq!(error_reason(&refused), "CALLER_NOT_ALLOWED");
    assert!(refused.message().contains(DEV[1]), "{}", refused.message());
    let absent = alice
        .get_operation(pb::GetOperationRequest {
            op_id: "alice-2".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(absent.code(), tonic::Code::NotFound);

    // Bob cannot get, watch, list or cancel Alice's operation, nor learn anything of it by
    // reusing its op_id.
    let get = |op_id: &str| pb::GetOperationRequest {
        op_id: op_id.into(),
    };
    let not_found = bob.get_operation(get("alice-1")).await.unwrap_err();
    assert_eq!(not_found.code(), tonic::Code::NotFound);
    let watch = bob
        .watch_operation(pb::WatchOperationRequest {
            op_id: "alice-1".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(watch.code(), tonic::Code::NotFound);
    let cancel = bob
        .cancel_operation(pb::CancelOperationRequest {
            op_id: "alice-1".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(cancel.code(), tonic::Code::NotFound);
    let taken = bob
        .submit_operation(transfer("alice-1", DEV[1], &recipient(1), 1))
        .await
        .unwrap_err();
    assert_eq!(taken.code(), tonic::Code::AlreadyExists);
    assert!(
        !taken.message().contains(ALICE)
            && !taken.message().contains(&submitted.intent_fingerprint),
        "nothing of Alice's operation is told: {}",
        taken.message()
    );
    bob.submit_operation(transfer("bob-1", DEV[1], &recipient(1), 3_000))
        .await
        .unwrap();
    let listed = |mut c: OperationServiceClient<Channel>| async move {
        c.list_operations(pb::ListOperationsRequest::default())
            .await
            .unwrap()
            .into_inner()
            .operations
            .into_iter()
            .map(|op| op.op_id)
            .collect::<Vec<_>>()
    };
    assert_eq!(listed(bob.clone()).await, ["bob-1"]);
    assert_eq!(listed(alice.clone()).await, ["alice-1"]);
    // The operator CLI over mutual TLS, as Alice: her operation; without a certificate, no
    // handshake, exit 4; as Bob, hers is not found, exit 3.
    let cli = |who: Option<&str>| {
        let mut command = std::process::Command::new(sigcast_e2e::binary("sigcast"));
        command.args([
            "--gateway",
            &format!("https://{addr}"),
            "--server-name",
            "localhost",
        ]);
        command.arg("--ca").arg(pki.join("ca.pem"));
        if let Some(who) = who {
            command
                .arg("--cert")
                .arg(pki.join(format!("{who}.pem")))
                .arg("--key")
                .arg(pki.join(format!("{who}.key")));
        }
        command
            .args(["--json", "op", "get", "alice-1"])
            .output()
            .unwrap()
    };
    let as_alice = cli(Some("alice"));
    assert!(
        as_alice.status.success(),
        "{}",
        String::from_utf8_lossy(&as_alice.stderr)
    );
    let shown: serde_json::Value = serde_json::from_slice(&as_alice.stdout).unwrap();
    assert_eq!(shown["opId"], "alice-1");
    let anonymous = cli(None);
    assert_eq!(
        anonymous.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&anonymous.stderr)
    );
    assert_eq!(cli(Some("bob")).status.code(), Some(3));
    // An operator reads any operation (told "not found", one might submit the payment
    // again), and changes none that is not its own.
    let as_operator = cli(Some("ops"));
    assert!(
        as_operator.status.success(),
        "{}",
        String::from_utf8_lossy(&as_operator.stderr)
    );
    let shown: serde_json::Value = serde_json::from_slice(&as_operator.stdout).unwrap();
    assert_eq!(
        (&shown["opId"], &shown["caller"]),
        (&"alice-1".into(), &ALICE.into())
    );
    let mut operator = client(&addr, pki, Some("ops")).await.unwrap();
    let cancel = operator
        .cancel_operation(pb::CancelOperationRequest {
            op_id: "alice-1".into(),
        })
        .await
        .unwrap_err();
    // (Reading is all it may do: it is in no [[callers]] rule.)
    assert_eq!(cancel.code(), tonic::Code::PermissionDenied, "{cancel:?}");
    // Only a listed operator: on the stack's own gateway (plaintext on loopback, no operators
    // listed, the same store) an anonymous caller still sees none of Alice's.
    let mut plain = stack.client().await;
    let hidden = plain.get_operation(get("alice-1")).await.unwrap_err();
    assert_eq!(hidden.code(), tonic::Code::NotFound, "{hidden:?}");
    // Bob may not cancel at all.
    let no_cancel = bob
        .cancel_operation(pb::CancelOperationRequest {
            op_id: "bob-1".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(no_cancel.code(), tonic::Code::PermissionDenied);

    // What a gateway without the table recorded (no caller) the signer refuses.
    let mut plain = stack.client().await;
    plain
        .submit_operation(transfer("uncalled", DEV[0], &recipient(2), 1_000))
        .await
        .unwrap();
    let minute = Duration::from_secs(90);
    let logs = || stack.logs();
    let done = wait_terminal_with(alice.clone(), &["alice-1".into()], minute, &logs).await;
    assert_eq!(done["alice-1"].state(), pb::OperationState::Confirmed);
    let done = wait_terminal_with(bob.clone(), &["bob-1".into()], minute, &logs).await;
    assert_eq!(done["bob-1"].state(), pb::OperationState::Confirmed);
    let done = wait_terminal(&stack, &["uncalled".into()], minute).await;
    let uncalled = &done["uncalled"];
    assert_eq!(
        uncalled.state(),
        pb::OperationState::Rejected,
        "{uncalled:?}"
    );
    let error = uncalled.error.as_ref().unwrap();
    assert_eq!(error.reason, "SIGNER_REFUSED");
    assert!(
        error.message.contains("not authenticated"),
        "{}",
        error.message
    );
    let node = EvmRpc::new(
        std::slice::from_ref(&stack.anvil.url),
        Duration::from_secs(5),
    )
    .unwrap();
    assert_eq!(node.nonce(DEV[0].parse().unwrap()).await.unwrap(), 1);
    assert_eq!(node.nonce(DEV[1].parse().unwrap()).await.unwrap(), 1);

    // The audit trail names callers and certificates: only an operator reads it.
    let audit = |channel: Channel| async move {
        OperatorServiceClient::new(channel)
            .get_audit_trail(GetAuditTrailRequest {
                op_id: "alice-1".into(),
            })
            .await
    };
    let refused = audit(channel(&addr, pki, Some("alice")).await.unwrap())
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    let trail = audit(channel(&addr, pki, Some("ops")).await.unwrap())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(trail.records.len(), 1, "{trail:?}");

    // Rotation: the client CA file now trusts the other CA too; Mallory's certificate is taken
    // (and her identity, in no rule, refused) by the same process.
    let pid = gateway.pid();
    let bundle = [
        std::fs::read_to_string(pki.join("ca.pem")).unwrap(),
        std::fs::read_to_string(pki.join("other-ca.pem")).unwrap(),
    ]
    .concat();
    std::fs::write(pki.join("client-ca.pem.new"), bundle).unwrap();
    std::fs::rename(pki.join("client-ca.pem.new"), pki.join("client-ca.pem")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut mallory = loop {
        // Past the handshake, Mallory (in no rule) may read nothing: PERMISSION_DENIED.
        if let Ok(mut c) = client(&addr, pki, Some("mallory")).await
            && c.get_operation(get("alice-1"))
                .await
                .is_err_and(|s| s.code() == tonic::Code::PermissionDenied)
        {
            break c;
        }
        assert!(
            Instant::now() < deadline,
            "the rotated CA was not taken up; log:\n{}",
            gateway.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let refused = mallory
        .submit_operation(transfer("mallory-1", DEV[0], &recipient(3), 1))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::PermissionDenied);
    assert!(
        refused.message().contains("not in [[callers]]"),
        "{}",
        refused.message()
    );
    assert_eq!(gateway.pid(), pid, "no restart");
    assert!(gateway.log().contains("TLS certificates reloaded"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_plaintext_gateway_off_loopback_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let output = std::process::Command::new(sigcast_e2e::binary("sigcast-gateway"))
        .args(["--listen", "0.0.0.0:0", "--store-path"])
        .arg(dir.path().join("s.db"))
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("allow_plaintext") && stderr.contains("[tls]"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_operator_api_moves_to_its_own_listener() {
    let dir = tempfile::tempdir().unwrap();
    let (public, operator) = (free_addr(), free_addr());
    let toml = format!(
        "listen = \"{public}\"\noperator_listen = \"{operator}\"\n[store]\npath = \"{}\"\n",
        dir.path().join("sigcast.db").display()
    );
    let _gateway = Service::start("sigcast-gateway", dir.path(), public, &toml).await;
    let audit = |addr: std::net::SocketAddr| async move {
        OperatorServiceClient::connect(format!("http://{addr}"))
            .await
            .unwrap()
            .get_audit_trail(GetAuditTrailRequest {
                op_id: "absent".into(),
            })
            .await
    };
    assert_eq!(
        audit(public).await.unwrap_err().code(),
        tonic::Code::Unimplemented,
        "not beside the public API"
    );
    assert_eq!(
        audit(operator).await.unwrap_err().code(),
        tonic::Code::NotFound,
        "answered on its own listener"
    );
    // Reflection on each listener lists what that listener serves.
    let listed = |addr: std::net::SocketAddr| {
        let (ok, out, err) = sigcast_e2e::grpcurl(&["-plaintext", &addr.to_string(), "list"]);
        assert!(ok, "{err}");
        out.lines()
            .filter(|l| l.starts_with("sigcast."))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    assert_eq!(listed(public), ["sigcast.v1.OperationService"]);
    assert_eq!(listed(operator), ["sigcast.operator.v1.OperatorService"]);
}
