//! Solana operations end to end: the litesvm node, real signer, broadcaster and gateway.

use crate::evm::wait_terminal;
use crate::solana_node::SolanaNode;
use futures::StreamExt;
use serde_json::json;
use sigcast_e2e::{Stack, StackOptions};
use sigcast_evm::RpcPool;
use sigcast_proto::pb;
use std::time::Duration;

const SOL: u64 = 1_000_000_000;
const FEE: u64 = 5_000;

fn sol_transfer(op_id: &str, from: &str, to: &str, lamports: u64) -> pb::SubmitOperationRequest {
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

fn recipient(i: usize) -> String {
    bs58::encode([0xa0 + i as u8; 32]).into_string()
}

async fn balance(pool: &RpcPool, account: &str) -> u64 {
    let value = pool.read("getBalance", json!([account])).await.unwrap();
    value["value"].as_u64().unwrap()
}

fn key_bytes(account: &str) -> [u8; 32] {
    bs58::decode(account)
        .into_vec()
        .unwrap()
        .try_into()
        .unwrap()
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
    for (i, account) in stack.solana_accounts.iter().enumerate() {
        node.airdrop(key_bytes(account), 10 * SOL);
        // Recipients exist (rent-exempt) first: a transfer creating an account below the
        // rent-exempt minimum fails, as on any cluster.
        node.airdrop(key_bytes(&recipient(i)), SOL);
    }
    let planned: Vec<(String, usize, u64)> = (0..200)
        .map(|i| (format!("sol-{i:03}"), i % 4, 1_000 + i as u64))
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
    let ids: Vec<String> = planned.iter().map(|(id, ..)| id.clone()).collect();
    let done = wait_terminal(&stack, &ids, Duration::from_secs(180)).await;
    for op in done.values() {
        assert_eq!(
            op.state(),
            pb::OperationState::Confirmed,
            "{}: {:?}\n{}",
            op.op_id,
            op.error,
            stack.logs()
        );
        assert_eq!(
            op.result.as_ref().unwrap().execution_status(),
            pb::ExecutionStatus::Success
        );
    }
    let pool = RpcPool::new(std::slice::from_ref(&node.url), Duration::from_secs(5)).unwrap();
    for (sender, account) in stack.solana_accounts.iter().enumerate() {
        let sent: u64 = planned
            .iter()
            .filter(|(_, s, _)| *s == sender)
            .map(|(_, _, l)| l)
            .sum();
        assert_eq!(
            balance(&pool, &recipient(sender)).await,
            SOL + sent,
            "recipient of {account}"
        );
        assert_eq!(
            balance(&pool, account).await,
            10 * SOL - sent - 50 * FEE,
            "{account}: to the lamport, fees included"
        );
    }
}
