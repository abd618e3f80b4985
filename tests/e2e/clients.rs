//! The Python and Node clients (clients/), generated from proto/, against a running stack.

use sigcast_e2e::{Stack, StackOptions};
use std::path::PathBuf;
use std::process::Command;

/// The clone's root, read at run time: a test binary may be reused from a shared target dir
/// by a clone at another path.
pub(crate) fn repo() -> PathBuf {
    PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("run by cargo"))
        .parent()
        .unwrap()
        .to_path_buf()
}

const FROM: &str = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266";
const TO: &str = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";

fn run(command: &mut Command) -> String {
    let output = command.output().expect("run the client");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    println!("{stdout}");
    stdout
}

/// Python stubs generated from proto/ (the one definition of every message), for PYTHONPATH.
fn python_stubs() -> tempfile::TempDir {
    let stubs = tempfile::tempdir().unwrap();
    run(Command::new("python3")
        .current_dir(repo())
        .args(["-m", "grpc_tools.protoc", "-I", "proto"])
        .arg(format!("--python_out={}", stubs.path().display()))
        .arg(format!("--grpc_python_out={}", stubs.path().display()))
        .arg("proto/sigcast/v1/operation.proto"));
    stubs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_python_and_node_examples_submit_replay_and_watch_to_confirmed() {
    let stack = Stack::start(StackOptions {
        accounts: 1,
        ..Default::default()
    })
    .await;
    let address = stack.gateway.addr.to_string();

    let stubs = python_stubs();
    let python = run(Command::new("python3")
        .arg(repo().join("clients/python/example.py"))
        .args([address.as_str(), "py-example-1", FROM, TO, "1000"])
        .env("PYTHONPATH", stubs.path()));
    assert!(python.contains("replayed: True"), "{python}");
    assert!(
        python.contains("terminal OPERATION_STATE_CONFIRMED"),
        "{python}"
    );

    let node_path = std::env::var("SIGCAST_NODE_PATH")
        .expect("SIGCAST_NODE_PATH (scripts/install-deps.sh --env)");
    let node = run(Command::new("node")
        .arg(repo().join("clients/node/example.js"))
        .args([address.as_str(), "node-example-1", FROM, TO, "2000"])
        .env("NODE_PATH", node_path));
    assert!(node.contains("replayed: true"), "{node}");
    assert!(
        node.contains("terminal OPERATION_STATE_CONFIRMED"),
        "{node}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_python_and_node_examples_connect_with_mutual_tls_as_their_caller() {
    use crate::callers::{ALICE, callers_table, pki, tls_gateway};
    let pki_dir = pki();
    let pki = pki_dir.path();
    let stack = Stack::start(StackOptions {
        accounts: 2,
        signer_tables: callers_table(),
        ..Default::default()
    })
    .await;
    let (_gateway, address) = tls_gateway(&stack, pki, &callers_table()).await;
    let tls_env = |name: &str| {
        [
            ("SIGCAST_TLS_CA", pki.join("ca.pem")),
            ("SIGCAST_TLS_CERT", pki.join(format!("{name}.pem"))),
            ("SIGCAST_TLS_KEY", pki.join(format!("{name}.key"))),
            ("SIGCAST_TLS_SERVER_NAME", "localhost".into()),
        ]
    };

    let stubs = python_stubs();
    let python = run(Command::new("python3")
        .arg(repo().join("clients/python/example.py"))
        .args([address.as_str(), "py-mtls-1", FROM, TO, "1000"])
        .env("PYTHONPATH", stubs.path())
        .envs(tls_env("alice")));
    assert!(python.contains(&format!("caller: {ALICE}")), "{python}");
    assert!(
        python.contains("terminal OPERATION_STATE_CONFIRMED"),
        "{python}"
    );

    let node_path = std::env::var("SIGCAST_NODE_PATH")
        .expect("SIGCAST_NODE_PATH (scripts/install-deps.sh --env)");
    let node = run(Command::new("node")
        .arg(repo().join("clients/node/example.js"))
        .args([address.as_str(), "node-mtls-1", FROM, TO, "2000"])
        .env("NODE_PATH", &node_path)
        .envs(tls_env("alice")));
    assert!(node.contains(&format!("caller: {ALICE}")), "{node}");
    assert!(
        node.contains("terminal OPERATION_STATE_CONFIRMED"),
        "{node}"
    );

    // A certificate of another CA: no handshake, nothing submitted.
    let refused = Command::new("node")
        .arg(repo().join("clients/node/example.js"))
        .args([address.as_str(), "node-mtls-2", FROM, TO, "3000"])
        .env("NODE_PATH", &node_path)
        .envs(tls_env("mallory"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && stderr.contains("UNAVAILABLE"),
        "a certificate of another CA must fail the handshake: {stderr}"
    );
}
