//! Solana operations end to end: the litesvm node, real signer, broadcaster and gateway.

use crate::evm::{wait_all_confirmed, wait_terminal};
use futures::StreamExt;
use serde_json::json;
use sigcast_e2e::SolanaNode;
use sigcast_e2e::{Stack, StackOptions};
use sigcast_evm::RpcPool;
use sigcast_proto::pb;
use std::time::Duration;

pub(crate) const SOL: u64 = 1_000_000_000;
pub(crate) const FEE: u64 = 5_000;

pub(crate) fn sol_transfer(
    op_id: &str,
    from: &str,
    to: &str,
    lamports: u64,
) -> pb::SubmitOperationRequest {
    pb::SubmitOperationRequest {
        op_id: op_id.into(),
        intent: Some(pb::Intent {
            kind: Some(pb::intent::Kind::SolanaTransfer(pb::SolanaTransfer {
                cluster: "localnet".into(),
                from: from.into(),
                to: to.into(),
                lamports: lamports.to_string(),
            })),
        }),
    }
}

pub(crate) fn recipient(i: usize) -> String {
    bs58::encode([0xa0 + i as u8; 32]).into_string()
}

pub(crate) async fn balance(pool: &RpcPool, account: &str) -> u64 {
    let value = pool.read("getBalance", json!([account])).await.unwrap();
    value["value"].as_u64().unwrap()
}

pub(crate) fn key_bytes(account: &str) -> [u8; 32] {
    bs58::decode(account)
        .into_vec()
        .unwrap()
        .try_into()
        .unwrap()
}

/// Funds the stack's Solana keys (10 SOL) and their recipients (1 SOL, so transfers to them
/// never create an account below the rent-exempt minimum), then submits `count` transfers
/// spread over the keys.
async fn fund_and_submit(
    node: &SolanaNode,
    stack: &Stack,
    prefix: &str,
    count: usize,
) -> Vec<(String, usize, u64)> {
    for (i, account) in stack.solana_accounts.iter().enumerate() {
        node.airdrop(key_bytes(account), 10 * SOL);
        node.airdrop(key_bytes(&recipient(i)), SOL);
    }
    submit_numbered(stack, prefix, 0..count).await
}

