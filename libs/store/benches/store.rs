//! Micro-benchmarks of the store's hot operations on the embedded backend, each a committed
//! transaction as the services run it (WAL, synchronous=FULL: every commit is an fsync):
//! nonce allocation on one account, submit of a new operation, and the replay lookup — each
//! on an empty store and on one holding `SIGCAST_BENCH_STORED` operations (default
//! 1,000,000; filling it takes a minute or two).
//!
//! `cargo bench -p sigcast-store`

use criterion::{Criterion, criterion_group, criterion_main};
use sigcast_proto::pb;
use sigcast_store::operations;
use sigcast_store::{Store, StoreConfig, accounts};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

fn operation(op_id: &str, account: usize) -> pb::Operation {
    pb::Operation {
        op_id: op_id.into(),
        intent: Some(pb::Intent {
            kind: Some(pb::intent::Kind::EvmTransfer(pb::EvmTransfer {
                chain_id: 1,
                from: format!("0x{account:040x}"),
                to: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8".into(),
                value_wei: "1000000000000000000".into(),
            })),
        }),
        intent_fingerprint: format!("{op_id:0>64}"),
        state: pb::OperationState::Received.into(),
        chain: "eip155:1".into(),
        account: format!("0x{account:040x}"),
        ..Default::default()
    }
}

fn open(dir: &tempfile::TempDir) -> Store {
    Store::open(&StoreConfig::sqlite(dir.path().join("bench.db"))).unwrap()
}

/// Fills the store with `count` operations over 16 accounts, 10,000 per transaction.
fn fill(store: &Store, count: usize) {
    let root = store.root().clone();
    let now = SystemTime::now();
    for chunk in (0..count).collect::<Vec<_>>().chunks(10_000) {
        store
            .run(|tx| {
                for i in chunk {
                    operations::submit(
                        tx,
                        &root,
                        operation(&format!("stored-{i:08}"), i % 16),
                        now,
                    )?;
                }
                Ok(())
            })
            .unwrap();
    }
}

fn allocate_submit_and_replay(c: &mut Criterion, label: &str, store: &Store) {
    let root = store.root().clone();
    let op = AtomicU64::new(0);
    c.bench_function(&format!("nonce_allocation/one_account/{label}"), |b| {
        b.iter(|| {
            let id = format!("nonce-op-{label}-{}", op.fetch_add(1, Ordering::Relaxed));
            store
                .run(|tx| accounts::allocate_nonce(tx, &root, "eip155:1", "0xabc", &id, 0))
                .unwrap()
                .unwrap()
        })
    });
    let next = AtomicU64::new(0);
    c.bench_function(&format!("submit/{label}"), |b| {
        b.iter(|| {
            let id = format!("new-{label}-{}", next.fetch_add(1, Ordering::Relaxed));
            store
                .run(|tx| operations::submit(tx, &root, operation(&id, 3), SystemTime::now()))
                .unwrap()
        })
    });
    store
        .run(|tx| operations::submit(tx, &root, operation("replayed", 3), SystemTime::now()))
        .unwrap();
    c.bench_function(&format!("replay_lookup/{label}"), |b| {
        b.iter(|| {
            store
                .read(|tx| operations::get(tx, &root, black_box("replayed")))
                .unwrap()
                .expect("stored")
        })
    });
    // The same lookup as the gateway answers a replay: on the calling thread, without BEGIN
    // and COMMIT when the record is one value.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    c.bench_function(&format!("replay_point_read/{label}"), |b| {
        b.iter(|| {
            let root = root.clone();
            runtime
                .block_on(
                    store.read_point(move |tx| operations::get(tx, &root, black_box("replayed"))),
                )
                .unwrap()
                .expect("stored")
        })
    });
}

/// The gateway's replay lookup of a different stored operation each time, as a caller's
/// retries of many operations meet it: the record's pages are seldom in a connection's own
/// page cache.
fn replay_each_stored(c: &mut Criterion, label: &str, store: &Store, stored: usize) {
    let root = store.root().clone();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let next = AtomicU64::new(0);
    c.bench_function(&format!("replay_point_read_each/{label}"), |b| {
        b.iter(|| {
            let root = root.clone();
            let i = next.fetch_add(7_919, Ordering::Relaxed) as usize % stored;
            let id = format!("stored-{i:08}");
            runtime
                .block_on(store.read_point(move |tx| operations::get(tx, &root, &id)))
                .unwrap()
                .expect("stored")
        })
    });
}

fn benches(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    allocate_submit_and_replay(c, "empty", &store);

    let stored: usize = std::env::var("SIGCAST_BENCH_STORED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let big_dir = tempfile::tempdir().unwrap();
    let big = open(&big_dir);
    eprintln!("filling a store with {stored} operations…");
    fill(&big, stored);
    replay_each_stored(c, &format!("{stored}_stored"), &big, stored);
    allocate_submit_and_replay(c, &format!("{stored}_stored"), &big);
}

criterion_group! {
    name = store;
    config = Criterion::default().sample_size(30);
    targets = benches
}
criterion_main!(store);
