//! sigcast's store: one transactional, ordered key-value layer shaped like FoundationDB's
//! (`run(|tx| …)` retried on conflict, get / set / clear / range reads, tuple-encoded keys in
//! subspaces), with two backends — embedded SQLite (the default) and FoundationDB (feature
//! `fdb`) — and the operation records every service keeps in it.
//!
//! Transaction bodies must be idempotent: a body may run again after a conflict or after a
//! commit whose result was unknown, and re-running one that did commit must change nothing.
//! This crate is the only one that links a store backend; it must never stringify a backend
//! error on its way through (a retryable conflict must stay retryable).

pub mod accounts;
pub mod blocks;
mod error;
#[cfg(feature = "fdb")]
mod fdb;
mod kv;
pub mod operations;
mod pieces;
mod sqlite;
mod store;
pub mod work;

pub use error::{Error, Result, StoreWide};
pub use foundationdb_tuple as tuple;
pub use kv::{KvRead, KvTransaction};
pub use store::{Backend, FORMAT_VERSION, GROUP_COMMIT_THREAD, Store, StoreConfig};
