//! Store conformance suite. Every test runs against the embedded SQLite backend, and against
//! FoundationDB instead when the crate is built with `--features fdb` and `FDB_CLUSTER_FILE`
//! names a cluster (each test then works in a namespace of its own and clears it afterwards).

mod accounts;
mod blocks;
mod fixture;
mod kv;
mod limits;
mod multiprocess;
mod operations;
mod spans;
mod work;

use sigcast_store::{Backend, Store, StoreConfig};
use std::path::PathBuf;

/// A store for one test, with whatever must outlive it.
pub(crate) struct TestStore {
    pub(crate) store: Store,
    pub(crate) config: StoreConfig,
    _dir: tempfile::TempDir,
}

impl Drop for TestStore {
    fn drop(&mut self) {
        if self.config.backend == Backend::Fdb {
            let (begin, end) = self.store.root().range();
            let _ = self.store.run(|tx| tx.clear_range(&begin, &end));
        }
    }
}

/// The cluster file to run the suite against FoundationDB, if this build and machine can.
fn fdb_cluster_file() -> Option<PathBuf> {
    if cfg!(feature = "fdb") {
        std::env::var_os("FDB_CLUSTER_FILE").map(PathBuf::from)
    } else {
        None
    }
}

/// Opens a fresh store for the test `name`.
pub(crate) fn test_store(name: &str) -> TestStore {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut config = match fdb_cluster_file() {
        Some(cluster_file) => StoreConfig::fdb(Some(cluster_file)),
        None => StoreConfig::sqlite(dir.path().join("store.db")),
    };
    config.namespace = format!("test-{name}-{}-{}", std::process::id(), unique());
    let store = Store::open(&config).expect("open store");
    TestStore {
        store,
        config,
        _dir: dir,
    }
}

fn unique() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}
