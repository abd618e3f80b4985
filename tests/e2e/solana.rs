//! The Solana test node itself: real runtime behind JSON-RPC, expiring blockhashes.

use base64::Engine;
use ed25519_dalek::{Signer, SigningKey};
use serde_json::{Value, json};
use sigcast_domain::{Lamports, SolanaPubkey, SolanaTransfer};
use sigcast_e2e::SolanaNode;
use sigcast_evm::EvmRpc;
use std::time::{Duration, Instant};

const SOL: u64 = 1_000_000_000;
const FEE: u64 = 5_000;

fn signed_transfer(key: &SigningKey, to: [u8; 32], lamports: u64, blockhash: &str) -> String {
    let transfer = SolanaTransfer {
        cluster: "localnet".into(),
        from: SolanaPubkey::from(key.verifying_key().to_bytes()),
        to: SolanaPubkey::from(to),
        lamports: Lamports(lamports),
    };
    let hash: [u8; 32] = bs58::decode(blockhash)
        .into_vec()
        .unwrap()
        .try_into()
        .unwrap();
    let message =
        sigcast_solana::transfer_message(&transfer, &sigcast_solana::Lifetime::Blockhash(hash), 0);
    let signature = key
        .sign(&sigcast_solana::message_bytes(&message))
        .to_bytes();
    let tx = sigcast_solana::assemble(message, &[signature]);
    base64::engine::general_purpose::STANDARD.encode(wincode::serialize(&tx).unwrap())
}

async fn rpc(pool: &EvmRpc, method: &'static str, params: Value) -> Value {
    pool.read(method, params)
        .await
        .unwrap_or_else(|e| panic!("{method}: {e}"))
}

async fn balance(pool: &EvmRpc, key: [u8; 32]) -> u64 {
    rpc(pool, "getBalance", json!([bs58::encode(key).into_string()])).await["value"]
        .as_u64()
        .unwrap()
}

async fn status(pool: &EvmRpc, signature: &str) -> Value {
    rpc(
        pool,
        "getSignatureStatuses",
        json!([[signature], { "searchTransactionHistory": true }]),
    )
    .await["value"][0]
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_test_node_lands_transfers_and_lets_blockhashes_expire() {
    let node = SolanaNode::start(Duration::from_millis(10)).await;
    let pool = EvmRpc::new(std::slice::from_ref(&node.url), Duration::from_secs(5)).unwrap();
    let payer = SigningKey::from_bytes(&[7; 32]);
    let payer_key = payer.verifying_key().to_bytes();
    let recipient = [9u8; 32];
    node.airdrop(payer_key, 10 * SOL);

    let latest = rpc(
        &pool,
        "getLatestBlockhash",
        json!([{ "commitment": "confirmed" }]),
    )
    .await;
    let blockhash = latest["value"]["blockhash"].as_str().unwrap().to_owned();
    let last_valid = latest["value"]["lastValidBlockHeight"].as_u64().unwrap();
    let tx = signed_transfer(&payer, recipient, SOL, &blockhash);
    let config = json!({ "encoding": "base64", "skipPreflight": true, "maxRetries": 0 });
    let signature = rpc(&pool, "sendTransaction", json!([tx, config])).await;
    let signature = signature.as_str().unwrap().to_owned();
    let landed = status(&pool, &signature).await;
    assert!(
        landed["err"].is_null() && landed["slot"].as_u64().is_some(),
        "{landed}"
    );
    assert_eq!(balance(&pool, recipient).await, SOL);
    assert_eq!(
        balance(&pool, payer_key).await,
        9 * SOL - FEE,
        "to the lamport, fee included"
    );
    let again = pool
        .read("sendTransaction", json!([tx, config]))
        .await
        .unwrap_err()
        .to_string();
    assert!(again.contains("already been processed"), "{again}");

    // Failing in execution (more than the balance): lands with its error.
    let fresh = rpc(&pool, "getLatestBlockhash", json!([])).await["value"]["blockhash"]
        .as_str()
        .unwrap()
        .to_owned();
    let too_much = signed_transfer(&payer, recipient, 100 * SOL, &fresh);
    let failed = rpc(&pool, "sendTransaction", json!([too_much, config])).await;
    let failed = status(&pool, failed.as_str().unwrap()).await;
    assert!(!failed["err"].is_null(), "landed with an error: {failed}");

    // Past its lastValidBlockHeight the first blockhash is dead: a transfer using it never lands.
    let deadline = Instant::now() + Duration::from_secs(30);
    while node.slot() <= last_valid {
        assert!(Instant::now() < deadline, "slots do not advance");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        rpc(&pool, "isBlockhashValid", json!([blockhash])).await["value"],
        false
    );
    let expired = signed_transfer(&payer, recipient, 2, &blockhash);
    let expired = rpc(&pool, "sendTransaction", json!([expired, config])).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        status(&pool, expired.as_str().unwrap()).await.is_null(),
        "never landed"
    );
    assert_eq!(balance(&pool, recipient).await, SOL, "nothing more arrived");
}

