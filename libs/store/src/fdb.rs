//! The FoundationDB backend. Transaction bodies are synchronous (they only touch the store),
//! so each FoundationDB future is awaited with `block_on` on the blocking thread running the
//! body; the futures are driven by the FoundationDB network thread, not by this thread.
//!
//! The retry loop is FoundationDB's own: every `FdbError` reaches `on_error`, which backs off
//! and retries what is retryable — including `commit_unknown_result`, which is why bodies must
//! be idempotent — and returns the rest.

use crate::kv::{KvRead, KvTransaction, limits};
use crate::{Error, Result};
use foundationdb::options::{StreamingMode, TransactionOption};
use foundationdb::{Database, RangeOption, Transaction};
use futures::executor::block_on;
use std::path::Path;
use std::sync::OnceLock;

/// Transaction timeout, after which `on_error` gives up (FoundationDB's error 1031).
const TIMEOUT_MS: i32 = crate::store::FDB_TRANSACTION_TIMEOUT.as_millis() as i32;

/// FoundationDB's `transaction_timed_out`: the transaction ran past [`TIMEOUT_MS`].
pub(crate) const TIMED_OUT: i32 = 1031;

static NETWORK: OnceLock<Result<(), String>> = OnceLock::new();

fn start_network() -> Result<()> {
    NETWORK
        .get_or_init(|| {
            let builder = foundationdb::api::FdbApiBuilder::default()
                .build()
                .map_err(|e| format!("selecting the FoundationDB API version: {e}"))?;
            // SAFETY: called once per process (guarded by the OnceLock) before any database is
            // opened. The guard is leaked on purpose: the network thread must outlive every
            // Database handle, which may live until the process exits.
            let guard = unsafe { builder.boot() }
                .map_err(|e| format!("starting the FoundationDB network: {e}"))?;
            std::mem::forget(guard);
            Ok(())
        })
        .clone()
        .map_err(|reason| Error::Open {
            backend: "foundationdb",
            location: "network".into(),
            reason,
        })
}

pub(crate) struct FdbBackend {
    db: Database,
}

impl FdbBackend {
    pub(crate) fn open(cluster_file: Option<&Path>) -> Result<Self> {
        start_network()?;
        let location = cluster_file.map(|p| p.display().to_string());
        let db = Database::new(location.as_deref()).map_err(|e| Error::Open {
            backend: "foundationdb",
            location: location
                .clone()
                .unwrap_or_else(|| foundationdb::default_config_path().into()),
            reason: e.to_string(),
        })?;
        Ok(Self { db })
    }

    fn transaction(&self) -> Result<Transaction> {
        let trx = self.db.create_trx()?;
        trx.set_option(TransactionOption::Timeout(TIMEOUT_MS))?;
        Ok(trx)
    }

    pub(crate) fn run<T>(
        &self,
        body: &mut dyn FnMut(&mut dyn KvTransaction) -> Result<T>,
    ) -> Result<T> {
        let mut trx = self.transaction()?;
        loop {
            match body(&mut FdbTx {
                trx: &trx,
                written: limits::Written::default(),
            }) {
                Ok(value) => match block_on(trx.commit()) {
                    Ok(_) => return Ok(value),
                    Err(commit_error) => trx = block_on(commit_error.on_error())?,
                },
                Err(Error::Fdb(e)) => trx = block_on(trx.on_error(e))?,
                Err(other) => return Err(other),
            }
        }
    }

    pub(crate) fn read<T>(&self, body: &mut dyn FnMut(&mut dyn KvRead) -> Result<T>) -> Result<T> {
        let mut trx = self.transaction()?;
        loop {
            match body(&mut FdbTx {
                trx: &trx,
                written: limits::Written::default(),
            }) {
                Ok(value) => return Ok(value),
                Err(Error::Fdb(e)) => trx = block_on(trx.on_error(e))?,
                Err(other) => return Err(other),
            }
        }
    }
}

struct FdbTx<'t> {
    trx: &'t Transaction,
    /// Checked as each write is made, so an oversized one fails here, as on SQLite, instead
    /// of at commit.
    written: limits::Written,
}

impl KvRead for FdbTx<'_> {
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        limits::key(key)?;
        Ok(block_on(self.trx.get(key, false))?.map(|v| v.to_vec()))
    }

    fn get_range(
        &mut self,
        begin: &[u8],
        end: &[u8],
        limit: usize,
        reverse: bool,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::new();
        if limit == 0 {
            return Ok(out);
        }
        let mut opt = RangeOption {
            limit: Some(limit),
            reverse,
            mode: StreamingMode::WantAll,
            ..RangeOption::from((begin, end))
        };
        let mut iteration = 1;
        loop {
            let kvs = block_on(self.trx.get_range(&opt, iteration, false))?;
            out.extend(
                kvs.iter()
                    .map(|kv| (kv.key().to_vec(), kv.value().to_vec())),
            );
            match opt.next_range(&kvs) {
                Some(next) => opt = next,
                None => return Ok(out),
            }
            iteration += 1;
        }
    }
}

impl KvTransaction for FdbTx<'_> {
    fn set(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.written.set(key, value)?;
        self.trx.set(key, value);
        Ok(())
    }

    fn clear(&mut self, key: &[u8]) -> Result<()> {
        limits::key(key)?;
        self.written.clear(key.len())?;
        self.trx.clear(key);
        Ok(())
    }

    fn clear_range(&mut self, begin: &[u8], end: &[u8]) -> Result<()> {
        self.written.clear(begin.len() + end.len())?;
        self.trx.clear_range(begin, end);
        Ok(())
    }
}
