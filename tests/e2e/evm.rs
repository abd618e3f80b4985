//! EVM operations end to end: real anvil, real signer, broadcaster and gateway processes.

use futures::StreamExt;
use sigcast_e2e::{Stack, StackOptions};
use sigcast_evm::{Address, RpcPool, U256};
use sigcast_proto::pb;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// anvil's first dev accounts (their keys are imported by the stack).
const DEV: [&str; 4] = [
    "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266",
    "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
    "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC",
    "0x90F79bf6EB2c4f870365E785982E1f101E93b906",
];

fn recipient(i: usize) -> String {
    format!("0x{:040x}", 0xbeef_0000 + i)
}

fn transfer(op_id: &str, from: &str, to: &str, value: u64) -> pb::SubmitOperationRequest {
    pb::SubmitOperationRequest {
        op_id: op_id.into(),
        intent: Some(pb::Intent {
            kind: Some(pb::intent::Kind::EvmTransfer(pb::EvmTransfer {
                chain_id: 31337,
                from: from.into(),
                to: to.into(),
                value_wei: value.to_string(),
            })),
        }),
    }
}

/// Waits until every listed operation is terminal; returns them by op_id.
async fn wait_terminal(stack: &Stack, op_ids: &[String], timeout: Duration) -> HashMap<String, pb::Operation> {
    let mut client = stack.client().await;
    let deadline = Instant::now() + timeout;
    loop {
        let mut done = HashMap::new();
        for op_id in op_ids {
            let op = client
                .get_operation(pb::GetOperationRequest { op_id: op_id.clone() })
                .await
                .expect("get")
                .into_inner()
                .operation
                .unwrap();
            if matches!(
                op.state(),
                pb::OperationState::Confirmed | pb::OperationState::Rejected | pb::OperationState::Cancelled
            ) {
                done.insert(op_id.clone(), op);
            }
        }
        if done.len() == op_ids.len() {
            return done;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {} operations terminal after {timeout:?}\n{}",
            done.len(),
            op_ids.len(),
            stack.logs()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_transfers_over_four_accounts_confirm_exactly() {
    let stack = Stack::start(StackOptions::default()).await;
    let client = stack.client().await;
    let ops: Vec<(String, usize, u64)> = (0..200).map(|i| (format!("xfer-{i:03}"), i % 4, 1_000 + i as u64)).collect();
    let submits = futures::stream::iter(ops.clone())
        .map(|(op_id, sender, value)| {
            let mut client = client.clone();
            async move { client.submit_operation(transfer(&op_id, DEV[sender], &recipient(sender), value)).await }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
    if let Some(Err(status)) = submits.iter().find(|r| r.is_err()) {
        panic!("a submit failed: {status:?}");
    }

    let op_ids: Vec<String> = ops.iter().map(|(id, ..)| id.clone()).collect();
    let done = wait_terminal(&stack, &op_ids, Duration::from_secs(180)).await;
    for op in done.values() {
        assert_eq!(op.state(), pb::OperationState::Confirmed, "{}: {:?}", op.op_id, op.error);
        assert_eq!(op.result.as_ref().unwrap().execution_status(), pb::ExecutionStatus::Success);
    }

    let chain = RpcPool::new(std::slice::from_ref(&stack.anvil.url), Duration::from_secs(5)).unwrap();
    for (sender, account) in DEV.iter().enumerate() {
        let address: Address = account.parse().unwrap();
        assert_eq!(chain.nonce(address).await.unwrap(), 50, "sender {account}: exactly 50 transactions");
        let expected: u64 = ops.iter().filter(|(_, s, _)| *s == sender).map(|(_, _, v)| v).sum();
        let to: Address = recipient(sender).parse().unwrap();
        assert_eq!(chain.balance(to).await.unwrap(), U256::from(expected), "recipient of {account}");
    }
    // Each operation's nonce is its own: 4 accounts × nonces 0..50, none twice.
    let mut nonces: Vec<(String, u64)> = done
        .values()
        .map(|op| match op.signing {
            Some(pb::operation::Signing::Evm(ref evm)) => (op.account.clone(), evm.nonce),
            _ => panic!("{} has no nonce", op.op_id),
        })
        .collect();
    nonces.sort();
    nonces.dedup();
    assert_eq!(nonces.len(), 200);
}
