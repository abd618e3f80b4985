//! The operator CLI against a running stack: every command an operator reaches for, as a real
//! process over real gRPC, in tables and in JSON.

use crate::evm::{DEV, recipient, transfer, wait_terminal};
use serde_json::Value;
use sigcast_e2e::{Stack, StackOptions};
use sigcast_proto::pb;
use std::process::{Command, Output};
use std::time::Duration;

fn sigcast(stack: &Stack, args: &[&str]) -> Output {
    std::process::Command::new(sigcast_e2e::binary("sigcast"))
        .env("SIGCAST_GATEWAY", format!("http://{}", stack.gateway.addr))
        .args(args)
        .output()
        .expect("run sigcast")
}

fn ok(stack: &Stack, args: &[&str]) -> String {
    let output = sigcast(stack, args);
    assert!(
        output.status.success(),
        "sigcast {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

fn json(stack: &Stack, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    serde_json::from_str(&ok(stack, &all)).unwrap()
}

/// Runs a command that must fail with exit status `code`; its stderr.
fn fails(stack: &Stack, code: i32, args: &[&str]) -> String {
    let output = sigcast(stack, args);
    assert_eq!(
        output.status.code(),
        Some(code),
        "sigcast {args:?} should fail with {code}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stderr).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_operator_cli_inspects_watches_audits_reconciles_and_cancels() {
    let stack = Stack::start(StackOptions {
        accounts: 2,
        ..Default::default()
    })
    .await;
    let mut client = stack.client().await;
    for (i, id) in ["cli-a", "cli-b"].iter().enumerate() {
        client
            .submit_operation(transfer(id, DEV[i], &recipient(i), 10_000))
            .await
            .unwrap();
    }

    // A wait no clock can hold is bad input (exit 2), not a panic.
    let refused = fails(
        &stack,
        2,
        &["--timeout", "18446744073709551615", "op", "watch", "cli-a"],
    );
    assert!(refused.contains("--timeout"), "{refused}");

    // watch: one line per revision, ending CONFIRMED, exit 0.
    let watched = ok(&stack, &["op", "watch", "cli-a"]);
    let last = watched.lines().last().unwrap();
    assert!(
        last.contains("CONFIRMED") && last.contains("block"),
        "{watched}"
    );
    let done = wait_terminal(
        &stack,
        &["cli-a".into(), "cli-b".into()],
        Duration::from_secs(60),
    )
    .await;
    let op = &done["cli-a"];
    let tx = &op.result.as_ref().unwrap().tx_id;

    // get: a table, and protobuf JSON.
    let table = ok(&stack, &["op", "get", "cli-a"]);
    assert!(
        table.contains("CONFIRMED") && table.contains(tx.as_str()),
        "{table}"
    );
    let value = json(&stack, &["op", "get", "cli-a"]);
    assert_eq!(value["opId"], "cli-a");
    assert_eq!(value["state"], "OPERATION_STATE_CONFIRMED");
    assert_eq!(value["result"]["txId"], tx.as_str());

    // list, filtered by state; attempts.
    let listed = json(&stack, &["op", "list", "--state", "confirmed"]);
    let ids: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["opId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["cli-a", "cli-b"]);
    let table = ok(
        &stack,
        &["op", "list", "--chain", "eip155:31337", "--account", DEV[1]],
    );
    assert!(
        table.contains("cli-b") && !table.contains("cli-a"),
        "{table}"
    );
    let attempts = ok(&stack, &["op", "attempts", "cli-a"]);
    assert!(
        attempts.contains(op.attempts[0].tx_id.as_str()) && attempts.contains("ACCEPTED"),
        "{attempts}"
    );
    // The most the attempt pays per gas, in gwei, on its own row.
    let cap: u128 = op.attempts[0].max_fee_per_gas.parse().unwrap();
    assert!(cap > 0, "{op:?}");
    let row = attempts
        .lines()
        .find(|line| line.contains(op.attempts[0].tx_id.as_str()))
        .unwrap();
    let whole = cap / 1_000_000_000;
    assert!(
        attempts.contains("MAX FEE/GAS")
            && (row.contains(&format!(" {whole} gwei")) || row.contains(&format!(" {whole}."))),
        "{cap} wei per gas is not on its row: {attempts}"
    );

    // audit: the signer's record of the one signature.
    let audit = json(&stack, &["audit", "cli-a"]);
    let records = audit.as_array().unwrap();
    assert_eq!(records.len(), 1, "{audit}");
    assert_eq!(records[0]["purpose"], "SIGN_PURPOSE_INITIAL");
    assert_eq!(records[0]["txId"], op.attempts[0].tx_id.as_str());
    assert_eq!(records[0]["keyId"], DEV[0]);
    assert!(
        records[0]["caller"].as_str().unwrap().starts_with("uid:"),
        "{audit}"
    );
    assert!(ok(&stack, &["audit", "cli-a"]).contains("INITIAL"));

    // reconcile: the chain, read directly, agrees with the store.
    let report = ok(&stack, &["reconcile", "cli-a", "--rpc", &stack.anvil.url]);
    assert!(
        report.contains("verdict   agrees: attempt 1 confirmed in block"),
        "{report}"
    );
    let report = json(&stack, &["reconcile", "cli-b", "--rpc", &stack.anvil.url]);
    assert!(
        report["verdict"].as_str().unwrap().starts_with("agrees"),
        "{report}"
    );

    // keys: the signer's keys over its socket (this test runs as a uid it allows).
    let socket = format!("unix:{}", stack.signer_socket(0).display());
    let keys = ok(&stack, &["keys", "list", "--signer", &socket]);
    assert!(
        keys.contains(DEV[0]) && keys.contains("secp256k1"),
        "{keys}"
    );

    // Refusals: the gRPC code and the server's message.
    // Exit statuses a script can branch on: 5 refused, 3 not found, 1 any other error.
    assert!(fails(&stack, 5, &["op", "cancel", "cli-a"]).contains("FailedPrecondition"));
    let absent = fails(&stack, 3, &["op", "get", "no-such-op"]);
    assert!(
        absent.contains("NotFound") && absent.contains("operators"),
        "{absent}"
    );
    assert!(fails(&stack, 1, &["op", "list", "--state", "bogus"]).contains("--state"));
    assert!(fails(&stack, 5, &["audit", "bad op id!"]).contains("InvalidArgument"));
    // 4: nothing listens there.
    let unreachable = std::process::Command::new(sigcast_e2e::binary("sigcast"))
        .args(["--gateway", "http://127.0.0.1:1", "op", "get", "cli-a"])
        .output()
        .unwrap();
    assert_eq!(unreachable.status.code(), Some(4));

    // cancel before signing: at once. Stop the broadcaster so nothing signs it first.
    let mut stack = stack;
    stack.broadcasters[0].kill9();
    client
        .submit_operation(transfer("cli-c", DEV[0], &recipient(3), 1))
        .await
        .unwrap();
    // 6: a watch whose --timeout passes before the operation is terminal.
    assert!(
        fails(&stack, 6, &["--timeout", "2", "op", "watch", "cli-c"]).contains("RECEIVED"),
        "the state it was left in"
    );
    let cancelled = json(&stack, &["op", "cancel", "cli-c"]);
    assert_eq!(cancelled["state"], "OPERATION_STATE_CANCELLED");
    let stored = client
        .get_operation(pb::GetOperationRequest {
            op_id: "cli-c".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .operation
        .unwrap();
    assert_eq!(stored.state(), pb::OperationState::Cancelled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reconcile_tells_a_store_that_lies_and_an_operation_still_in_flight() {
    let mut stack = Stack::start(StackOptions {
        accounts: 2,
        ..Default::default()
    })
    .await;
    let mut client = stack.client().await;
    client
        .submit_operation(transfer("truth", DEV[0], &recipient(0), 10_000))
        .await
        .unwrap();
    wait_terminal(&stack, &["truth".into()], Duration::from_secs(60)).await;

    // A store writer rewrites the confirmed operation as REJECTED ("never applied": its caller
    // would pay again). Reconcile reads the chain and says so.
    let store = sigcast_store::Store::open(&sigcast_store::StoreConfig::sqlite(
        stack.dir.path().join("sigcast.db"),
    ))
    .unwrap();
    let root = store.root().clone();
    store
        .run(|tx| {
            let key = root.pack(&("op", "truth"));
            let raw = tx.get(&key)?.unwrap();
            let mut op = <pb::Operation as prost::Message>::decode(raw.as_slice()).unwrap();
            op.set_state(pb::OperationState::Rejected);
            tx.set(&key, &prost::Message::encode_to_vec(&op))
        })
        .unwrap();
    let report = json(&stack, &["reconcile", "truth", "--rpc", &stack.anvil.url]);
    let verdict = report["verdict"].as_str().unwrap();
    assert!(
        verdict.starts_with("DISAGREES: the store says REJECTED, the chain shows Confirmed"),
        "{report}"
    );

    // An operation signed and never sent (its broadcaster gone): nothing on chain to settle
    // it, and reconcile says what comes next rather than a verdict.
    stack.broadcasters[0].kill9();
    client
        .submit_operation(transfer("pending", DEV[1], &recipient(1), 20_000))
        .await
        .unwrap();
    let mut signer = sigcast_e2e::signer_client(&stack.signer_socket(0))
        .await
        .unwrap();
    signer
        .sign_operation(sigcast_proto::sigcast::signer::v1::SignOperationRequest {
            op_id: "pending".into(),
            purpose: 1,
            ..Default::default()
        })
        .await
        .unwrap();
    let report = json(&stack, &["reconcile", "pending", "--rpc", &stack.anvil.url]);
    let verdict = report["verdict"].as_str().unwrap();
    assert!(
        verdict.starts_with("SIGNED:")
            && !verdict.contains("agrees")
            && !verdict.contains("DISAGREES"),
        "{report}"
    );
}

/// `sigcast ARGS` with its standard output a pipe whose reader is already gone (as in
/// `sigcast … | head` once head has exited): it must end without a panic.
fn into_a_closed_pipe(args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    Command::new(sigcast_e2e::binary("sigcast"))
        .args(args)
        .stdout(writer)
        .output()
        .unwrap()
}

#[test]
fn output_into_a_closed_pipe_ends_quietly_and_completions_complete() {
    let from = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266";
    for args in [
        &[
            "derive-op-id",
            "--chain",
            "eip155:1",
            "--from",
            from,
            "--to",
            from,
            "--amount",
            "1",
            "--reference",
            "r",
        ][..],
        &["completions", "bash"][..],
    ] {
        let output = into_a_closed_pipe(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            !stderr.contains("panicked") && output.status.code() == Some(141),
            "{args:?}: ends as a Unix tool its reader left: {:?}\n{stderr}",
            output.status
        );
    }

    // Bash completes subcommands and flags from the script `completions bash` prints.
    let script = Command::new(sigcast_e2e::binary("sigcast"))
        .args(["completions", "bash"])
        .output()
        .unwrap();
    assert!(script.status.success());
    let script_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(script_file.path(), &script.stdout).unwrap();
    let completed = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source {}; COMP_WORDS=(sigcast op ''); COMP_CWORD=2; COMP_LINE='sigcast op '; \
             COMP_POINT=${{#COMP_LINE}}; _sigcast sigcast '' op; echo \"${{COMPREPLY[@]}}\"",
            script_file.path().display()
        ))
        .output()
        .unwrap();
    let words = String::from_utf8_lossy(&completed.stdout);
    for word in ["get", "watch", "list", "cancel", "attempts", "--gateway"] {
        assert!(
            words.split_whitespace().any(|w| w == word),
            "{word} not among {words}"
        );
    }
}

/// `reconcile` of a Solana operation reads only endpoints of the operation's cluster. Another
/// cluster's node knows none of its signatures and has passed its blockhash's last valid
/// height: read as this cluster's, that says "expired, nothing landed", and the verdict would
/// tell an operator that a CONFIRMED transfer can be re-signed (paid twice).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reconcile_of_a_solana_operation_reads_no_endpoint_of_another_cluster() {
    use crate::solana_ops::{get, key_bytes, sol_transfer};
    let node = sigcast_e2e::SolanaNode::start(Duration::from_millis(50)).await;
    let elsewhere = sigcast_e2e::SolanaNode::start(Duration::from_millis(5)).await;
    let stack = Stack::start(StackOptions {
        accounts: 1,
        solana_rpc: Some(node.url.clone()),
        solana_accounts: 1,
        ..Default::default()
    })
    .await;
    let from = stack.solana_accounts[0].clone();
    node.airdrop(key_bytes(&from), 1_000_000_000);
    let mut client = stack.client().await;
    client
        .submit_operation(sol_transfer(
            "sol-a",
            &from,
            &crate::solana_ops::recipient(0),
            1_000_000,
        ))
        .await
        .unwrap();
    wait_terminal(&stack, &["sol-a".into()], Duration::from_secs(60)).await;
    let op = get(&stack, "sol-a").await;
    assert_eq!(op.state(), pb::OperationState::Confirmed, "{op:?}");
    let Some(pb::operation::Signing::Solana(signing)) = &op.signing else {
        panic!("{op:?}")
    };
    while elsewhere.slot() <= signing.last_valid_block_height + 10 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let genesis = node.genesis_hash();

    // The operation's own cluster: the chain agrees with the store.
    let report = json(
        &stack,
        &[
            "reconcile",
            "sol-a",
            "--rpc",
            &node.url,
            "--genesis-hash",
            &genesis,
        ],
    );
    let verdict = report["verdict"].as_str().unwrap();
    assert!(
        verdict.starts_with("agrees: attempt 1 confirmed"),
        "{report}"
    );

    // Another cluster's node, alone or beside the right one: not read, and no verdict rests
    // on it.
    for urls in [vec![&elsewhere.url], vec![&elsewhere.url, &node.url]] {
        let mut args = vec!["reconcile", "sol-a", "--genesis-hash", &genesis];
        for url in &urls {
            args.extend(["--rpc", url.as_str()]);
        }
        let report = json(&stack, &args);
        let verdict = report["verdict"].as_str().unwrap();
        assert!(
            !verdict.contains("re-sign") && !verdict.contains("DISAGREES"),
            "{report}"
        );
        let facts = report["chain"].to_string();
        assert!(facts.contains("another cluster"), "{report}");
        if urls.len() == 2 {
            assert!(
                verdict.starts_with("agrees: attempt 1 confirmed"),
                "{report}"
            );
        }
    }

    // A cluster whose genesis hash nobody knows: the CLI asks for it rather than trust
    // whatever the endpoint serves.
    let error = fails(&stack, 1, &["reconcile", "sol-a", "--rpc", &elsewhere.url]);
    assert!(error.contains("--genesis-hash"), "{error}");
    let error = fails(
        &stack,
        2,
        &[
            "reconcile",
            "sol-a",
            "--rpc",
            &node.url,
            "--genesis-hash",
            "not-a-hash",
        ],
    );
    assert!(error.contains("--genesis-hash"), "{error}");
}