/// One of a cluster's endpoints serves another cluster (a load balancer, a DNS name moved)
/// and answers first. A blockhash of that cluster is valid nowhere on this one: signed over
/// it, a transaction would never land, and its expiry, counted in the other cluster's block
/// heights, might not come for a long time. Blockhashes (and nonce accounts) are read only
/// from endpoints serving the cluster's genesis hash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blockhash_is_read_only_from_an_endpoint_of_the_cluster() {
    let elsewhere = SolanaNode::start(Duration::from_millis(20)).await;
    // Far ahead of the cluster's own node, so that the slot tells which one answered.
    while elsewhere.slot() < 200 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let node = SolanaNode::start(Duration::from_millis(20)).await;
    // The cluster's own node answers late: the other one would answer first.
    let late = sigcast_e2e::FaultProxy::slow(node.addr, Duration::from_millis(300)).await;
    let rpc = sigcast_solana::SolanaRpc::new(
        &[elsewhere.url.clone(), late.url.clone()],
        Duration::from_secs(5),
    )
    .unwrap()
    .expecting_cluster("localnet", Some(&node.genesis_hash()));
    for _ in 0..3 {
        let latest = rpc.latest_blockhash().await.unwrap();
        assert!(
            latest.slot <= node.slot(),
            "read at slot {} from the other cluster (its own node is at {}, the other at {})",
            latest.slot,
            node.slot(),
            elsewhere.slot()
        );
    }
    // Its answers counted against it: the other cluster's endpoint is no longer asked first.
    use sigcast_jsonrpc::Endpoint as _;
    assert_eq!(
        rpc.ranked_endpoints()[0].label(),
        sigcast_jsonrpc::endpoint_label(&late.url)
    );

    // A cluster named by no genesis hash, one of its endpoints down: until every endpoint
    // answered alike, blockhashes are read as before the check, not refused.
    let unpinned = sigcast_solana::SolanaRpc::new(
        &[node.url.clone(), "http://127.0.0.1:1".into()],
        Duration::from_secs(5),
    )
    .unwrap()
    .expecting_cluster("localnet", None);
    unpinned
        .latest_blockhash()
        .await
        .expect("read while the cluster's genesis hash cannot be told");

    // Endpoints that answer different genesis hashes: one serves another cluster, and
    // nothing they answer is taken until the hash is configured.
    let disagreeing = sigcast_solana::SolanaRpc::new(
        &[node.url.clone(), elsewhere.url.clone()],
        Duration::from_secs(5),
    )
    .unwrap()
    .expecting_cluster("localnet", None);
    for _ in 0..2 {
        let refused = disagreeing
            .latest_blockhash()
            .await
            .unwrap_err()
            .to_string();
        assert!(refused.contains("genesis_hash"), "{refused}");
    }
    // Beside an endpoint that does not answer (the first configured): still a disagreement.
    let one_down = sigcast_solana::SolanaRpc::new(
        &[
            "http://127.0.0.1:1".into(),
            node.url.clone(),
            elsewhere.url.clone(),
        ],
        Duration::from_secs(5),
    )
    .unwrap()
    .expecting_cluster("localnet", None);
    let refused = one_down.latest_blockhash().await.unwrap_err().to_string();
    assert!(refused.contains("genesis_hash"), "{refused}");
}

/// While a cluster's genesis hash cannot be pinned (an endpoint down), the broadcaster's
/// check of each endpoint asks the others again at most once a try period, not at every
/// check: a pass checks every operation, and each check asked every endpoint (and waited on
/// one that never answers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unpinned_cluster_is_not_asked_for_its_genesis_at_every_check() {
    let node = SolanaNode::start(Duration::from_millis(20)).await;
    let counted = sigcast_e2e::FaultProxy::start(node.addr, 0.0, 0, Duration::ZERO).await;
    let rpc = sigcast_solana::SolanaRpc::new(
        &[counted.url.clone(), "http://127.0.0.1:1".into()],
        Duration::from_secs(5),
    )
    .unwrap()
    .expecting_cluster("localnet", None);
    let endpoint = rpc.ranked_endpoints().remove(0);
    for _ in 0..5 {
        assert!(!rpc.serves_cluster(&endpoint).await, "nothing pinned yet");
    }
    // Each check asks the endpoint itself once; the endpoints were asked all together once.
    assert_eq!(counted.stats().forwarded, 5 + 1);
}
