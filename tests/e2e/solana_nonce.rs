//! Durable nonces end to end: nonce accounts created and listed by the signer's CLI, operations
//! rebroadcast across an outage without a new signature, and a cancel that advances the nonce.

use crate::evm::wait_terminal;
use crate::solana_ops::{
    FEE, SOL, assert_confirmed_by_one_resign, balance, behind_a_proxy, get, key_bytes, recipient,
    sol_transfer, wait_state,
};
use sigcast_e2e::SolanaNode;
use sigcast_e2e::{FaultProxy, Stack};
use sigcast_evm::RpcPool;
use sigcast_proto::pb;
use sigcast_solana::SolanaRpc;
use std::collections::BTreeSet;
use std::time::Duration;

/// Runs `sigcast-signer nonce …` with the stack's signer configuration; its stdout lines.
fn nonce_cli(stack: &Stack, args: &[&str]) -> Vec<String> {
    let output = std::process::Command::new(sigcast_e2e::binary("sigcast-signer"))
        .arg("--config")
        .arg(
            stack
                .dir
                .path()
                .join("replica-0")
                .join("sigcast-signer.toml"),
        )
        .arg("nonce")
        .args(args)
        .output()
        .expect("run sigcast-signer nonce");
    assert!(
        output.status.success(),
        "nonce {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

async fn nonce_value(rpc: &SolanaRpc, account: &str) -> String {
    let state = rpc
        .nonce(&key_bytes(account))
        .await
        .unwrap()
        .expect("an initialized nonce account");
    bs58::encode(state.value).into_string()
}

/// A node with 20 ms slots (a blockhash lives 3 s), a proxy in front of it for the broadcaster,
/// a stack with one funded Solana key, and `count` nonce accounts created for it by the CLI.
async fn durable_nonce_stack(count: usize) -> (SolanaNode, FaultProxy, Stack, Vec<String>) {
    let (node, proxy, stack, from) = behind_a_proxy(Duration::from_millis(20), 0).await;
    let created = nonce_cli(
        &stack,
        &[
            "create",
            "--cluster",
            "localnet",
            "--authority",
            &from,
            "--count",
            &count.to_string(),
        ],
    );
    assert_eq!(created.len(), count, "{created:?}");
    (node, proxy, stack, created)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn durable_nonce_operations_are_rebroadcast_across_an_outage_without_re_signing() {
    let (node, proxy, stack, created) = durable_nonce_stack(2).await;
    let from = stack.solana_accounts[0].clone();
    let rpc = SolanaRpc::new(std::slice::from_ref(&node.url), Duration::from_secs(5)).unwrap();

    // The CLI lists what it created: authority, a value, held by nobody yet.
    let listed = nonce_cli(&stack, &["list"]);
    assert_eq!(listed.len(), 1 + created.len(), "{listed:?}");
    for account in &created {
        let value = nonce_value(&rpc, account).await;
        let row = listed
            .iter()
            .find(|l| l.contains(account.as_str()))
            .expect("listed");
        assert_eq!(
            row.split('\t').collect::<Vec<_>>(),
            [
                "localnet",
                from.as_str(),
                account.as_str(),
                value.as_str(),
                "-"
            ]
        );
    }
    let before: Vec<String> =
        futures::future::join_all(created.iter().map(|a| nonce_value(&rpc, a))).await;
    let pool = RpcPool::new(std::slice::from_ref(&node.url), Duration::from_secs(5)).unwrap();
    let start_balance = balance(&pool, &from).await;

    proxy.set_down(true);
    let ids: Vec<String> = (0..3).map(|i| format!("durable-{i}")).collect();
    let mut client = stack.client().await;
    for (i, id) in ids.iter().enumerate() {
        client
            .submit_operation(sol_transfer(id, &from, &recipient(0), 1_000 + i as u64))
            .await
            .unwrap();
    }
    // Two accounts, three operations: two are signed, each over its own nonce account; the
    // third waits for one of them to be free.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let signed = loop {
        let mut ops = Vec::new();
        for id in &ids {
            ops.push(get(&stack, id).await);
        }
        let (signed, waiting): (Vec<_>, Vec<_>) =
            ops.into_iter().partition(|op| !op.attempts.is_empty());
        if signed.len() == 2 {
            assert_eq!(
                waiting[0].state(),
                pb::OperationState::Received,
                "{waiting:?}"
            );
            break signed;
        }
        assert!(std::time::Instant::now() < deadline, "{}", stack.logs());
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut held = BTreeSet::new();
    for op in &signed {
        let Some(pb::operation::Signing::Solana(signing)) = op.signing.clone() else {
            panic!("{op:?}")
        };
        let index = created
            .iter()
            .position(|a| *a == signing.nonce_account)
            .expect("a created account");
        assert_eq!(
            signing.blockhash, before[index],
            "the nonce value as blockhash"
        );
        assert_eq!(signing.last_valid_block_height, 0);
        held.insert(signing.nonce_account);
    }
    assert_eq!(held.len(), 2, "one operation per nonce account");

    // Down for well past a blockhash's lifetime: a durable nonce does not expire.
    let outage_end = node.slot() + 200;
    while node.slot() <= outage_end {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for op in &signed {
        assert_eq!(
            get(&stack, &op.op_id).await.attempts.len(),
            1,
            "nothing re-signed during the outage"
        );
    }
    proxy.set_down(false);

    let done = wait_terminal(&stack, &ids, Duration::from_secs(60)).await;
    let mut sent = 0;
    for (i, id) in ids.iter().enumerate() {
        let op = &done[id];
        assert_eq!(
            op.state(),
            pb::OperationState::Confirmed,
            "{op:?}\n{}",
            stack.logs()
        );
        assert_eq!(
            op.attempts.len(),
            1,
            "one signature, rebroadcast: {:?}",
            op.attempts
        );
        assert_eq!(op.result.as_ref().unwrap().tx_id, op.attempts[0].tx_id);
        sent += 1_000 + i as u64;
    }
    assert_eq!(
        balance(&pool, &recipient(0)).await,
        SOL + sent,
        "each paid once"
    );
    assert_eq!(
        balance(&pool, &from).await,
        start_balance - sent - 3 * FEE,
        "to the lamport: one fee per operation"
    );
    for (account, old) in created.iter().zip(&before) {
        assert_ne!(&nonce_value(&rpc, account).await, old, "{account} advanced");
    }
    let store = sigcast_store::Store::open(&sigcast_store::StoreConfig::sqlite(
        stack.dir.path().join("sigcast.db"),
    ))
    .unwrap();
    let root = store.root().clone();
    for id in &ids {
        let audit = store
            .read(|tx| sigcast_store::accounts::audit_records(tx, &root, id))
            .unwrap();
        assert_eq!(audit.len(), 1, "{id}: one signature made");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancelling_a_durable_nonce_operation_advances_the_nonce_and_nothing_lands() {
    let (node, proxy, stack, created) = durable_nonce_stack(1).await;
    let from = stack.solana_accounts[0].clone();
    let rpc = SolanaRpc::new(std::slice::from_ref(&node.url), Duration::from_secs(5)).unwrap();
    let pool = RpcPool::new(std::slice::from_ref(&node.url), Duration::from_secs(5)).unwrap();
    let before = nonce_value(&rpc, &created[0]).await;
    let start_balance = balance(&pool, &from).await;

    proxy.set_down(true);
    let mut client = stack.client().await;
    client
        .submit_operation(sol_transfer("cancel-me", &from, &recipient(0), 7_777))
        .await
        .unwrap();
    let signed = wait_state(&stack, "cancel-me", |op| {
        op.state() == pb::OperationState::Sent && !op.attempts.is_empty()
    })
    .await;
    let cancelled = client
        .cancel_operation(pb::CancelOperationRequest {
            op_id: "cancel-me".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .operation
        .unwrap();
    assert!(cancelled.cancel_requested, "{cancelled:?}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    proxy.set_down(false);

    let done = wait_terminal(&stack, &["cancel-me".into()], Duration::from_secs(60)).await;
    let op = &done["cancel-me"];
    assert_eq!(
        op.state(),
        pb::OperationState::Cancelled,
        "{op:?}\n{}",
        stack.logs()
    );
    assert_eq!(op.attempts.len(), 2, "{:?}", op.attempts);
    assert_eq!(op.attempts[1].reason, "cancel");
    assert_eq!(
        op.result.as_ref().unwrap().tx_id,
        op.attempts[1].tx_id,
        "the cancel landed"
    );
    assert_eq!(op.error.as_ref().unwrap().reason, "CANCELLED_ON_CHAIN");
    assert_ne!(
        nonce_value(&rpc, &created[0]).await,
        before,
        "the nonce advanced"
    );

    // The operation's own signed transaction, sent straight to the node now, never lands.
    let store = sigcast_store::Store::open(&sigcast_store::StoreConfig::sqlite(
        stack.dir.path().join("sigcast.db"),
    ))
    .unwrap();
    let root = store.root().clone();
    let original = store
        .read(|tx| sigcast_store::accounts::payload(tx, &root, "cancel-me", 1))
        .unwrap()
        .unwrap();
    for _ in 0..3 {
        let _ = rpc.send_transaction(&original, 0).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let statuses = rpc
        .statuses(&[signed.attempts[0].tx_id.clone()])
        .await
        .unwrap();
    assert_eq!(statuses, [None], "the transfer can never land");
    assert_eq!(
        balance(&pool, &recipient(0)).await,
        SOL,
        "nothing transferred"
    );
    assert_eq!(
        balance(&pool, &from).await,
        start_balance - FEE,
        "the cancel's fee, nothing else"
    );

    // The nonce account is free again for the key's next operation.
    client
        .submit_operation(sol_transfer("after-cancel", &from, &recipient(0), 1_234))
        .await
        .unwrap();
    let done = wait_terminal(&stack, &["after-cancel".into()], Duration::from_secs(60)).await;
    let next = &done["after-cancel"];
    assert_eq!(next.state(), pb::OperationState::Confirmed, "{next:?}");
    let Some(pb::operation::Signing::Solana(signing)) = &next.signing else {
        panic!("{next:?}")
    };
    assert_eq!(signing.nonce_account, created[0]);
    assert_eq!(balance(&pool, &recipient(0)).await, SOL + 1_234);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_nonce_advanced_elsewhere_is_proven_and_the_operation_re_signed_once() {
    let (node, proxy, stack, created) = durable_nonce_stack(1).await;
    let from = stack.solana_accounts[0].clone();
    let pool = RpcPool::new(std::slice::from_ref(&node.url), Duration::from_secs(5)).unwrap();
    let rpc = SolanaRpc::new(std::slice::from_ref(&node.url), Duration::from_secs(5)).unwrap();

    proxy.set_down(true);
    let mut client = stack.client().await;
    client
        .submit_operation(sol_transfer("moved-nonce", &from, &recipient(0), 3_333))
        .await
        .unwrap();
    let signed = wait_state(&stack, "moved-nonce", |op| !op.attempts.is_empty()).await;
    // Someone else advances the nonce: the signed transaction can never land now.
    node.set_nonce_value(key_bytes(&created[0]), [7; 32]);
    assert_eq!(
        nonce_value(&rpc, &created[0]).await,
        bs58::encode([7; 32]).into_string()
    );
    proxy.set_down(false);

    let done = wait_terminal(&stack, &["moved-nonce".into()], Duration::from_secs(60)).await;
    let op = &done["moved-nonce"];
    assert_confirmed_by_one_resign(&stack, op);
    let Some(pb::operation::Signing::Solana(signing)) = &op.signing else {
        panic!("{op:?}")
    };
    assert_eq!(
        signing.blockhash,
        bs58::encode([7; 32]).into_string(),
        "signed over the new value"
    );
    let first = rpc
        .statuses(&[signed.attempts[0].tx_id.clone()])
        .await
        .unwrap();
    assert_eq!(first, [None], "the first signature never landed");
    assert_eq!(
        balance(&pool, &recipient(0)).await,
        SOL + 3_333,
        "paid once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_instruction_list_never_touches_a_durable_nonce_account_of_its_keys() {
    // A caller of the key (any policy) asks to hand a nonce account the key is the authority
    // of to another authority: the nonce account's balance, and every operation signed over
    // it, would be theirs to strand.
    let (node, _proxy, stack, created) = durable_nonce_stack(1).await;
    let from = stack.solana_accounts[0].clone();
    let pool = RpcPool::new(std::slice::from_ref(&node.url), Duration::from_secs(5)).unwrap();
    let held = balance(&pool, &created[0]).await;
    let mut data = 7u32.to_le_bytes().to_vec();
    data.extend_from_slice(&key_bytes(&recipient(1)));
    let meta = |pubkey: &str, is_signer: bool, is_writable: bool| pb::SolanaAccountMeta {
        pubkey: pubkey.into(),
        is_signer,
        is_writable,
    };
    let authorize = pb::SubmitOperationRequest {
        op_id: "authorize-nonce".into(),
        intent: Some(pb::Intent {
            kind: Some(pb::intent::Kind::SolanaInstructions(
                pb::SolanaInstructions {
                    cluster: "localnet".into(),
                    fee_payer: from.clone(),
                    instructions: vec![pb::SolanaInstruction {
                        program_id: "11111111111111111111111111111111".into(),
                        accounts: vec![meta(&created[0], false, true), meta(&from, true, false)],
                        data,
                    }],
                },
            )),
        }),
    };
    let mut client = stack.client().await;
    client.submit_operation(authorize).await.unwrap();
    let done = wait_terminal(&stack, &["authorize-nonce".into()], Duration::from_secs(60)).await;
    let op = &done["authorize-nonce"];
    assert_eq!(op.state(), pb::OperationState::Rejected, "{op:?}");
    let error = op.error.as_ref().unwrap();
    assert_eq!(error.reason, "SIGNER_REFUSED");
    assert!(error.message.contains(&created[0]), "{}", error.message);
    assert!(op.attempts.is_empty(), "signed: {:?}", op.attempts);
    let rpc = SolanaRpc::new(std::slice::from_ref(&node.url), Duration::from_secs(5)).unwrap();
    let state = rpc.nonce(&key_bytes(&created[0])).await.unwrap().unwrap();
    assert_eq!(
        state.authority,
        key_bytes(&from),
        "the key is still its authority"
    );
    assert_eq!(balance(&pool, &created[0]).await, held);

    // The key's operations still sign over it.
    client
        .submit_operation(sol_transfer("after", &from, &recipient(0), 1_000))
        .await
        .unwrap();
    let done = wait_terminal(&stack, &["after".into()], Duration::from_secs(60)).await;
    assert_eq!(
        done["after"].state(),
        pb::OperationState::Confirmed,
        "{}",
        stack.logs()
    );
    let Some(pb::operation::Signing::Solana(signing)) = &done["after"].signing else {
        panic!("{:?}", done["after"])
    };
    assert_eq!(signing.nonce_account, created[0]);
    assert_eq!(balance(&pool, &recipient(0)).await, SOL + 1_000);
}

/// A registered nonce account that is no nonce account (closed, never made, its authority
/// handed over) first in key order: the signer takes the next free one of the key. Before,
/// every operation of the key stayed RECEIVED, each signing refused on the broken account,
/// while a good one sat free.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_broken_nonce_account_is_passed_over_for_the_next_free_one() {
    let (_node, _proxy, stack, created) = durable_nonce_stack(1).await;
    let from = stack.solana_accounts[0].clone();
    let store = sigcast_store::Store::open(&sigcast_store::StoreConfig::sqlite(
        stack.dir.path().join("sigcast.db"),
    ))
    .unwrap();
    let root = store.root().clone();
    // The System Program's key sorts before any other: an account, not a nonce account.
    let broken = "11111111111111111111111111111111";
    store
        .run(|tx| {
            sigcast_store::accounts::register_nonce_account(tx, &root, "localnet", &from, broken)
        })
        .unwrap();
    let registered = store
        .read(|tx| sigcast_store::accounts::nonce_accounts(tx, &root, "localnet", &from))
        .unwrap();
    assert_eq!(registered[0], broken, "{registered:?}");
    stack
        .client()
        .await
        .submit_operation(sol_transfer("past-broken", &from, &recipient(0), 10_000))
        .await
        .unwrap();
    let done = wait_terminal(&stack, &["past-broken".into()], Duration::from_secs(30)).await;
    let op = &done["past-broken"];
    assert_eq!(op.state(), pb::OperationState::Confirmed, "{op:?}");
    let Some(pb::operation::Signing::Solana(signing)) = &op.signing else {
        panic!("{op:?}")
    };
    assert_eq!(signing.nonce_account, created[0]);
}