/// Submits transfers numbered `numbers`, round robin over the stack's keys, each to its key's
/// recipient: operation `{prefix}-{i}` sends `1,000 + i` lamports. Returns them as planned
/// for [`assert_exactly_once_on_solana`].
async fn submit_numbered(
    stack: &Stack,
    prefix: &str,
    numbers: std::ops::Range<usize>,
) -> Vec<(String, usize, u64)> {
    let keys = stack.solana_accounts.len();
    let planned: Vec<(String, usize, u64)> = numbers
        .map(|i| (format!("{prefix}-{i:04}"), i % keys, 1_000 + i as u64))
        .collect();
    let client = stack.client().await;
    let results = futures::stream::iter(planned.clone())
        .map(|(op_id, sender, lamports)| {
            let mut client = client.clone();
            let from = stack.solana_accounts[sender].clone();
            async move {
                client
                    .submit_operation(sol_transfer(&op_id, &from, &recipient(sender), lamports))
                    .await
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
    if let Some(Err(status)) = results.iter().find(|r| r.is_err()) {
        panic!("a submit failed: {status:?}");
    }
    planned
}

/// Every operation CONFIRMED with success; every recipient received exactly its transfers;
/// every key paid exactly its transfers plus one fee per operation: nothing lost, nothing
/// landed twice.
async fn assert_exactly_once_on_solana(
    node: &SolanaNode,
    stack: &Stack,
    planned: &[(String, usize, u64)],
    timeout: Duration,
) {
    let ids: Vec<String> = planned.iter().map(|(id, ..)| id.clone()).collect();
    wait_all_confirmed(stack, &ids, timeout).await;
    let pool = RpcPool::new(std::slice::from_ref(&node.url), Duration::from_secs(5)).unwrap();
    for (sender, account) in stack.solana_accounts.iter().enumerate() {
        let mine: Vec<_> = planned.iter().filter(|(_, s, _)| *s == sender).collect();
        let sent: u64 = mine.iter().map(|(_, _, l)| l).sum();
        assert_eq!(
            balance(&pool, &recipient(sender)).await,
            SOL + sent,
            "recipient of {account}"
        );
        assert_eq!(
            balance(&pool, account).await,
            10 * SOL - sent - mine.len() as u64 * FEE,
            "{account}: to the lamport, one fee per operation"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_sol_transfers_over_four_keys_confirm_exactly_to_the_lamport() {
    let node = SolanaNode::start(Duration::from_millis(50)).await;
    let stack = Stack::start(StackOptions {
        accounts: 1,
        solana_rpc: Some(node.url.clone()),
        solana_accounts: 4,
        ..Default::default()
    })
    .await;
    let planned = fund_and_submit(&node, &stack, "sol", 200).await;
    assert_exactly_once_on_solana(&node, &stack, &planned, Duration::from_secs(180)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn five_hundred_sol_transfers_through_a_faulty_proxy_land_exactly_once() {
    let seed = std::env::var("SIGCAST_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_u64);
    println!("fault seed {seed}");
    let node = SolanaNode::start(Duration::from_millis(50)).await;
    let proxy =
        sigcast_e2e::FaultProxy::start(node.addr, 0.35, seed, Duration::from_millis(2_500)).await;
    let stack = Stack::start(StackOptions {
        accounts: 1,
        solana_rpc: Some(node.url.clone()),
        solana_broadcaster_rpc: Some(proxy.url.clone()),
        solana_accounts: 4,
        ..Default::default()
    })
    .await;
    let planned = fund_and_submit(&node, &stack, "faulty-sol", 500).await;
    assert_exactly_once_on_solana(&node, &stack, &planned, Duration::from_secs(600)).await;
    let stats = proxy.stats();
    println!(
        "proxy: {} sends, {} faulted",
        stats.sends,
        stats.faults.len()
    );
    assert!(
        stats.faults.len() * 100 >= stats.sends * 25,
        "faults on a sizeable share of sends: {stats:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_nine_of_signer_and_broadcaster_during_sol_transfers_loses_and_duplicates_nothing() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x0c0ffee);
    let node = SolanaNode::start(Duration::from_millis(50)).await;
    let mut stack = Stack::start(StackOptions {
        accounts: 1,
        solana_rpc: Some(node.url.clone()),
        solana_accounts: 4,
        ..Default::default()
    })
    .await;
    let mut planned = fund_and_submit(&node, &stack, "killed-sol", 1_500).await;
    for _kill in 0..12 {
        tokio::time::sleep(Duration::from_millis(rng.gen_range(20..200))).await;
        // Only while operations are unfinished (to be signed, sent or settled): a kill of an
        // idle stack proves nothing. However fast the machine, the work does not run out
        // before the kills: once the stack has finished it, the next 300 transfers come (it
        // once finished 1,500 before the tenth kill).
        if crate::evm::unfinished(&stack).await == 0 {
            let next = planned.len();
            planned.extend(submit_numbered(&stack, "killed-sol", next..next + 300).await);
            assert!(crate::evm::unfinished(&stack).await > 0);
        }
        let service = if rng.gen_bool(0.5) {
            &mut stack.signers[0]
        } else {
            &mut stack.broadcasters[0]
        };
        service.kill9();
        tokio::time::sleep(Duration::from_millis(rng.gen_range(0..300))).await;
        service.restart().await;
    }
    println!("{} transfers submitted around 12 kills", planned.len());
    assert_exactly_once_on_solana(&node, &stack, &planned, Duration::from_secs(600)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_outage_past_the_blockhash_lifetime_re_signs_exactly_once_after_expiry_is_proven() {
    // 20 ms slots: a blockhash lives 3 s.
    let (node, proxy, stack, from) = behind_a_proxy(Duration::from_millis(20), 1_000).await;

    // The broadcaster's node vanishes (the signer still reads blockhashes), and stays away
    // until the first blockhash is long dead.
    signed_then_expired(&node, &proxy, &stack, &from, "through-outage").await;
    assert_eq!(
        get(&stack, "through-outage").await.attempts.len(),
        1,
        "nothing re-signed during the outage"
    );
    proxy.set_down(false);

    let done = wait_terminal(&stack, &["through-outage".into()], Duration::from_secs(60)).await;
    let op = &done["through-outage"];
    assert_confirmed_by_one_resign(&stack, op);
    let pool = RpcPool::new(std::slice::from_ref(&node.url), Duration::from_secs(5)).unwrap();
    assert_eq!(
        balance(&pool, &recipient(0)).await,
        SOL + 4_321,
        "paid once"
    );
    // The re-sign raised the priority fee (attempt n pays n × 1,000 micro-lamports per CU).
    let store = sigcast_store::Store::open(&sigcast_store::StoreConfig::sqlite(
        stack.dir.path().join("sigcast.db"),
    ))
    .unwrap();
    let root = store.root().clone();
    let prices: Vec<u64> = [1, 2]
        .into_iter()
        .map(|attempt| {
            let wire = store
                .read(|tx| sigcast_store::accounts::payload(tx, &root, "through-outage", attempt))
                .unwrap()
                .unwrap();
            sigcast_solana::compute_unit_price(&sigcast_solana::from_wire(&wire).unwrap().message)
        })
        .collect();
    assert_eq!(prices, [1_000, 2_000]);
    let paid = 10 * SOL - 4_321 - balance(&pool, &from).await;
    assert!(
        (FEE..2 * FEE).contains(&paid),
        "one transaction's fee, priority included: {paid}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_transaction_that_fails_on_chain_is_confirmed_with_the_failure_and_not_retried() {
    let node = SolanaNode::start(Duration::from_millis(50)).await;
    let stack = Stack::start(StackOptions {
        accounts: 1,
        solana_rpc: Some(node.url.clone()),
        solana_accounts: 1,
        ..Default::default()
    })
    .await;
    let from = stack.solana_accounts[0].clone();
    node.airdrop(key_bytes(&from), SOL);
    let mut client = stack.client().await;
    // More than the balance: it lands and fails in execution.
    client
        .submit_operation(sol_transfer("overdraft", &from, &recipient(1), 5 * SOL))
        .await
        .unwrap();
    let done = wait_terminal(&stack, &["overdraft".into()], Duration::from_secs(60)).await;
    let op = &done["overdraft"];
    assert_eq!(op.state(), pb::OperationState::Confirmed, "{op:?}");
    assert_eq!(
        op.result.as_ref().unwrap().execution_status(),
        pb::ExecutionStatus::Failed
    );
    assert_eq!(op.error.as_ref().unwrap().reason, "EXECUTION_FAILED");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let again = get(&stack, "overdraft").await;
    assert_eq!(again.attempts.len(), 1, "never retried");
    assert_eq!(
        again.revision, op.revision,
        "terminal: nothing changes after"
    );
}

/// CONFIRMED by its second signature, made after proof that the first could never land.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_re_sign_the_signer_refuses_after_a_proven_expiry_rejects_the_operation_on_the_proof() {
    // The first signature's blockhash dies during an outage; meanwhile the key's policy
    // changed (or the rules did, with an upgrade), and the signer refuses the re-sign. The
    // proof shows nothing landed or can: REJECTED, not a refusal asked again every pass.
    let (node, proxy, mut stack, from) = behind_a_proxy(Duration::from_millis(20), 0).await;

    let first = signed_then_expired(&node, &proxy, &stack, &from, "refused-resign").await;
    stack.add_signer_settings(
        0,
        "[[policies]]\naccount = \"*\"\nmax_lamports = \"1000\"\n",
    );
    stack.signers[0].restart().await;
    proxy.set_down(false);

    let done = wait_terminal(&stack, &["refused-resign".into()], Duration::from_secs(60)).await;
    let op = &done["refused-resign"];
    assert_eq!(
        op.state(),
        pb::OperationState::Rejected,
        "{op:?}\n{}",
        stack.logs()
    );
    let error = op.error.as_ref().unwrap();
    assert_eq!(error.reason, "SIGNER_REFUSED");
    assert!(error.message.contains("max_lamports"), "{}", error.message);
    let evidence = op.evidence.as_ref().expect("the proof it rests on");
    assert_eq!(
        evidence.last_valid_block_height,
        first.last_valid_block_height
    );
    assert!(
        evidence.head > first.last_valid_block_height,
        "{evidence:?}"
    );
    assert_eq!(op.attempts.len(), 1, "nothing re-signed");
    let pool = RpcPool::new(std::slice::from_ref(&node.url), Duration::from_secs(5)).unwrap();
    assert_eq!(balance(&pool, &recipient(0)).await, SOL, "nothing paid");
    assert_eq!(balance(&pool, &from).await, 10 * SOL, "no fee either");
}

/// A node of `slot`-long slots, a fault proxy between it and the broadcaster, and a stack
/// holding one Solana key (10 SOL; recipient 0 holds 1 SOL) that signs with a priority fee of
/// `compute_unit_price`: the node, the proxy, the stack and the key.
pub(crate) async fn behind_a_proxy(
    slot: Duration,
    compute_unit_price: u64,
) -> (SolanaNode, sigcast_e2e::FaultProxy, Stack, String) {
    let node = SolanaNode::start(slot).await;
    let proxy = sigcast_e2e::FaultProxy::start(node.addr, 0.0, 0, Duration::ZERO).await;
    let stack = Stack::start(StackOptions {
        accounts: 1,
        solana_rpc: Some(node.url.clone()),
        solana_broadcaster_rpc: Some(proxy.url.clone()),
        solana_accounts: 1,
        solana_compute_unit_price: compute_unit_price,
        ..Default::default()
    })
    .await;
    let from = stack.solana_accounts[0].clone();
    node.airdrop(key_bytes(&from), 10 * SOL);
    node.airdrop(key_bytes(&recipient(0)), SOL);
    (node, proxy, stack, from)
}

/// With the broadcaster's node behind `proxy` down, submits `op_id` (4,321 lamports from
/// `from` to recipient 0), waits for its first signature, then until its blockhash is long
/// dead (20 slots past its last valid height): that signature's lifetime.
async fn signed_then_expired(
    node: &SolanaNode,
    proxy: &sigcast_e2e::FaultProxy,
    stack: &Stack,
    from: &str,
    op_id: &str,
) -> pb::SolanaSigning {
    proxy.set_down(true);
    stack
        .client()
        .await
        .submit_operation(sol_transfer(op_id, from, &recipient(0), 4_321))
        .await
        .unwrap();
    let signed = wait_state(stack, op_id, |op| !op.attempts.is_empty()).await;
    let Some(pb::operation::Signing::Solana(first)) = signed.signing else {
        panic!("{signed:?}")
    };
    while node.slot() <= first.last_valid_block_height + 20 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    first
}

pub(crate) fn assert_confirmed_by_one_resign(stack: &Stack, op: &pb::Operation) {
    assert_eq!(
        op.state(),
        pb::OperationState::Confirmed,
        "{op:?}\n{}",
        stack.logs()
    );
    assert_eq!(
        op.attempts.len(),
        2,
        "re-signed exactly once: {:?}",
        op.attempts
    );
    assert_eq!(op.attempts[1].reason, "resign");
    assert_eq!(op.result.as_ref().unwrap().tx_id, op.attempts[1].tx_id);
}

pub(crate) async fn get(stack: &Stack, op_id: &str) -> pb::Operation {
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

pub(crate) async fn wait_state(
    stack: &Stack,
    op_id: &str,
    ready: impl Fn(&pb::Operation) -> bool,
) -> pb::Operation {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let op = get(stack, op_id).await;
        if ready(&op) {
            return op;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{op_id}: {op:?}\n{}",
            stack.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancelled_blockhash_operation_is_not_sent_again_and_is_cancelled_once_expired() {
    // 60 ms slots: a blockhash lives 9 s, the broadcaster resends every 3 s. Every send is
    // lost on the way to the node, so the operation stays in flight until it is cancelled;
    // its bytes left the store and can land until the blockhash expires, so after the cancel
    // they must not be sent again.
    let (node, proxy, stack, from) = behind_a_proxy(Duration::from_millis(60), 0).await;
    proxy.set_losing_sends(true);
    let mut client = stack.client().await;
    client
        .submit_operation(sol_transfer("cancelled", &from, &recipient(0), 1_234))
        .await
        .unwrap();
    let sent = wait_state(&stack, "cancelled", |op| {
        op.state() == pb::OperationState::Sent
    })
    .await;
    let Some(pb::operation::Signing::Solana(signing)) = sent.signing.clone() else {
        panic!("{sent:?}")
    };
    client
        .cancel_operation(pb::CancelOperationRequest {
            op_id: "cancelled".into(),
        })
        .await
        .unwrap();
    let sends_at_cancel = proxy.stats().sends;
    assert!(sends_at_cancel >= 1);
    // The blockhash lives on for seconds after the cancel: resends would come every 3 s.
    let done = wait_terminal(&stack, &["cancelled".into()], Duration::from_secs(60)).await;
    let op = &done["cancelled"];
    assert_eq!(op.state(), pb::OperationState::Cancelled, "{op:?}");
    assert!(
        node.slot() > signing.last_valid_block_height,
        "cancelled only once the blockhash expired"
    );
    assert_eq!(
        proxy.stats().sends,
        sends_at_cancel,
        "the cancelled operation's bytes were sent again after the cancel"
    );
    let evidence = op.evidence.as_ref().expect("the proof of expiry is stored");
    assert!(evidence.head > evidence.last_valid_block_height);
    assert_eq!(evidence.commitment, "finalized");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_endpoint_whose_history_misses_the_signing_slot_never_proves_expiry() {
    // The blockhash expires during an outage; the node that comes back keeps no history from
    // before the signature: its empty statuses prove nothing, so nothing is re-signed until
    // an endpoint whose history reaches the signing slot shows the expiry.
    let (node, proxy, stack, from) = behind_a_proxy(Duration::from_millis(20), 0).await;
    let first = signed_then_expired(&node, &proxy, &stack, &from, "pruned").await;
    assert!(first.signing_slot > 0, "the signing slot is recorded");
    node.prune_history_before(first.signing_slot + 1);
    proxy.set_down(false);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let op = get(&stack, "pruned").await;
    assert_eq!(
        (op.state(), op.attempts.len()),
        (pb::OperationState::Sent, 1),
        "re-signed on an endpoint that cannot know: {op:?}"
    );
    // What it waits for is counted.
    let samples = crate::observability::scrape(stack.metrics_addr("broadcaster-0")).await;
    let waits = crate::observability::total(
        &samples,
        "sigcast_checks_undecided_total",
        &["chain=\"solana:localnet\"", "reason=\"history_too_short\""],
    );
    assert!(waits >= 1.0, "{samples:?}");
    node.prune_history_before(0);
    let done = wait_terminal(&stack, &["pruned".into()], Duration::from_secs(60)).await;
    assert_confirmed_by_one_resign(&stack, &done["pruned"]);
}

/// An instruction list whose transaction cannot fit a Solana packet. Past it on its own: refused
/// at submit. Past it only with what the signer adds (its priority fee): refused by the signer,
/// REJECTED with the reason. Signed, every send would be refused, and a refused send on Solana
/// says nothing: the operation would be re-signed at every expiry, for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_instruction_list_past_a_packet_is_refused_at_submit_or_by_the_signer() {
    let node = SolanaNode::start(Duration::from_millis(50)).await;
    let stack = Stack::start(StackOptions {
        accounts: 1,
        solana_rpc: Some(node.url.clone()),
        solana_accounts: 1,
        solana_compute_unit_price: 1_000,
        ..Default::default()
    })
    .await;
    let payer = stack.solana_accounts[0].clone();
    node.airdrop(key_bytes(&payer), SOL);
    // One instruction of `data` bytes to a program naming no account: 170 bytes more than its
    // data as a bare transaction; the priority fee's instruction adds 44.
    let list = |op_id: &str, data: usize| pb::SubmitOperationRequest {
        op_id: op_id.into(),
        intent: Some(pb::Intent {
            kind: Some(pb::intent::Kind::SolanaInstructions(
                pb::SolanaInstructions {
                    cluster: "localnet".into(),
                    fee_payer: payer.clone(),
                    instructions: vec![pb::SolanaInstruction {
                        program_id: bs58::encode([7u8; 32]).into_string(),
                        accounts: Vec::new(),
                        data: vec![1; data],
                    }],
                },
            )),
        }),
    };
    let mut client = stack.client().await;
    let refused = client
        .submit_operation(list("past-a-packet", 1_100))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
    assert!(
        refused
            .message()
            .contains("intent.solana_instructions.instructions")
            && refused.message().contains("1270 bytes"),
        "{refused:?}"
    );

    client
        .submit_operation(list("past-with-its-fee", 1_040))
        .await
        .unwrap();
    let done = wait_terminal(
        &stack,
        &["past-with-its-fee".into()],
        Duration::from_secs(30),
    )
    .await;
    let op = &done["past-with-its-fee"];
    assert_eq!(op.state(), pb::OperationState::Rejected, "{op:?}");
    let error = op.error.as_ref().unwrap();
    assert_eq!(error.reason, "SIGNER_REFUSED", "{error:?}");
    assert!(error.message.contains("1254 bytes"), "{error:?}");
    assert!(op.attempts.is_empty(), "nothing signed: {op:?}");

    // One past a packet on its own, recorded before the gateway refused such lists (an older
    // release, a replica not upgraded yet): the signer refuses it too, and it ends.
    let stored = list("recorded-before", 1_100);
    let intent = sigcast_proto::intent_from_proto("intent", stored.intent.as_ref(), None).unwrap();
    let store = sigcast_store::Store::open(&sigcast_store::StoreConfig::sqlite(
        stack.dir.path().join("sigcast.db"),
    ))
    .unwrap();
    let root = store.root().clone();
    let record = sigcast_proto::new_operation(
        &sigcast_domain::OpId::parse(&stored.op_id).unwrap(),
        &intent,
    );
    store
        .run(|tx| {
            sigcast_store::operations::submit(
                tx,
                &root,
                record.clone(),
                std::time::SystemTime::now(),
            )
            .map(drop)
        })
        .unwrap();
    let done = wait_terminal(&stack, &["recorded-before".into()], Duration::from_secs(30)).await;
    let op = &done["recorded-before"];
    assert_eq!(op.state(), pb::OperationState::Rejected, "{op:?}");
    assert!(
        op.error.as_ref().unwrap().message.contains("1314 bytes"),
        "with the signer's priority fee: {op:?}"
    );
}
