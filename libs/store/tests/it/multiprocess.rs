//! Several processes sharing one store: each increments one counter in its own transactions.
//!
//! The children are this test binary run again with `SIGCAST_STORE_CHILD` set, so they run
//! exactly the store code under test.

use crate::kv::{increment, read_counter};
use crate::test_store;
use sigcast_store::{Backend, Store, StoreConfig};
use std::process::{Command, Stdio};

const PROCESSES: usize = 4;
const INCREMENTS: usize = 1_000;

#[test]
fn four_processes_increment_one_counter_exactly() {
    let t = test_store("multiprocess");
    let (backend, location) = match t.config.backend {
        Backend::Sqlite => ("sqlite", t.config.path.display().to_string()),
        Backend::Fdb => {
            ("fdb", t.config.cluster_file.as_ref().map(|p| p.display().to_string()).unwrap_or_default())
        }
    };
    let children: Vec<_> = (0..PROCESSES)
        .map(|_| {
            Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "multiprocess::child_increments", "--test-threads=1"])
                .stdout(Stdio::null())
                .env("SIGCAST_STORE_CHILD", format!("{backend}|{location}|{}", t.config.namespace))
                .spawn()
                .expect("spawn child")
        })
        .collect();
    for mut child in children {
        assert!(child.wait().unwrap().success(), "a child process failed");
    }
    assert_eq!(read_counter(&t.store), (PROCESSES * INCREMENTS) as u64);
}

/// Runs only as a child of the test above.
#[test]
fn child_increments() {
    let Ok(spec) = std::env::var("SIGCAST_STORE_CHILD") else { return };
    let mut parts = spec.splitn(3, '|');
    let (backend, location, namespace) = (parts.next().unwrap(), parts.next().unwrap(), parts.next().unwrap());
    let mut config = match backend {
        "sqlite" => StoreConfig::sqlite(location),
        _ => StoreConfig::fdb(Some(location.into())),
    };
    config.namespace = namespace.to_owned();
    let store = Store::open(&config).unwrap();
    for _ in 0..INCREMENTS {
        increment(&store);
    }
}
