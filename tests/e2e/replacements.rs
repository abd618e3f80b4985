//! Replacements at the same nonce: fee bumps and cancels, with anvil's mining under the
//! test's control.

use crate::evm::{DEV, recipient, transfer, wait_terminal};
use sigcast_e2e::{Stack, StackOptions};
use sigcast_evm::{Address, EvmRpc, U256};
use sigcast_proto::pb;
use std::time::{Duration, Instant};

async fn node(stack: &Stack) -> EvmRpc {
    EvmRpc::new(
        std::slice::from_ref(&stack.anvil.url),
        Duration::from_secs(5),
    )
    .unwrap()
}

/// Stops anvil producing blocks until `mine` is called.
async fn pause_mining(node: &EvmRpc) {
    node.read("evm_setIntervalMining", serde_json::json!([0]))
        .await
        .unwrap();
    node.read("evm_setAutomine", serde_json::json!([false]))
        .await
        .unwrap();
}

/// Stops anvil's mining and submits one transfer of `value` wei from the first account: an
/// operation that stays unmined until the test mines. Returns the node.
async fn submit_while_paused(stack: &Stack, op_id: &str, value: u64) -> EvmRpc {
    let node = node(stack).await;
    pause_mining(&node).await;
    stack
        .client()
        .await
        .submit_operation(transfer(op_id, DEV[0], &recipient(0), value))
        .await
        .unwrap();
    node
}

async fn mine(node: &EvmRpc) {
    node.read("evm_mine", serde_json::json!([])).await.unwrap();
}

