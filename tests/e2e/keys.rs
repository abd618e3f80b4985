//! Key isolation as an operator checks it: policy refusals, the audit trail, who may call the
//! signer, and that no key material leaks anywhere a run leaves traces.

use crate::evm::{DEV, assert_exactly_once, recipient, submit_transfers, transfer, wait_terminal};
use prost::Message;
use sigcast_e2e::{Stack, StackOptions};
use sigcast_evm::{Address, EvmRpc, U256};
use sigcast_proto::pb;
use sigcast_proto::sigcast::signer::v1::{AuditRecord, SignOperationRequest};
use sigcast_store::{Store, StoreConfig, accounts};
use std::time::Duration;

/// anvil's dev keys #0..#3: what must never appear outside the signer.
pub(crate) const DEV_KEYS: [&str; 4] = [
    "ac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80",
    "59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
    "5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a",
    "7c852118294e51e653712a81e05800f419141751be58f605c371e15141b007a6",
];

fn store_of(stack: &Stack) -> Store {
    Store::open(&StoreConfig::sqlite(stack.dir.path().join("sigcast.db"))).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_policy_rule_refuses_with_its_reason_and_nothing_is_signed() {
    let allowed = recipient(0);
    let policies = format!(
        "[[policies]]\naccount = \"{}\"\nallowed_chain_ids = [31337]\nmax_value_wei = \"10000\"\n\
         window_max_value_wei = \"15000\"\nwindow_secs = 3600\nallowed_recipients = [\"{allowed}\"]\n\
         allowed_contracts = [\"{allowed}\"]\nallowed_selectors = [\"0xa9059cbb\"]\n\
         [[policies]]\naccount = \"{}\"\nallowed_chain_ids = [1]\n",
        DEV[0], DEV[1]
    );
    let stack = Stack::start(StackOptions {
        accounts: 2,
        signer_tables: policies,
        ..Default::default()
    })
    .await;
    let mut client = stack.client().await;
    let call = |op_id: &str, to: &str, selector: [u8; 4]| pb::SubmitOperationRequest {
        op_id: op_id.into(),
        intent: Some(pb::Intent {
            kind: Some(pb::intent::Kind::EvmContractCall(pb::EvmContractCall {
                chain_id: 31337,
                from: DEV[0].into(),
                to: to.into(),
                data: selector.to_vec(),
                value_wei: String::new(),
                gas_limit: Some(60_000),
            })),
        }),
    };
    let cases = [
        (transfer("ok", DEV[0], &allowed, 9_000), None),
        (
            transfer("too-much", DEV[0], &allowed, 10_001),
            Some("max_value_wei"),
        ),
        (
            transfer("stranger", DEV[0], &recipient(7), 1),
            Some("allowed_recipients"),
        ),
        (
            call("bad-selector", &allowed, [0x09, 0x5e, 0xa7, 0xb3]),
            Some("allowed_selectors"),
        ),
        (
            call("bad-contract", &recipient(8), [0xa9, 0x05, 0x9c, 0xbb]),
            Some("allowed_contracts"),
        ),
        (
            transfer("wrong-chain", DEV[1], &allowed, 1),
            Some("allowed_chain_ids"),
        ),
    ];
    for (request, _) in &cases {
        client.submit_operation(request.clone()).await.unwrap();
    }
    let ids: Vec<String> = cases.iter().map(|(r, _)| r.op_id.clone()).collect();
    let done = wait_terminal(&stack, &ids, Duration::from_secs(60)).await;
    // The window rule: 9,000 already spent of 15,000, so 9,000 more is refused.
    client
        .submit_operation(transfer("over-window", DEV[0], &allowed, 9_000))
        .await
        .unwrap();
    let over = wait_terminal(&stack, &["over-window".into()], Duration::from_secs(60)).await;

    assert_eq!(
        done["ok"].state(),
        pb::OperationState::Confirmed,
        "{}",
        stack.logs()
    );
    let refusals = cases
        .iter()
        .filter_map(|(r, rule)| rule.map(|rule| (&done[&r.op_id], rule)));
    for (op, rule) in refusals.chain([(&over["over-window"], "window_max_value_wei")]) {
        assert_eq!(
            op.state(),
            pb::OperationState::Rejected,
            "{}: {op:?}",
            op.op_id
        );
        let error = op.error.as_ref().unwrap();
        assert_eq!(error.reason, "SIGNER_REFUSED");
        assert!(
            error.message.contains(rule),
            "{}: {}",
            op.op_id,
            error.message
        );
        assert!(
            op.attempts.is_empty() && op.signing.is_none(),
            "{}: nothing signed",
            op.op_id
        );
    }
    let node = EvmRpc::new(
        std::slice::from_ref(&stack.anvil.url),
        Duration::from_secs(5),
    )
    .unwrap();
    assert_eq!(
        node.nonce(DEV[0].parse().unwrap()).await.unwrap(),
        1,
        "only the allowed operation was sent"
    );
    assert_eq!(node.nonce(DEV[1].parse().unwrap()).await.unwrap(), 0);
    let to: Address = allowed.parse().unwrap();
    assert_eq!(node.balance(to).await.unwrap(), U256::from(9_000u64));

    // One audit record per signature: who asked, which key, what digest, which nonce.
    let store = store_of(&stack);
    let root = store.root().clone();
    let records = store
        .read(|tx| accounts::audit_records(tx, &root, "ok"))
        .unwrap();
    assert_eq!(records.len(), 1);
    let record = AuditRecord::decode(records[0].as_slice()).unwrap();
    assert_eq!(
        (record.op_id.as_str(), record.attempt, record.nonce),
        ("ok", 1, 0)
    );
    assert_eq!(record.key_id, DEV[0]);
    assert_eq!(record.tx_id, done["ok"].attempts[0].tx_id);
    assert_eq!(
        record.caller, "uid:0",
        "the broadcaster, authenticated by its uid"
    );
    assert_eq!(record.digest.len(), 66);
    for refused in ["too-much", "over-window"] {
        assert!(
            store
                .read(|tx| accounts::audit_records(tx, &root, refused))
                .unwrap()
                .is_empty()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_caller_whose_uid_is_not_allowed_is_refused_and_logged() {
    let stack = Stack::start(StackOptions {
        accounts: 1,
        signer_settings: "allowed_uids = [4242]\n".into(), // not us (root)
        ..Default::default()
    })
    .await;
    // A recorded operation, so that only the caller check can stand between the call and a
    // signature (an unknown op_id would be refused as NOT_FOUND whatever the uid).
    stack
        .client()
        .await
        .submit_operation(transfer("blocked", DEV[0], &recipient(0), 1))
        .await
        .unwrap();
    match sigcast_e2e::signer_client(&stack.signer_socket(0)).await {
        Err(_) => {} // refused at connection
        Ok(mut signer) => {
            let refused = signer
                .sign_operation(SignOperationRequest {
                    op_id: "blocked".into(),
                    purpose: 1,
                    ..Default::default()
                })
                .await
                .expect_err("a disallowed uid gets no signature");
            assert_ne!(refused.code(), tonic::Code::NotFound, "{refused:?}");
        }
    }
    assert!(
        stack.signers[0]
            .log()
            .contains("refused a caller: uid not allowed"),
        "{}",
        stack.signers[0].log()
    );
    // The broadcaster runs as the same disallowed uid: nothing gets signed.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let op = stack
        .client()
        .await
        .get_operation(pb::GetOperationRequest {
            op_id: "blocked".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .operation
        .unwrap();
    assert_eq!(op.state(), pb::OperationState::Received);
}

/// Every spelling of a 32-byte key an accident would print.
pub(crate) fn spellings(key_hex: &str) -> Vec<String> {
    let bytes = hex_bytes(key_hex);
    vec![
        key_hex.to_owned(),
        key_hex.to_uppercase(),
        bs58::encode(&bytes).into_string(),
        base64_standard(&bytes),
        base64_standard(&bytes)
            .trim_end_matches('=')
            .replace('+', "-")
            .replace('/', "_"),
    ]
}

fn base64_standard(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_key_material_in_logs_store_configs_or_other_services_environments() {
    let stack = Stack::start(StackOptions::default()).await;
    let planned = submit_transfers(&stack, "scan", 40, 4).await;
    assert_exactly_once(&stack, &planned, 4, Duration::from_secs(120)).await;

    let needles: Vec<String> = DEV_KEYS.iter().flat_map(|k| spellings(k)).collect();
    let raw_keys: Vec<Vec<u8>> = DEV_KEYS.iter().map(|k| hex_bytes(k)).collect();
    let mut scanned = 0;
    let mut files = vec![stack.dir.path().to_path_buf()];
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        // anvil is the node, not part of sigcast: it prints its own dev accounts' keys.
        if path.file_name().is_some_and(|n| n == "anvil.log") {
            continue;
        }
        let Ok(bytes) = std::fs::read(&path) else {
            continue;
        };
        let text = String::from_utf8_lossy(&bytes);
        for needle in &needles {
            assert!(
                !text.contains(needle.as_str()),
                "{} holds key material ({needle})",
                path.display()
            );
        }
        let raw_found = bytes.windows(32).any(|w| raw_keys.iter().any(|k| k == w));
        assert!(!raw_found, "{} holds a raw key", path.display());
        scanned += 1;
    }
    assert!(
        scanned >= 10,
        "logs, configs, keystores and the store files were read ({scanned})"
    );
    for service in [&stack.gateway, &stack.broadcasters[0]] {
        let environ = std::fs::read(format!("/proc/{}/environ", service.pid())).unwrap();
        let environ = String::from_utf8_lossy(&environ);
        for needle in &needles {
            assert!(
                !environ.contains(needle.as_str()),
                "{}'s environment holds key material",
                service.binary
            );
        }
    }
}

fn hex_bytes(hex: &str) -> Vec<u8> {
    (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_transfer_signed_inside_a_softhsm_token_confirms_on_anvil() {
    let hsm_dir = tempfile::tempdir().unwrap();
    let hsm = sigcast_e2e::SoftHsm::init(hsm_dir.path(), "sigcast-e2e");
    let mut stack = Stack::start(StackOptions {
        accounts: 1,
        signer_tables: hsm.signer_table(),
        signer_env: hsm.env(),
        ..Default::default()
    })
    .await;
    // Generate the key inside the token (non-extractable), then let the signer load it.
    let config = stack
        .dir
        .path()
        .join("replica-0")
        .join("sigcast-signer.toml");
    let generated = std::process::Command::new(sigcast_e2e::binary("sigcast-signer"))
        .arg("--config")
        .arg(&config)
        .args(["keys", "generate", "--label", "evm-hot-wallet"])
        .envs(hsm.env())
        .output()
        .unwrap();
    assert!(
        generated.status.success(),
        "{}",
        String::from_utf8_lossy(&generated.stderr)
    );
    let token_account = String::from_utf8(generated.stdout)
        .unwrap()
        .trim()
        .to_owned();
    stack.signers[0].restart().await;
    let mut signer = sigcast_e2e::signer_client(&stack.signer_socket(0))
        .await
        .unwrap();
    let keys = signer
        .list_keys(sigcast_proto::sigcast::signer::v1::ListKeysRequest {})
        .await
        .unwrap()
        .into_inner()
        .keys;
    assert!(
        keys.iter()
            .any(|k| k.address == token_account && k.backend == "pkcs11"),
        "{keys:?}"
    );

    // Fund the token's account (through sigcast, from a dev key), then spend from it.
    let mut client = stack.client().await;
    client
        .submit_operation(transfer(
            "fund-token",
            DEV[0],
            &token_account,
            1_000_000_000_000_000_000,
        ))
        .await
        .unwrap();
    let funded = wait_terminal(&stack, &["fund-token".into()], Duration::from_secs(60)).await;
    assert_eq!(funded["fund-token"].state(), pb::OperationState::Confirmed);
    client
        .submit_operation(transfer(
            "from-token",
            &token_account,
            &recipient(0),
            12_345,
        ))
        .await
        .unwrap();
    let done = wait_terminal(&stack, &["from-token".into()], Duration::from_secs(60)).await;
    let op = &done["from-token"];
    assert_eq!(
        op.state(),
        pb::OperationState::Confirmed,
        "{op:?}\n{}",
        stack.logs()
    );

    let node = EvmRpc::new(
        std::slice::from_ref(&stack.anvil.url),
        Duration::from_secs(5),
    )
    .unwrap();
    let tx = node
        .read(
            "eth_getTransactionByHash",
            serde_json::json!([op.result.as_ref().unwrap().tx_id]),
        )
        .await
        .unwrap();
    assert!(
        tx["from"]
            .as_str()
            .unwrap()
            .eq_ignore_ascii_case(&token_account),
        "the chain recovered the token's key: {tx}"
    );
    let to: Address = recipient(0).parse().unwrap();
    assert_eq!(node.balance(to).await.unwrap(), U256::from(12_345u64));
    assert_eq!(node.nonce(token_account.parse().unwrap()).await.unwrap(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_interlock_refuses_a_second_payload_at_a_nonce_and_repeats_return_the_same_signature() {
    let mut stack = Stack::start(StackOptions {
        accounts: 1,
        ..Default::default()
    })
    .await;
    stack.broadcasters[0].kill9(); // the test drives the signer directly
    let mut client = stack.client().await;
    for (op_id, value) in [("first", 1), ("second", 2)] {
        client
            .submit_operation(transfer(op_id, DEV[0], &recipient(0), value))
            .await
            .unwrap();
    }
    let mut signer = sigcast_e2e::signer_client(&stack.signer_socket(0))
        .await
        .unwrap();
    let sign = |op_id: &str, purpose: i32, replaces_attempt: u32| SignOperationRequest {
        op_id: op_id.into(),
        purpose,
        replaces_attempt,
        ..Default::default()
    };
    let first = signer
        .sign_operation(sign("first", 1, 0))
        .await
        .unwrap()
        .into_inner();
    let again = signer
        .sign_operation(sign("first", 1, 0))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (again.tx_id.as_str(), again.already_signed),
        (first.tx_id.as_str(), true),
        "identical retry → same signature"
    );
    signer.sign_operation(sign("second", 1, 0)).await.unwrap();

    // Make "second" claim the nonce "first" owns: its stored payload becomes a copy of
    // first's (nonce 0), as a compromised broadcaster with store access might arrange. A
    // replacement of it would be a second, different payload at nonce 0.
    let store = store_of(&stack);
    let root = store.root().clone();
    let first_payload = store
        .read(|tx| accounts::payload(tx, &root, "first", 1))
        .unwrap()
        .unwrap();
    let second_key = root.pack(&("payload", "second", 1i64));
    store.run(|tx| tx.set(&second_key, &first_payload)).unwrap();
    let refused = signer
        .sign_operation(sign("second", 2, 1))
        .await
        .unwrap_err(); // FEE_BUMP
    assert_eq!(
        refused.code(),
        tonic::Code::FailedPrecondition,
        "{refused:?}"
    );
    assert!(
        refused.message().contains("interlock") && refused.message().contains("first"),
        "{}",
        refused.message()
    );
    let second = store
        .read(|tx| sigcast_store::operations::get(tx, &root, "second"))
        .unwrap()
        .unwrap();
    assert_eq!(second.attempts.len(), 1, "nothing signed");
    assert_eq!(
        store
            .read(|tx| accounts::audit_records(tx, &root, "second"))
            .unwrap()
            .len(),
        1
    );

    // A declared replacement of the owner itself is allowed, once per attempt seen.
    let bump = signer
        .sign_operation(sign("first", 2, 1))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((bump.attempt, bump.already_signed), (2, false));
    let bump_again = signer
        .sign_operation(sign("first", 2, 1))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (bump_again.tx_id.as_str(), bump_again.already_signed),
        (bump.tx_id.as_str(), true)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_token_that_fails_to_sign_leaves_no_nonce_or_spend_behind() {
    // A window policy, so that signing also records a spend: neither it nor the nonce may
    // outlive a signature the token failed to make.
    let hsm_dir = tempfile::tempdir().unwrap();
    let hsm = sigcast_e2e::SoftHsm::init(hsm_dir.path(), "sigcast-e2e");
    let mut stack = Stack::start(StackOptions {
        accounts: 1,
        signer_tables: hsm.signer_table(),
        signer_env: hsm.env(),
        ..Default::default()
    })
    .await;
    let config = stack
        .dir
        .path()
        .join("replica-0")
        .join("sigcast-signer.toml");
    let generated = std::process::Command::new(sigcast_e2e::binary("sigcast-signer"))
        .arg("--config")
        .arg(&config)
        .args(["keys", "generate", "--label", "flaky"])
        .envs(hsm.env())
        .output()
        .unwrap();
    assert!(
        generated.status.success(),
        "{}",
        String::from_utf8_lossy(&generated.stderr)
    );
    let account = String::from_utf8(generated.stdout)
        .unwrap()
        .trim()
        .to_owned();
    let policy = format!(
        "[[policies]]\naccount = \"{account}\"\nwindow_max_value_wei = \"1000000\"\nwindow_secs = 3600\n"
    );
    stack.add_signer_settings(0, &policy);
    stack.signers[0].restart().await;

    // The token loses the private key under the running signer: every signature now fails
    // inside the token, after the signer has allocated the nonce in its transaction.
    let deleted = std::process::Command::new("pkcs11-tool")
        .args([
            "--module",
            "/usr/lib/softhsm/libsofthsm2.so",
            "--token-label",
            "sigcast-e2e",
            "--login",
            "--pin",
            "4242",
            "--delete-object",
            "--type",
            "privkey",
            "--label",
            "flaky",
        ])
        .envs(hsm.env())
        .output()
        .unwrap();
    assert!(
        deleted.status.success(),
        "{}",
        String::from_utf8_lossy(&deleted.stderr)
    );

    let mut client = stack.client().await;
    client
        .submit_operation(transfer("unsignable", &account, &recipient(0), 1_000))
        .await
        .unwrap();
    // The broadcaster asks again and again; each time the token fails.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while stack.broadcasters[0]
        .log()
        .matches("signing failed; will retry")
        .count()
        < 3
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the signer never tried: {}",
            stack.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let op = client
        .get_operation(pb::GetOperationRequest {
            op_id: "unsignable".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .operation
        .unwrap();
    assert_eq!(op.state(), pb::OperationState::Received, "{op:?}");
    let store = store_of(&stack);
    let root = store.root().clone();
    let (next, owner, spent) = store
        .read(|tx| {
            Ok((
                accounts::next_nonce(tx, &root, "eip155:31337", &account)?,
                accounts::nonce_owner(tx, &root, "eip155:31337", &account, 0)?,
                accounts::spent_since(tx, &root, "eip155:31337", &account, 0)?,
            ))
        })
        .unwrap();
    assert_eq!(
        (next, owner, spent.len()),
        (None, None, 0),
        "a failed signature left a nonce allocation or a spend behind\n{}",
        stack.logs()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_dev_keys_are_the_accounts_anvil_funds_at_each_index() {
    let dir = tempfile::tempdir().unwrap();
    let anvil = sigcast_e2e::Anvil::start_with(None, dir.path(), &["--accounts", "12"]);
    let imported = std::process::Command::new(sigcast_e2e::binary("sigcast-signer"))
        .args(["keys", "import-dev", "--count", "12"])
        .env("SIGCAST_SIGNER__KEYSTORE_DIR", dir.path().join("keys"))
        .env("SIGCAST_SIGNER_PASSPHRASE", "e2e passphrase")
        .output()
        .unwrap();
    assert!(
        imported.status.success(),
        "{}",
        String::from_utf8_lossy(&imported.stderr)
    );
    let imported: Vec<Address> = String::from_utf8(imported.stdout)
        .unwrap()
        .lines()
        .map(|line| line.parse().unwrap())
        .collect();
    let node = EvmRpc::new(std::slice::from_ref(&anvil.url), Duration::from_secs(5)).unwrap();
    let funded: Vec<Address> = serde_json::from_value(
        node.read("eth_accounts", serde_json::json!([]))
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(funded.len(), 12);
    assert_eq!(imported, funded, "account i imported is anvil's account i");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn transfers_from_every_imported_dev_account_confirm() {
    let stack = Stack::start(StackOptions {
        accounts: 6,
        ..Default::default()
    })
    .await;
    let node = EvmRpc::new(
        std::slice::from_ref(&stack.anvil.url),
        Duration::from_secs(5),
    )
    .unwrap();
    let funded: Vec<Address> = serde_json::from_value(
        node.read("eth_accounts", serde_json::json!([]))
            .await
            .unwrap(),
    )
    .unwrap();
    let mut client = stack.client().await;
    let mut ids = Vec::new();
    for (i, from) in funded.iter().take(6).enumerate() {
        let op_id = format!("from-dev-{i}");
        client
            .submit_operation(transfer(&op_id, &from.to_string(), &recipient(i), 1_000))
            .await
            .unwrap();
        ids.push(op_id);
    }
    let done = wait_terminal(&stack, &ids, Duration::from_secs(60)).await;
    for id in &ids {
        assert_eq!(
            done[id].state(),
            pb::OperationState::Confirmed,
            "{id}: {:?}",
            done[id]
        );
    }
}
