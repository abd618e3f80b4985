//! Nonce allocation and the interlock.

use crate::test_store;
use sigcast_store::accounts::{self, Allocation};

#[test]
fn nonces_are_serial_from_the_chain_then_the_store() {
    let t = test_store("nonces");
    let s = &t.store;
    let root = s.root().clone();
    let alloc = |op: &str, chain_nonce: u64| {
        s.run(|tx| accounts::allocate_nonce(tx, &root, "eip155:1", "0xA", op, chain_nonce))
            .unwrap()
    };
    assert_eq!(
        alloc("a", 5),
        Ok(Allocation {
            nonce: 5,
            external_gap: None
        }),
        "first nonce from the chain"
    );
    assert_eq!(
        alloc("b", 0),
        Ok(Allocation {
            nonce: 6,
            external_gap: None
        }),
        "then the store"
    );
    assert_eq!(
        alloc("c", 6),
        Ok(Allocation {
            nonce: 7,
            external_gap: None
        }),
        "a lagging chain is ignored"
    );
    assert_eq!(
        alloc("d", 10),
        Ok(Allocation {
            nonce: 10,
            external_gap: Some((8, 10))
        }),
        "a chain ahead of the store is reported"
    );
    assert_eq!(
        s.read(|tx| accounts::nonce_owner(tx, &root, "eip155:1", "0xA", 6))
            .unwrap()
            .as_deref(),
        Some("b")
    );
    assert_eq!(
        s.read(|tx| accounts::next_nonce(tx, &root, "eip155:1", "0xB"))
            .unwrap(),
        None,
        "per account"
    );
}

#[test]
fn concurrent_allocations_never_share_a_nonce() {
    let t = test_store("nonce-race");
    let threads: Vec<_> = (0..8)
        .map(|worker| {
            let store = t.store.clone();
            std::thread::spawn(move || {
                let root = store.root().clone();
                (0..25)
                    .map(|i| {
                        let op = format!("w{worker}-{i}");
                        store
                            .run(|tx| {
                                accounts::allocate_nonce(tx, &root, "eip155:1", "0xA", &op, 0)
                            })
                            .unwrap()
                            .unwrap()
                            .nonce
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut all: Vec<u64> = threads
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    all.sort_unstable();
    assert_eq!(all, (0..200).collect::<Vec<_>>());
}

#[test]
fn payloads_are_write_once() {
    let t = test_store("payloads");
    let s = &t.store;
    let root = s.root().clone();
    assert!(
        s.run(|tx| accounts::put_payload(tx, &root, "op", 1, b"signed-1"))
            .unwrap()
    );
    assert!(
        s.run(|tx| accounts::put_payload(tx, &root, "op", 1, b"signed-1"))
            .unwrap(),
        "same bytes: fine"
    );
    assert!(
        !s.run(|tx| accounts::put_payload(tx, &root, "op", 1, b"other"))
            .unwrap(),
        "other bytes: refused"
    );
    assert_eq!(
        s.read(|tx| accounts::payload(tx, &root, "op", 1))
            .unwrap()
            .as_deref(),
        Some(&b"signed-1"[..])
    );
}

#[test]
fn nonce_accounts_are_registered_per_key_and_held_by_one_operation() {
    let t = test_store("nonce-accounts");
    let s = &t.store;
    let root = s.root().clone();
    for (cluster, authority, account) in [
        ("localnet", "KeyA", "Nonce2"),
        ("localnet", "KeyA", "Nonce1"),
        ("localnet", "KeyB", "Nonce3"),
        ("devnet", "KeyA", "Nonce4"),
        ("localnet", "KeyA", "Nonce1"), // registering twice is harmless
    ] {
        s.run(|tx| accounts::register_nonce_account(tx, &root, cluster, authority, account))
            .unwrap();
    }
    assert_eq!(
        s.read(|tx| accounts::nonce_accounts(tx, &root, "localnet", "KeyA"))
            .unwrap(),
        ["Nonce1", "Nonce2"]
    );
    assert_eq!(
        s.read(|tx| accounts::all_nonce_accounts(tx, &root))
            .unwrap()
            .len(),
        4
    );
    assert_eq!(
        s.read(|tx| accounts::nonce_holder(tx, &root, "localnet", "Nonce1"))
            .unwrap(),
        None
    );
    s.run(|tx| accounts::hold_nonce_account(tx, &root, "localnet", "Nonce1", "op-1"))
        .unwrap();
    assert_eq!(
        s.read(|tx| accounts::nonce_holder(tx, &root, "localnet", "Nonce1"))
            .unwrap()
            .as_deref(),
        Some("op-1")
    );
    assert_eq!(
        s.read(|tx| accounts::nonce_holder(tx, &root, "devnet", "Nonce1"))
            .unwrap(),
        None,
        "holders are per cluster"
    );
}
