//! Several processes sharing one store, each incrementing one counter in its own
//! transactions (`examples/counter_child.rs`, built by `cargo test`).

use crate::kv::read_counter;
use crate::test_store;
use sigcast_store::Backend;
use std::process::Command;

const PROCESSES: usize = 4;
const INCREMENTS: usize = 1_000;

#[test]
fn four_processes_increment_one_counter_exactly() {
    let t = test_store("multiprocess");
    let (backend, location) = match t.config.backend {
        Backend::Sqlite => ("sqlite", t.config.path.display().to_string()),
        Backend::Fdb => (
            "fdb",
            t.config
                .cluster_file
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
        ),
    };
    // target/<profile>/deps/it-… → target/<profile>/examples/counter_child
    let exe = std::env::current_exe().unwrap();
    let child_bin = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples")
        .join("counter_child");
    assert!(
        child_bin.exists(),
        "{} missing: cargo test builds it",
        child_bin.display()
    );
    let children: Vec<_> = (0..PROCESSES)
        .map(|_| {
            Command::new(&child_bin)
                .args([
                    backend,
                    &location,
                    &t.config.namespace,
                    &INCREMENTS.to_string(),
                ])
                .spawn()
                .expect("spawn child")
        })
        .collect();
    for mut child in children {
        assert!(child.wait().unwrap().success(), "a child process failed");
    }
    assert_eq!(read_counter(&t.store), (PROCESSES * INCREMENTS) as u64);
}

/// The child binary built beside this test.
fn counter_child() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples")
        .join("counter_child")
}

#[test]
fn processes_opening_a_fresh_store_at_the_same_instant_all_start() {
    // A Pod starts its containers together on an empty volume: every service opens (and so
    // creates) the same new SQLite file at once. None may exit with "database is locked".
    if super::fdb_cluster_file().is_some() {
        return; // a FoundationDB cluster has no file to create
    }
    for round in 0..10 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fresh.db");
        let children: Vec<_> = (0..6)
            .map(|_| {
                Command::new(counter_child())
                    .args(["sqlite", path.to_str().unwrap(), "fresh", "1"])
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .expect("spawn child")
            })
            .collect();
        for child in children {
            let out = child.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "round {round}: a process failed to open a fresh store: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let store = sigcast_store::Store::open(&sigcast_store::StoreConfig {
            namespace: "fresh".into(),
            ..sigcast_store::StoreConfig::sqlite(&path)
        })
        .unwrap();
        assert_eq!(read_counter(&store), 6, "round {round}");
    }
}
