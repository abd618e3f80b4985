//! Hedged reads and single-path writes over a dead, a slow and a healthy endpoint.

use sigcast_e2e::{Anvil, FaultProxy, free_addr};
use sigcast_evm::EvmRpc;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reads_hedge_past_dead_and_slow_endpoints_and_each_write_goes_to_one() {
    let dir = tempfile::tempdir().unwrap();
    let anvil = Anvil::start(Some(1), dir.path());
    let dead = format!("http://{}", free_addr()); // nothing listens there
    let slow = FaultProxy::slow(anvil.addr, Duration::from_secs(3)).await;
    let healthy = FaultProxy::start(anvil.addr, 0.0, 0, Duration::ZERO).await; // counts, no faults
    // The slow endpoint is configured first: without hedging every read would wait for it.
    let pool = EvmRpc::new(
        &[slow.url.clone(), dead.clone(), healthy.url.clone()],
        Duration::from_secs(10),
    )
    .unwrap();

    const READS: usize = 20;
    for _ in 0..READS {
        assert_eq!(
            pool.chain_id()
                .await
                .expect("a read answers while one endpoint is up"),
            31337
        );
    }
    let (slow_reads, healthy_reads) = (slow.stats().forwarded, healthy.stats().forwarded);
    assert_eq!(
        healthy_reads, READS,
        "every read was answered by the healthy endpoint, reached by hedging"
    );
    assert!(
        slow_reads < READS,
        "the slow endpoint was demoted behind the healthy one ({slow_reads} reads went to it)"
    );

    const SENDS: u64 = 10;
    let mut reached = 0;
    for nonce in 0..SENDS {
        let attempt = pool
            .send_raw(
                &crate::direct::sign_transfer(
                    "0x00000000000000000000000000000000000e0d00",
                    1,
                    nonce,
                ),
                0,
            )
            .await;
        assert!(
            attempt.endpoint == healthy.url
                || attempt.endpoint == slow.url
                || attempt.endpoint == dead
        );
        if attempt.endpoint != dead {
            reached += 1;
        }
    }
    let sends_seen = slow.stats().sends + healthy.stats().sends;
    assert_eq!(
        sends_seen, reached,
        "each send went to exactly one endpoint: never hedged, never retried elsewhere"
    );
    assert_eq!(
        healthy.stats().sends,
        SENDS as usize,
        "sends go to the best-ranked endpoint"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_chain_whose_endpoints_are_down_at_start_does_not_stop_the_signer_serving_the_others() {
    // A second chain whose only endpoint is down when the signer starts (nothing listens).
    let down = format!("http://{}", free_addr());
    let stack = sigcast_e2e::Stack::start(sigcast_e2e::StackOptions {
        accounts: 1,
        signer_tables: format!("[[evm_chains]]\nchain_id = 1337\nrpc_urls = [\"{down}\"]\n"),
        ..Default::default()
    })
    .await;
    let mut client = stack.client().await;
    client
        .submit_operation(crate::evm::transfer(
            "on-the-live-chain",
            crate::evm::DEV[0],
            &crate::evm::recipient(0),
            1,
        ))
        .await
        .unwrap();
    let done = crate::evm::wait_terminal(
        &stack,
        &["on-the-live-chain".into()],
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(
        done["on-the-live-chain"].state(),
        sigcast_proto::pb::OperationState::Confirmed,
        "{}",
        stack.logs()
    );
}

/// One transfer from the first dev account through a broadcaster with two endpoints to the
/// node: the first one faulted by `fault` (its proxy), the second answering 300 ms late (so
/// that the first is ranked best). Returns the stack and the operation once terminal, which
/// must be CONFIRMED by its first and only attempt.
async fn one_transfer_past_a_faulty_first_endpoint(
    op_id: &str,
    fault: impl FnOnce(&FaultProxy),
) -> (sigcast_e2e::Stack, sigcast_proto::pb::Operation) {
    use crate::evm::{DEV, recipient, transfer, wait_terminal};
    let stack = sigcast_e2e::Stack::start(sigcast_e2e::StackOptions {
        accounts: 1,
        faults: Some((0.0, 0)),
        second_endpoint_lag: Some(Duration::from_millis(300)),
        ..Default::default()
    })
    .await;
    fault(stack.proxy.as_ref().unwrap());
    stack
        .client()
        .await
        .submit_operation(transfer(op_id, DEV[0], &recipient(0), 10_000))
        .await
        .unwrap();
    let mut done = wait_terminal(&stack, &[op_id.into()], Duration::from_secs(30)).await;
    let op = done.remove(op_id).unwrap();
    assert_eq!(
        op.state(),
        sigcast_proto::pb::OperationState::Confirmed,
        "{op:?}"
    );
    assert_eq!(op.attempts.len(), 1, "nothing new signed: {op:?}");
    assert!(
        stack.proxy.as_ref().unwrap().stats().sends >= 1,
        "sent to the best-ranked endpoint first"
    );
    (stack, op)
}

/// The best-ranked endpoint acknowledges every send and drops it (a full or private pool; an
/// unstaked Solana RPC does the same): the operation must not wait on it for good. Each send
/// of the same bytes goes to the next endpoint in turn, one endpoint per send.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sends_the_best_endpoint_acknowledges_and_drops_land_through_the_next() {
    let (stack, _) = one_transfer_past_a_faulty_first_endpoint("dropped", |first| {
        first.set_swallowing_sends(true)
    })
    .await;
    assert!(
        stack.second_proxy.as_ref().unwrap().stats().sends >= 1,
        "then to the next"
    );
    let node = EvmRpc::new(
        std::slice::from_ref(&stack.anvil.url),
        Duration::from_secs(5),
    )
    .unwrap();
    let count = node
        .read(
            "eth_getTransactionCount",
            serde_json::json!([crate::evm::DEV[0], "latest"]),
        )
        .await
        .unwrap();
    assert_eq!(count, "0x1", "one transaction on chain");
}

/// The best-ranked endpoint serves another chain for a while (a load balancer, a DNS name
/// moved) and refuses the transaction for its chain id. That refusal is the endpoint's: the
/// operation is valid on its own chain and must land there, not have its nonce filled (a gap
/// fill, a second attempt) and be REJECTED as never applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refusal_for_another_chain_s_id_is_the_endpoint_s_and_the_operation_lands() {
    one_transfer_past_a_faulty_first_endpoint("misrouted", |first| {
        first.set_refusing_sends(Some("invalid chain id for signer: have 1 want 31337"))
    })
    .await;
}

/// An endpoint of the signer moves to another chain after the start (a DNS name moved, a load
/// balancer re-pointed), one where the key has sent 50 transactions. The signer must not take
/// that count for the account's nonce: nonce 50 on the operation's own chain is a gap nobody
/// fills, and every operation of the account would wait for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_signer_takes_no_nonce_from_an_endpoint_that_moved_to_another_chain() {
    use crate::evm::{DEV, recipient, transfer, wait_terminal};
    let dir = tempfile::tempdir().unwrap();
    // Chain 31337 at first: the signer's start finds every endpoint serving its chain.
    let elsewhere = Anvil::start(None, dir.path());
    let rpc = EvmRpc::new(std::slice::from_ref(&elsewhere.url), Duration::from_secs(5)).unwrap();
    rpc.read("anvil_setNonce", serde_json::json!([DEV[0], "0x32"]))
        .await
        .unwrap();
    let stack = sigcast_e2e::Stack::start(sigcast_e2e::StackOptions {
        accounts: 1,
        signer_rpc_first: vec![elsewhere.url.clone()],
        // Its own chain's endpoint answers later: the moved one would answer every read first.
        signer_proxy: true,
        signer_proxy_lag: Some(Duration::from_millis(300)),
        ..Default::default()
    })
    .await;
    rpc.read("anvil_setChainId", serde_json::json!([1337]))
        .await
        .unwrap();
    assert_eq!(rpc.chain_id().await.unwrap(), 1337);
    stack
        .client()
        .await
        .submit_operation(transfer("moved", DEV[0], &recipient(0), 10_000))
        .await
        .unwrap();
    let done = wait_terminal(&stack, &["moved".into()], Duration::from_secs(30)).await;
    let op = &done["moved"];
    assert_eq!(
        op.state(),
        sigcast_proto::pb::OperationState::Confirmed,
        "{op:?}"
    );
    assert!(
        matches!(
            op.signing,
            Some(sigcast_proto::pb::operation::Signing::Evm(
                sigcast_proto::pb::EvmSigning { nonce: 0 }
            ))
        ),
        "{op:?}"
    );
}
