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
