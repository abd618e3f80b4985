//! The experiment of the first seed article, side by side through the same fault proxy: a
//! naive retrier that re-signs with a fresh nonce on a failed send, and sigcast.

use crate::direct::naive_transfer;
use crate::evm::{DEV, assert_exactly_once, submit_transfers};
use sigcast_e2e::{Anvil, FaultProxy, Stack, StackOptions};
use sigcast_evm::{Address, EvmRpc, U256};
use std::time::Duration;

const RUNS: u64 = 5;
const TRANSFERS: usize = 10;
const FAULT_RATE: f64 = 0.35;
const VALUE: u64 = 1_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_naive_retrier_duplicates_where_sigcast_does_not() {
    let recipient = "0x00000000000000000000000000000000000b0b00";
    let mut rows = Vec::new();
    let mut naive_duplicates = 0;
    for run in 0..RUNS {
        let seed = 1_000 + run;

        // Naive: straight to the node through the proxy, re-signing on every failure.
        let dir = tempfile::tempdir().unwrap();
        let anvil = Anvil::start(Some(1), dir.path());
        let proxy =
            FaultProxy::start(anvil.addr, FAULT_RATE, seed, Duration::from_millis(2_500)).await;
        let via = EvmRpc::new(std::slice::from_ref(&proxy.url), Duration::from_secs(2)).unwrap();
        let mut sends = 0;
        for _ in 0..TRANSFERS {
            sends += naive_transfer(&via, recipient, VALUE).await;
        }
        tokio::time::sleep(Duration::from_secs(3)).await; // two blocks: everything sent is mined
        let node = EvmRpc::new(std::slice::from_ref(&anvil.url), Duration::from_secs(5)).unwrap();
        let delta = node
            .balance(recipient.parse::<Address>().unwrap())
            .await
            .unwrap();
        let count = node.nonce(DEV[0].parse().unwrap()).await.unwrap();
        let duplicate = delta > U256::from(VALUE * TRANSFERS as u64);
        naive_duplicates += usize::from(duplicate);
        rows.push(format!(
            "naive retrier | {delta} | {count} | {} | {sends} sends, {} faults",
            if duplicate { "yes" } else { "no" },
            proxy.stats().faults.len()
        ));

        // sigcast: the same proxy setup and seed, the same transfers.
        let stack = Stack::start(StackOptions {
            accounts: 1,
            faults: Some((FAULT_RATE, seed)),
            ..Default::default()
        })
        .await;
        let planned = submit_transfers(&stack, &format!("run{run}"), TRANSFERS, 1).await;
        assert_exactly_once(&stack, &planned, 1, Duration::from_secs(300)).await;
        let node = EvmRpc::new(
            std::slice::from_ref(&stack.anvil.url),
            Duration::from_secs(5),
        )
        .unwrap();
        let to: Address = crate::evm::recipient(0).parse().unwrap();
        let delta = node.balance(to).await.unwrap();
        let count = node.nonce(DEV[0].parse().unwrap()).await.unwrap();
        let expected: u64 = planned.iter().map(|(_, _, v)| v).sum();
        let stats = stack.proxy.as_ref().unwrap().stats();
        // Only a send the node took whose reply was lost tempts a resend: without one, this
        // run compared nothing.
        assert!(
            stats
                .faults
                .iter()
                .any(|f| *f != sigcast_e2e::Fault::DropBeforeForward),
            "sigcast run {run} met no lost reply: {:?}",
            stats.faults
        );
        rows.push(format!(
            "sigcast | {delta} | {count} | {} | expected {expected}; {} sends, {} faults",
            if delta > U256::from(expected) {
                "yes"
            } else {
                "no"
            },
            stats.sends,
            stats.faults.len()
        ));
    }
    println!("Variant | recipient delta | sender tx count | duplicate observed | notes");
    for row in &rows {
        println!("{row}");
    }
    // sigcast's side is asserted by assert_exactly_once in every run; the naive side must show
    // the failure mode, or this comparison proves nothing.
    assert!(
        naive_duplicates > 0,
        "the naive retrier never duplicated: the proxy is not faulting sends\n{}",
        rows.join("\n")
    );
}