async fn get(stack: &Stack, op_id: &str) -> pb::Operation {
    let mut client = stack.client().await;
    client
        .get_operation(pb::GetOperationRequest {
            op_id: op_id.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .operation
        .unwrap()
}

/// Polls the operation until `ready` holds.
async fn wait_for(
    stack: &Stack,
    op_id: &str,
    what: &str,
    ready: impl Fn(&pb::Operation) -> bool,
) -> pb::Operation {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let op = get(stack, op_id).await;
        if ready(&op) {
            return op;
        }
        assert!(
            Instant::now() < deadline,
            "{op_id}: not {what} after 60 s: {op:?}\n{}",
            stack.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn accepted(op: &pb::Operation, reason: &str) -> bool {
    op.attempts
        .iter()
        .any(|a| a.reason == reason && a.outcome() == pb::AttemptOutcome::Accepted)
}

/// Mines a block whose base fee is `base_fee` (above the cap of `op_id`'s only attempt, from
/// the first account), checks it did not hold the attempt, and waits for the fee bump that
/// follows; returns it with its fee cap.
async fn bump_after_a_block_at(
    stack: &Stack,
    node: &EvmRpc,
    op_id: &str,
    base_fee: u128,
) -> (pb::Attempt, u128) {
    node.read(
        "anvil_setNextBlockBaseFeePerGas",
        serde_json::json!([format!("0x{base_fee:x}")]),
    )
    .await
    .unwrap();
    mine(node).await;
    assert_eq!(
        node.nonce(DEV[0].parse().unwrap()).await.unwrap(),
        0,
        "a block under a base fee above the attempt's cap does not hold it"
    );
    let bumped = wait_for(stack, op_id, "fee-bumped", |op| accepted(op, "fee_bump")).await;
    let bump = bumped
        .attempts
        .into_iter()
        .find(|a| a.reason == "fee_bump")
        .unwrap();
    let cap: u128 = bump.max_fee_per_gas.parse().unwrap();
    (bump, cap)
}

/// Mines a block and checks that `op_id` is CONFIRMED by `bump`, its one fee bump, and that
/// one transaction of the first account landed.
async fn confirmed_by_the_bump_alone(
    stack: &Stack,
    node: &EvmRpc,
    op_id: &str,
    bump: &pb::Attempt,
) {
    mine(node).await;
    let done = wait_terminal(stack, &[op_id.into()], Duration::from_secs(60)).await;
    let op = &done[op_id];
    assert_eq!(
        op.state(),
        pb::OperationState::Confirmed,
        "{}",
        stack.logs()
    );
    assert_eq!(op.result.as_ref().unwrap().tx_id, bump.tx_id);
    assert_eq!(
        op.attempts.len(),
        2,
        "one bump: priced over the head, it is not bumped again"
    );
    assert_eq!(
        node.nonce(DEV[0].parse().unwrap()).await.unwrap(),
        1,
        "exactly one of its transactions landed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_operation_waiting_for_its_block_is_read_at_most_once_per_check_period() {
    use crate::observability::{scrape, total, total_or_zero};
    // The stack's broadcaster passes every 100 ms; an operation's chain state is read again
    // only after check_after (500 ms), as after a send.
    let stack = Stack::start(StackOptions {
        accounts: 1,
        ..Default::default()
    })
    .await;
    let node = submit_while_paused(&stack, "waiting", 1).await;
    wait_for(&stack, "waiting", "sent", |op| {
        op.state() == pb::OperationState::Sent
    })
    .await;
    let broadcaster = stack.metrics_addr("broadcaster-0");
    // Each check reads the account's nonce at the head; while it has not passed the
    // operation's, no receipt is asked for (nothing of ours can be in a block yet).
    let nonce = ["method=\"eth_getTransactionCount\""];
    let receipt = ["method=\"eth_getTransactionReceipt\""];
    let reads = |samples: &std::collections::HashMap<String, f64>| {
        (
            total_or_zero(samples, "sigcast_rpc_requests_total", &nonce),
            total_or_zero(samples, "sigcast_rpc_requests_total", &receipt),
        )
    };
    let before = reads(&scrape(broadcaster).await);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let samples = scrape(broadcaster).await;
    // After 5 s the nonce must have been read: the series exists.
    total(&samples, "sigcast_rpc_requests_total", &nonce);
    let after = reads(&samples);
    let checks = after.0 - before.0;
    assert!(
        (3.0..=12.0).contains(&checks),
        "{checks} checks in 5 s: one every 500 ms is 10, one every pass 50"
    );
    assert_eq!(
        after.1 - before.1,
        0.0,
        "a receipt was asked for while the nonce was free"
    );
    mine(&node).await;
    let done = wait_terminal(&stack, &["waiting".into()], Duration::from_secs(60)).await;
    assert_eq!(done["waiting"].state(), pb::OperationState::Confirmed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fee_bump_replaces_a_stuck_transaction_and_exactly_one_lands() {
    let stack = Stack::start(StackOptions {
        accounts: 1,
        fee_bump_after_ms: 1_500,
        ..Default::default()
    })
    .await;
    let node = submit_while_paused(&stack, "stuck", 4_242).await;
    let bumped = wait_for(&stack, "stuck", "fee-bumped", |op| accepted(op, "fee_bump")).await;
    assert!(bumped.attempts.len() >= 2);
    assert!(
        bumped
            .attempts
            .iter()
            .all(|a| a.reason.is_empty() || a.reason == "fee_bump")
    );
    mine(&node).await;
    let done = wait_terminal(&stack, &["stuck".into()], Duration::from_secs(60)).await;
    let op = &done["stuck"];
    assert_eq!(
        op.state(),
        pb::OperationState::Confirmed,
        "{}",
        stack.logs()
    );
    let landed = &op.result.as_ref().unwrap().tx_id;
    assert_ne!(
        landed, &op.attempts[0].tx_id,
        "a replacement landed, not the stuck original"
    );
    assert!(op.attempts.iter().any(|a| &a.tx_id == landed));
    assert_eq!(
        node.nonce(DEV[0].parse().unwrap()).await.unwrap(),
        1,
        "exactly one of its transactions landed"
    );
    let to: Address = recipient(0).parse().unwrap();
    assert_eq!(node.balance(to).await.unwrap(), U256::from(4_242u64));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancel_after_signing_lands_as_a_self_transfer_and_cancels() {
    let stack = Stack::start(StackOptions {
        accounts: 1,
        ..Default::default()
    })
    .await;
    let node = node(&stack).await;
    pause_mining(&node).await;
    let mut client = stack.client().await;
    client
        .submit_operation(transfer("regret", DEV[0], &recipient(0), 9_000))
        .await
        .unwrap();
    wait_for(&stack, "regret", "sent", |op| accepted(op, "")).await;
    let requested = client
        .cancel_operation(pb::CancelOperationRequest {
            op_id: "regret".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(requested.operation.unwrap().cancel_requested);
    wait_for(&stack, "regret", "cancel sent", |op| accepted(op, "cancel")).await;
    mine(&node).await;
    let done = wait_terminal(&stack, &["regret".into()], Duration::from_secs(60)).await;
    let op = &done["regret"];
    assert_eq!(
        op.state(),
        pb::OperationState::Cancelled,
        "{}",
        stack.logs()
    );
    let cancel = op.attempts.iter().find(|a| a.reason == "cancel").unwrap();
    assert_eq!(
        op.result.as_ref().unwrap().tx_id,
        cancel.tx_id,
        "the cancel is what landed"
    );
    let to: Address = recipient(0).parse().unwrap();
    assert_eq!(
        node.balance(to).await.unwrap(),
        U256::ZERO,
        "the transfer never happened"
    );
    assert_eq!(
        node.nonce(DEV[0].parse().unwrap()).await.unwrap(),
        1,
        "the nonce is used, by the cancel"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancel_too_late_leaves_the_confirmation_standing() {
    let stack = Stack::start(StackOptions {
        accounts: 1,
        ..Default::default()
    })
    .await;
    let node = node(&stack).await;
    pause_mining(&node).await;
    let mut client = stack.client().await;
    client
        .submit_operation(transfer("too-late", DEV[0], &recipient(0), 3_000))
        .await
        .unwrap();
    wait_for(&stack, "too-late", "sent", |op| accepted(op, "")).await;
    mine(&node).await; // the original lands first
    match client
        .cancel_operation(pb::CancelOperationRequest {
            op_id: "too-late".into(),
        })
        .await
    {
        Ok(response) => assert!(response.into_inner().operation.unwrap().cancel_requested),
        Err(status) => assert_eq!(
            status.code(),
            tonic::Code::FailedPrecondition,
            "already confirmed: {status:?}"
        ),
    }
    mine(&node).await; // a cancel, if one was sent, finds its nonce taken
    let done = wait_terminal(&stack, &["too-late".into()], Duration::from_secs(60)).await;
    assert_eq!(
        done["too-late"].state(),
        pb::OperationState::Confirmed,
        "{}",
        stack.logs()
    );
    let to: Address = recipient(0).parse().unwrap();
    assert_eq!(node.balance(to).await.unwrap(), U256::from(3_000u64));
    assert_eq!(node.nonce(DEV[0].parse().unwrap()).await.unwrap(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancel_before_signing_sends_nothing() {
    let mut stack = Stack::start(StackOptions {
        accounts: 1,
        ..Default::default()
    })
    .await;
    stack.broadcasters[0].kill9(); // nothing is signed while it is down
    let mut client = stack.client().await;
    client
        .submit_operation(transfer("never", DEV[0], &recipient(0), 1_000))
        .await
        .unwrap();
    let cancelled = client
        .cancel_operation(pb::CancelOperationRequest {
            op_id: "never".into(),
        })
        .await
        .unwrap();
    assert_eq!(
        cancelled.into_inner().operation.unwrap().state(),
        pb::OperationState::Cancelled
    );
    stack.broadcasters[0].restart().await;
    // A later operation of the same account goes through: proof the broadcaster has run passes.
    client
        .submit_operation(transfer("later", DEV[0], &recipient(0), 2_000))
        .await
        .unwrap();
    let done = wait_terminal(&stack, &["later".into()], Duration::from_secs(60)).await;
    assert_eq!(done["later"].state(), pb::OperationState::Confirmed);
    let never = get(&stack, "never").await;
    assert_eq!(never.state(), pb::OperationState::Cancelled);
    assert!(never.attempts.is_empty(), "never signed");
    let node = node(&stack).await;
    assert_eq!(
        node.nonce(DEV[0].parse().unwrap()).await.unwrap(),
        1,
        "only the later operation was sent"
    );
    let to: Address = recipient(0).parse().unwrap();
    assert_eq!(node.balance(to).await.unwrap(), U256::from(2_000u64));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refused_operation_is_rejected_and_its_nonce_filled_so_later_ones_confirm() {
    let stack = Stack::start(StackOptions {
        accounts: 1,
        ..Default::default()
    })
    .await;
    let mut client = stack.client().await;
    // 20,000 ETH from an account holding 10,000: the node refuses it (insufficient funds).
    let mut broke = transfer("too-big", DEV[0], &recipient(0), 0);
    if let Some(pb::Intent {
        kind: Some(pb::intent::Kind::EvmTransfer(t)),
    }) = broke.intent.as_mut()
    {
        t.value_wei = "20000000000000000000000".into();
    }
    client.submit_operation(broke).await.unwrap();
    client
        .submit_operation(transfer("after-gap", DEV[0], &recipient(0), 6_000))
        .await
        .unwrap();
    let done = wait_terminal(
        &stack,
        &["too-big".into(), "after-gap".into()],
        Duration::from_secs(90),
    )
    .await;
    let refused = &done["too-big"];
    assert_eq!(
        refused.state(),
        pb::OperationState::Rejected,
        "{refused:?}\n{}",
        stack.logs()
    );
    let error = refused.error.as_ref().unwrap();
    assert_eq!(error.reason, "NEVER_APPLIED");
    assert!(
        error.message.to_lowercase().contains("insufficient funds"),
        "{}",
        error.message
    );
    assert!(refused.attempts.iter().any(|a| a.reason == "gap_fill"));
    assert_eq!(
        done["after-gap"].state(),
        pb::OperationState::Confirmed,
        "{}",
        stack.logs()
    );
    let node = node(&stack).await;
    assert_eq!(
        node.nonce(DEV[0].parse().unwrap()).await.unwrap(),
        2,
        "the fill and the later operation"
    );
    let to: Address = recipient(0).parse().unwrap();
    assert_eq!(
        node.balance(to).await.unwrap(),
        U256::from(6_000u64),
        "the refused transfer never paid"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reorged_out_transaction_is_resent_byte_identical_and_confirms_once() {
    let stack = Stack::start(StackOptions {
        accounts: 1,
        confirmations: 3,
        ..Default::default()
    })
    .await;
    let node = submit_while_paused(&stack, "reorged", 8_000).await;
    let sent = wait_for(&stack, "reorged", "sent", |op| accepted(op, "")).await;
    let hash = sent.attempts[0].tx_id.parse().unwrap();
    // Confirmation depth: with the receipt readable for many polls (100 ms), one and then two
    // blocks are not three confirmations; the third is.
    mine(&node).await;
    let first = node.receipt(hash).await.unwrap().expect("included");
    for depth in [1, 2] {
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        assert_eq!(
            get(&stack, "reorged").await.state(),
            pb::OperationState::Sent,
            "{depth} of 3 confirmations"
        );
        if depth == 1 {
            mine(&node).await;
        }
    }

    // The two blocks from the one holding it are replaced by blocks without it, and the node
    // forgets it: only a resend by sigcast can bring it back.
    node.read("anvil_reorg", serde_json::json!([2, []]))
        .await
        .unwrap();
    node.read("anvil_dropAllTransactions", serde_json::json!([]))
        .await
        .unwrap();
    assert!(
        node.read(
            "eth_getTransactionByHash",
            serde_json::json!([sent.attempts[0].tx_id])
        )
        .await
        .unwrap()
        .is_null(),
        "the node no longer holds the transaction"
    );
    let replaced = node
        .read(
            "eth_getBlockByNumber",
            serde_json::json!([format!("0x{:x}", first.block_number), false]),
        )
        .await
        .unwrap();
    assert_ne!(
        replaced["hash"].as_str().unwrap(),
        first.block_hash.to_string(),
        "the block was reorganised"
    );
    node.read("evm_setIntervalMining", serde_json::json!([1]))
        .await
        .unwrap();

    let done = wait_terminal(&stack, &["reorged".into()], Duration::from_secs(90)).await;
    let op = &done["reorged"];
    assert_eq!(
        op.state(),
        pb::OperationState::Confirmed,
        "{}",
        stack.logs()
    );
    assert_eq!(
        op.attempts.len(),
        1,
        "no new signature: the same bytes were sent again"
    );
    assert!(
        op.attempts[0].sends >= 2,
        "sigcast sent it again (the node had dropped it): {op:?}"
    );
    let result = op.result.as_ref().unwrap();
    assert_eq!(result.tx_id, op.attempts[0].tx_id);
    assert_ne!(
        result.block_hash,
        first.block_hash.to_string(),
        "confirmed in the new chain, not the orphaned block"
    );
    assert_eq!(node.nonce(DEV[0].parse().unwrap()).await.unwrap(), 1);
    let to: Address = recipient(0).parse().unwrap();
    assert_eq!(
        node.balance(to).await.unwrap(),
        U256::from(8_000u64),
        "paid exactly once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_foreign_transaction_reorged_out_before_the_depth_never_rejects_the_operation() {
    // Another sender's transaction takes the operation's nonce in one block, which a reorg then
    // replaces with a block holding the operation's own transaction. REJECTED on the first
    // block would have told the caller "never applied" for a payment that then landed.
    let stack = Stack::start(StackOptions {
        accounts: 1,
        confirmations: 3,
        ..Default::default()
    })
    .await;
    let node = submit_while_paused(&stack, "contested", 9_000).await;
    let sent = wait_for(&stack, "contested", "sent", |op| accepted(op, "")).await;
    // The outside transaction outbids ours in the pool and is mined alone.
    let outside = node
        .send_raw(
            &crate::direct::sign_transfer_paying(
                "0x00000000000000000000000000000000000a11ce",
                1,
                0,
                200_000_000_000,
                50_000_000_000,
            ),
            0,
        )
        .await
        .result
        .expect("the outside transaction replaces ours in the pool");
    mine(&node).await;
    let foreign = node.receipt(outside).await.unwrap().expect("outside mined");
    assert_eq!(node.nonce(DEV[0].parse().unwrap()).await.unwrap(), 1);
    // Several checks (every 100 ms, each at least 500 ms after the last send) see the nonce
    // used by it, one block deep of three.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let op = get(&stack, "contested").await;
    assert_eq!(
        op.state(),
        pb::OperationState::Sent,
        "settled from a block one deep: {op:?}"
    );

    // The reorg: the outside block is replaced by one holding our own signed bytes.
    let store = sigcast_store::Store::open(&sigcast_store::StoreConfig::sqlite(
        stack.dir.path().join("sigcast.db"),
    ))
    .unwrap();
    let root = store.root().clone();
    let ours = store
        .read(|tx| sigcast_store::accounts::payload(tx, &root, "contested", 1))
        .unwrap()
        .unwrap();
    node.read(
        "anvil_reorg",
        serde_json::json!([1, [[format!("0x{}", hex::encode(&ours)), 0]]]),
    )
    .await
    .unwrap();
    let outside_receipt = node
        .read(
            "eth_getTransactionReceipt",
            serde_json::json!([outside.to_string()]),
        )
        .await
        .unwrap();
    assert!(
        outside_receipt.is_null(),
        "the outside transaction was reorganised out: {outside_receipt}"
    );
    node.read("evm_setIntervalMining", serde_json::json!([1]))
        .await
        .unwrap();
    let done = wait_terminal(&stack, &["contested".into()], Duration::from_secs(60)).await;
    let op = &done["contested"];
    assert_eq!(
        op.state(),
        pb::OperationState::Confirmed,
        "{op:?}\n{}",
        stack.logs()
    );
    assert_eq!(op.result.as_ref().unwrap().tx_id, sent.attempts[0].tx_id);
    assert_ne!(
        op.result.as_ref().unwrap().block_hash,
        foreign.block_hash.to_string(),
        "confirmed in the block that replaced the foreign one"
    );
    let to: Address = recipient(0).parse().unwrap();
    assert_eq!(node.balance(to).await.unwrap(), U256::from(9_000u64));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refused_resend_of_bytes_the_node_took_brings_no_replacement() {
    // The node took the operation's transaction; a later resend of the same bytes is answered
    // with a refusal (the base fee rose, the endpoint is another). The bytes may still land:
    // that refusal is no reason for a fee bump, let alone a gap fill.
    let stack = Stack::start(StackOptions {
        accounts: 1,
        faults: Some((0.0, 0)),
        ..Default::default()
    })
    .await;
    let node = submit_while_paused(&stack, "refused-resend", 5_000).await;
    wait_for(&stack, "refused-resend", "accepted", |op| accepted(op, "")).await;
    let proxy = stack.proxy.as_ref().unwrap();
    proxy.set_refusing_sends(Some("max fee per gas less than block base fee"));
    let sends = proxy.stats().sends;
    // The broadcaster resends every 3 s; let two resends be refused.
    let deadline = Instant::now() + Duration::from_secs(30);
    while proxy.stats().sends < sends + 2 {
        assert!(Instant::now() < deadline, "no resend: {}", stack.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let op = get(&stack, "refused-resend").await;
    assert_eq!(
        op.attempts.len(),
        1,
        "a replacement followed a refused resend: {op:?}"
    );
    proxy.set_refusing_sends(None);
    mine(&node).await;
    let done = wait_terminal(&stack, &["refused-resend".into()], Duration::from_secs(60)).await;
    let op = &done["refused-resend"];
    assert_eq!(op.state(), pb::OperationState::Confirmed, "{op:?}");
    assert_eq!(op.result.as_ref().unwrap().tx_id, op.attempts[0].tx_id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancel_refused_for_its_fees_is_priced_again_and_lands_instead_of_the_operation() {
    // The node takes the operation's transaction; the cancel asked for after is refused for
    // its fees (the base fee rose past it). Left at that, the operation's own bytes went out
    // again and landed as soon as a block was mined: CONFIRMED, the cancel never retried
    // (review, sixteenth session).
    let stack = Stack::start(StackOptions {
        accounts: 1,
        faults: Some((0.0, 0)),
        ..Default::default()
    })
    .await;
    let node = submit_while_paused(&stack, "cancel-refused", 7_000).await;
    wait_for(&stack, "cancel-refused", "accepted", |op| accepted(op, "")).await;
    let proxy = stack.proxy.as_ref().unwrap();
    proxy.set_refusing_sends(Some("max fee per gas less than block base fee"));
    let requested = stack
        .client()
        .await
        .cancel_operation(pb::CancelOperationRequest {
            op_id: "cancel-refused".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(requested.operation.unwrap().cancel_requested);
    wait_for(&stack, "cancel-refused", "a refused cancel", |op| {
        op.attempts
            .iter()
            .any(|a| a.reason == "cancel" && a.outcome() == pb::AttemptOutcome::Rejected)
    })
    .await;
    proxy.set_refusing_sends(None);
    let cancelled = wait_for(&stack, "cancel-refused", "a cancel in the pool", |op| {
        accepted(op, "cancel")
    })
    .await;
    assert!(
        cancelled
            .attempts
            .iter()
            .filter(|a| a.reason == "cancel")
            .count()
            >= 2,
        "priced again: {cancelled:?}"
    );
    mine(&node).await;
    let done = wait_terminal(&stack, &["cancel-refused".into()], Duration::from_secs(60)).await;
    let op = &done["cancel-refused"];
    assert_eq!(op.state(), pb::OperationState::Cancelled, "{op:?}");
    let to: Address = recipient(0).parse().unwrap();
    assert_eq!(node.balance(to).await.unwrap(), U256::ZERO, "nothing paid");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refused_fee_bump_leaves_the_first_attempt_to_land_without_a_gap_fill() {
    // A fee bump the node refuses (it would exceed the balance) says nothing of the first
    // attempt, which waits in the pool: a gap fill would displace it and reject an operation
    // that was about to land.
    let stack = Stack::start(StackOptions {
        accounts: 1,
        faults: Some((0.0, 0)),
        fee_bump_after_ms: 1_500,
        ..Default::default()
    })
    .await;
    let node = submit_while_paused(&stack, "refused-bump", 6_000).await;
    wait_for(&stack, "refused-bump", "accepted", |op| accepted(op, "")).await;
    let proxy = stack.proxy.as_ref().unwrap();
    proxy.set_refusing_sends(Some("insufficient funds for gas * price + value"));
    let bumped = wait_for(&stack, "refused-bump", "a refused fee bump", |op| {
        op.attempts
            .iter()
            .any(|a| a.reason == "fee_bump" && a.outcome() == pb::AttemptOutcome::Rejected)
    })
    .await;
    assert_eq!(bumped.attempts[0].outcome(), pb::AttemptOutcome::Accepted);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let op = get(&stack, "refused-bump").await;
    assert!(
        op.attempts
            .iter()
            .all(|a| a.reason != "gap_fill" && a.number <= 2),
        "a gap fill or a further bump followed the refused bump: {op:?}"
    );
    proxy.set_refusing_sends(None);
    node.read("evm_setIntervalMining", serde_json::json!([1]))
        .await
        .unwrap();
    let done = wait_terminal(&stack, &["refused-bump".into()], Duration::from_secs(60)).await;
    let op = &done["refused-bump"];
    assert_eq!(op.state(), pb::OperationState::Confirmed, "{op:?}");
    assert_eq!(op.result.as_ref().unwrap().tx_id, op.attempts[0].tx_id);
    let to: Address = recipient(0).parse().unwrap();
    assert_eq!(node.balance(to).await.unwrap(), U256::from(6_000u64));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fees_stay_under_the_cap_and_a_bump_it_leaves_no_room_for_is_never_signed() {
    // anvil's base fee is at most 1 gwei here and its tip 1 gwei: a new transaction would offer
    // about 3 gwei, a bump 25% more. Under a 2 gwei cap the first is held to 2 gwei (still
    // includable) and no bump can be 10% above it: the one transaction keeps going out as it is.
    let cap_gwei = 2;
    let stack = Stack::start(StackOptions {
        accounts: 1,
        fee_bump_after_ms: 1_000,
        max_fee_per_gas_gwei: Some(cap_gwei),
        ..Default::default()
    })
    .await;
    let node = submit_while_paused(&stack, "capped", 7_000).await;
    let first = wait_for(&stack, "capped", "accepted", |op| accepted(op, "")).await;
    // Several bump periods and a rebroadcast period (3 s) pass with the nonce stuck.
    let resent = wait_for(&stack, "capped", "sent again", |op| {
        op.attempts.first().is_some_and(|a| a.sends >= 2)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let op = get(&stack, "capped").await;
    assert_eq!(
        op.attempts.len(),
        1,
        "a replacement was signed although the cap leaves it no room: {op:?}"
    );
    assert_eq!(resent.attempts[0].tx_id, first.attempts[0].tx_id);
    let tx = node
        .read(
            "eth_getTransactionByHash",
            serde_json::json!([first.attempts[0].tx_id]),
        )
        .await
        .unwrap();
    let max_fee = u128::from_str_radix(
        tx["maxFeePerGas"]
            .as_str()
            .unwrap()
            .trim_start_matches("0x"),
        16,
    )
    .unwrap();
    assert_eq!(
        max_fee,
        u128::from(cap_gwei) * 1_000_000_000,
        "the first transaction is held to the cap: {tx}"
    );
    node.read("evm_setIntervalMining", serde_json::json!([1]))
        .await
        .unwrap();
    let done = wait_terminal(&stack, &["capped".into()], Duration::from_secs(60)).await;
    let op = &done["capped"];
    assert_eq!(op.state(), pb::OperationState::Confirmed, "{op:?}");
    assert_eq!(op.result.as_ref().unwrap().tx_id, op.attempts[0].tx_id);
    assert_eq!(node.nonce(DEV[0].parse().unwrap()).await.unwrap(), 1);
    let to: Address = recipient(0).parse().unwrap();
    assert_eq!(node.balance(to).await.unwrap(), U256::from(7_000u64));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancels_racing_with_signing_and_sending_leave_one_effect_or_none() {
    // Each cancel is sent a few milliseconds after its submit, while the broadcaster signs and
    // sends: some land before signing (nothing signed), some after (an on-chain cancel races
    // the transfer), some too late (the transfer stands). Whatever the interleaving, each
    // operation ends with its transfer paid once or not at all, as its state says.
    let stack = Stack::start(StackOptions {
        accounts: 1,
        block_time: Some(1),
        ..Default::default()
    })
    .await;
    let client = stack.client().await;
    let count = 40u64;
    let ids: Vec<String> = (0..count).map(|i| format!("raced-{i:02}")).collect();
    let races = ids.iter().enumerate().map(|(i, id)| {
        let mut client = client.clone();
        let id = id.clone();
        async move {
            client
                .submit_operation(transfer(&id, DEV[0], &recipient(0), 1_000 + i as u64))
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis((i as u64 % 8) * 40)).await;
            client
                .cancel_operation(pb::CancelOperationRequest { op_id: id })
                .await
                .map(|_| ())
                .or_else(|status| match status.code() {
                    // Confirmed before the cancel arrived: too late, which is fine.
                    tonic::Code::FailedPrecondition => Ok(()),
                    _ => Err(status),
                })
                .unwrap();
        }
    });
    futures::future::join_all(races).await;
    let done = wait_terminal(&stack, &ids, Duration::from_secs(120)).await;
    let mut paid = U256::ZERO;
    let mut transactions = 0u64;
    let mut outcomes = std::collections::BTreeMap::<&str, usize>::new();
    for (i, id) in ids.iter().enumerate() {
        let op = &done[id];
        let kind = match op.state() {
            pb::OperationState::Confirmed => {
                let result = op.result.as_ref().unwrap();
                // The transfer itself, not a cancel, landed.
                let landed = op
                    .attempts
                    .iter()
                    .find(|a| a.tx_id == result.tx_id)
                    .unwrap();
                assert_ne!(landed.reason, "cancel", "{op:?}");
                paid += U256::from(1_000 + i as u64);
                transactions += 1;
                "confirmed"
            }
            pb::OperationState::Cancelled if op.attempts.is_empty() => "cancelled unsigned",
            pb::OperationState::Cancelled => {
                // Its cancel took the nonce on chain.
                transactions += 1;
                "cancelled on chain"
            }
            other => panic!("{id} ended {other:?}: {op:?}"),
        };
        *outcomes.entry(kind).or_default() += 1;
    }
    println!("{outcomes:?}");
    let node = node(&stack).await;
    let to: Address = recipient(0).parse().unwrap();
    assert_eq!(
        node.balance(to).await.unwrap(),
        paid,
        "exactly the confirmed transfers were paid"
    );
    assert_eq!(
        node.nonce(DEV[0].parse().unwrap()).await.unwrap(),
        transactions,
        "one transaction per confirmed transfer or landed cancel, nothing more"
    );
    assert!(
        outcomes.len() >= 2,
        "the race never went both ways: {outcomes:?}"
    );
}

/// libfaketime (Debian `libfaketime`), multithreaded build.
fn libfaketime() -> String {
    ["x86_64-linux-gnu", "aarch64-linux-gnu"]
        .iter()
        .map(|arch| format!("/usr/lib/{arch}/faketime/libfaketimeMT.so.1"))
        .find(|path| std::path::Path::new(path).exists())
        .expect("libfaketime (scripts/install-deps.sh installs it)")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_step_of_the_broadcaster_s_clock_brings_no_early_fee_bump_and_stalls_no_resend() {
    // The broadcaster's system clock follows an offset in this file (libfaketime); its
    // monotonic clock stays real.
    let clock = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(clock.path(), "+0").unwrap();
    let stack = Stack::start(StackOptions {
        accounts: 1,
        fee_bump_after_ms: 30_000,
        broadcaster_env: vec![
            ("LD_PRELOAD".into(), libfaketime()),
            (
                "FAKETIME_TIMESTAMP_FILE".into(),
                clock.path().display().to_string(),
            ),
            ("FAKETIME_NO_CACHE".into(), "1".into()),
            ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
        ],
        ..Default::default()
    })
    .await;
    let node = submit_while_paused(&stack, "stepped", 777).await;
    wait_for(&stack, "stepped", "sent", |op| {
        op.attempts.first().is_some_and(|a| a.sends >= 1)
    })
    .await;

    // An hour forward: the fee bump is 30 s away, not due at once.
    std::fs::write(clock.path(), "+3600").unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let op = get(&stack, "stepped").await;
    assert_eq!(
        op.attempts.len(),
        1,
        "a forward step of the clock brought a fee bump: {op:?}"
    );

    // Two hours back (an hour behind real time): the stuck transaction still goes out again
    // every 3 s (rebroadcast_ms), not after the hour the clock went back.
    std::fs::write(clock.path(), "-3600").unwrap();
    let sends = get(&stack, "stepped").await.attempts[0].sends;
    wait_for(&stack, "stepped", "sent again", |op| {
        op.attempts[0].sends >= sends + 2
    })
    .await;

    mine(&node).await;
    let done = wait_terminal(&stack, &["stepped".into()], Duration::from_secs(60)).await;
    let op = &done["stepped"];
    assert_eq!(
        op.state(),
        pb::OperationState::Confirmed,
        "{}",
        stack.logs()
    );
    assert_eq!(op.attempts.len(), 1, "{op:?}");
    assert_eq!(node.nonce(DEV[0].parse().unwrap()).await.unwrap(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_nonce_another_sender_holds_above_the_depth_is_not_skipped_so_a_reorg_strands_nothing() {
    let stack = Stack::start(StackOptions {
        accounts: 1,
        confirmations: 3,
        ..Default::default()
    })
    .await;
    let node = node(&stack).await;
    pause_mining(&node).await;
    // Another holder of the key uses nonce 0; its transaction is one block deep.
    let outside = node
        .send_raw(
            &crate::direct::sign_transfer("0x00000000000000000000000000000000000a11ce", 1, 0),
            0,
        )
        .await
        .result
        .expect("outside send accepted");
    mine(&node).await;
    assert!(node.receipt(outside).await.unwrap().is_some(), "mined");

    stack
        .client()
        .await
        .submit_operation(transfer("behind", DEV[0], &recipient(0), 9_000))
        .await
        .unwrap();
    let signed = wait_for(&stack, "behind", "signed", |op| !op.attempts.is_empty()).await;
    assert_eq!(
        signed.signing,
        Some(pb::operation::Signing::Evm(pb::EvmSigning { nonce: 0 })),
        "the nonce of a transaction above the confirmation depth is not skipped"
    );

    // The block holding the outside transaction is replaced by an empty one and the node
    // forgets it. Had nonce 0 been skipped, ours at 1 would wait for ever behind the gap.
    node.read("anvil_reorg", serde_json::json!([1, []]))
        .await
        .unwrap();
    node.read("anvil_dropAllTransactions", serde_json::json!([]))
        .await
        .unwrap();
    node.read("evm_setIntervalMining", serde_json::json!([1]))
        .await
        .unwrap();
    let done = wait_terminal(&stack, &["behind".into()], Duration::from_secs(60)).await;
    let op = &done["behind"];
    assert_eq!(
        op.state(),
        pb::OperationState::Confirmed,
        "{op:?}\n{}",
        stack.logs()
    );
    let from: Address = DEV[0].parse().unwrap();
    assert_eq!(node.nonce(from).await.unwrap(), 1, "ours alone, at nonce 0");
    assert_eq!(
        node.balance(recipient(0).parse().unwrap()).await.unwrap(),
        U256::from(9_000u64)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_in_flight_gauge_counts_from_the_head_whatever_the_confirmation_depth() {
    use crate::observability::{scrape, total};
    let stack = Stack::start(StackOptions {
        accounts: 1,
        confirmations: 3,
        ..Default::default()
    })
    .await;
    let node = node(&stack).await;
    pause_mining(&node).await;
    let mut client = stack.client().await;
    client
        .submit_operation(transfer("first", DEV[0], &recipient(0), 1_000))
        .await
        .unwrap();
    wait_for(&stack, "first", "sent", |op| accepted(op, "")).await;
    // Ours at nonce 0, one block deep: included, not yet settled.
    mine(&node).await;
    // The signer reads the chain at most once a second: the next read sees the block.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    client
        .submit_operation(transfer("second", DEV[0], &recipient(0), 2_000))
        .await
        .unwrap();
    let second = wait_for(&stack, "second", "signed", |op| !op.attempts.is_empty()).await;
    assert_eq!(
        second.signing,
        Some(pb::operation::Signing::Evm(pb::EvmSigning { nonce: 1 }))
    );
    // Nonce 1 signed while nonce 0 is included: nothing else is in flight. (Counted from the
    // settled count instead, the included transaction would show as in flight.)
    let samples = scrape(stack.metrics_addr("signer-0")).await;
    assert_eq!(total(&samples, "sigcast_nonce_lag", &[]), 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_attempt_priced_under_the_head_s_base_fee_is_bumped_without_waiting_for_the_bump_period()
{
    // No bump by time within the test: only the chain's fees can prompt one.
    let stack = Stack::start(StackOptions {
        accounts: 1,
        fee_bump_after_ms: 3_600_000,
        ..Default::default()
    })
    .await;
    let node = submit_while_paused(&stack, "priced-out", 5_151).await;
    let sent = wait_for(&stack, "priced-out", "sent", |op| accepted(op, "")).await;
    assert!(
        !sent.attempts[0].max_fee_per_gas.is_empty(),
        "an EVM attempt records its fee cap: {sent:?}"
    );
    let signed_at: u128 = sent.attempts[0].max_fee_per_gas.parse().unwrap();
    // The market moves past it: the next block's base fee is ten times the attempt's cap
    // (as after a run of full blocks).
    let (bump, bump_cap) = bump_after_a_block_at(&stack, &node, "priced-out", signed_at * 10).await;
    assert!(
        bump_cap > signed_at * 10,
        "the bump is priced over the head's base fee: {bump_cap} against {}",
        signed_at * 10
    );
    confirmed_by_the_bump_alone(&stack, &node, "priced-out", &bump).await;
    let to: Address = recipient(0).parse().unwrap();
    assert_eq!(node.balance(to).await.unwrap(), U256::from(5_151u64));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_bump_is_priced_for_the_head_it_was_decided_at_when_the_signer_s_endpoint_lags_behind_it()
{
    // The signer reads the chain through a proxy of its own; the broadcaster reads the node.
    let stack = Stack::start(StackOptions {
        accounts: 1,
        fee_bump_after_ms: 3_600_000,
        signer_proxy: true,
        ..Default::default()
    })
    .await;
    let node = submit_while_paused(&stack, "behind", 5_152).await;
    let sent = wait_for(&stack, "behind", "sent", |op| accepted(op, "")).await;
    let signed_at: u128 = sent.attempts[0].max_fee_per_gas.parse().unwrap();
    // From now on the signer's endpoint answers the base fee the attempt was priced at, as one
    // still at that head would; the node's next block asks ten times the attempt's cap.
    let latest = node
        .read("eth_getBlockByNumber", serde_json::json!(["latest", false]))
        .await
        .unwrap();
    let stale_base_fee = sigcast_evm::base_fee(&latest).unwrap();
    stack
        .signer_proxy
        .as_ref()
        .unwrap()
        .set_stale_base_fee(Some(stale_base_fee));
    let head_base_fee = signed_at * 10;
    let (bump, bump_cap) = bump_after_a_block_at(&stack, &node, "behind", head_base_fee).await;
    assert!(
        bump_cap > head_base_fee,
        "the bump is priced over the head the broadcaster saw ({head_base_fee}), not for the \
         signer's endpoint's ({stale_base_fee}): {bump_cap}"
    );
    confirmed_by_the_bump_alone(&stack, &node, "behind", &bump).await;
}
