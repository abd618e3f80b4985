//! The embedded backend: one SQLite table of ordered byte keys, in WAL mode with
//! `synchronous=FULL`. Every write transaction begins `IMMEDIATE`, taking SQLite's write lock
//! up front, so transactions of any number of processes sharing the file are serializable and
//! never fail half-way with a conflict; waiting for the lock is the only contention.
//!
//! WAL needs every process on one host: never put the file on a network filesystem.

use crate::kv::{KvRead, KvTransaction, limits};
use crate::{Error, Result};
use rusqlite::{Connection, OptionalExtension, params};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// Idle connections kept for reuse.
const MAX_IDLE: usize = 8;

/// How long opening a fresh file waits for other processes creating it at the same moment.
const OPEN_DEADLINE: Duration = Duration::from_secs(30);

pub(crate) struct SqliteBackend {
    path: PathBuf,
    /// How long one statement waits for another process's lock before reporting busy; the
    /// runner then retries the whole transaction until its own deadline.
    busy_timeout: Duration,
    /// The most pages the database may hold (`max_size_mb`), if limited.
    max_pages: Option<u64>,
    idle: Mutex<Vec<Connection>>,
}

/// SQLite's default page size, which sigcast never changes.
const PAGE_BYTES: u64 = 4096;

impl SqliteBackend {
    pub(crate) fn open(
        path: &Path,
        busy_timeout: Duration,
        max_size_mb: Option<u64>,
    ) -> Result<Self> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| Error::Open {
                backend: "sqlite",
                location: path.display().to_string(),
                reason: format!("creating directory {}: {e}", dir.display()),
            })?;
        }
        // SQLite reads a limit of 0 as "no change": refused rather than silently unlimited.
        let max_pages = match max_size_mb {
            None => None,
            Some(mb) => match mb.checked_mul(1 << 20) {
                Some(bytes) if mb > 0 => Some(bytes / PAGE_BYTES),
                _ => {
                    return Err(Error::Open {
                        backend: "sqlite",
                        location: path.display().to_string(),
                        reason: format!(
                            "max_size_mb must be from 1 to {}, not {mb}",
                            u64::MAX >> 20
                        ),
                    });
                }
            },
        };
        let backend = Self {
            path: path.to_owned(),
            busy_timeout,
            max_pages,
            idle: Mutex::new(Vec::new()),
        };
        // Processes started together on a new file (a Pod's containers) race to switch it to
        // WAL and create the table; the loser is told "database is locked" at once, without
        // SQLite's busy wait. It waits its turn instead.
        let started = std::time::Instant::now();
        let mut attempts = 0u64;
        loop {
            attempts += 1;
            let opened = backend.connect().and_then(|conn| {
                conn.execute_batch(
                    "CREATE TABLE IF NOT EXISTS kv (key BLOB PRIMARY KEY NOT NULL, value BLOB NOT NULL) WITHOUT ROWID;",
                )?;
                Ok(conn)
            });
            match opened {
                Ok(conn) => {
                    backend.release(conn);
                    return Ok(backend);
                }
                Err(e) if e.is_sqlite_busy() && started.elapsed() < OPEN_DEADLINE => {
                    std::thread::sleep(Duration::from_millis(attempts.min(20) * 5));
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn connect(&self) -> Result<Connection> {
        let conn = Connection::open(&self.path).map_err(|e| Error::Open {
            backend: "sqlite",
            location: self.path.display().to_string(),
            reason: e.to_string(),
        })?;
        conn.busy_timeout(self.busy_timeout)?;
        // WAL lets readers proceed beside the writer; FULL syncs the WAL on every commit, so a
        // commit that returned survives power loss, not only a process crash.
        let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |row| row.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(Error::Open {
                backend: "sqlite",
                location: self.path.display().to_string(),
                reason: format!("journal_mode is {mode}, WAL is required"),
            });
        }
        // A small page cache per connection (the OS caches the file for all of them): with a
        // pool of connections SQLite's default 2 MiB each was a sizeable share of a service's
        // memory.
        conn.execute_batch("PRAGMA synchronous=FULL; PRAGMA cache_size=-512;")?;
        if let Some(pages) = self.max_pages {
            // Answers the limit it kept: never below the pages already in use.
            let _: u64 = conn.query_row(&format!("PRAGMA max_page_count={pages}"), [], |row| {
                row.get(0)
            })?;
        }
        Ok(conn)
    }

    fn acquire(&self) -> Result<Connection> {
        let idle = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
        match idle {
            Some(conn) => Ok(conn),
            None => self.connect(),
        }
    }

    fn release(&self, conn: Connection) {
        // A connection left inside a transaction (a failed ROLLBACK) is not reused.
        if conn.is_autocommit() {
            let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
            if idle.len() < MAX_IDLE {
                idle.push(conn);
            }
        }
    }

    /// One attempt of a write transaction.
    pub(crate) fn run_once<T>(
        &self,
        body: &mut dyn FnMut(&mut dyn KvTransaction) -> Result<T>,
    ) -> Result<T> {
        let conn = self.acquire()?;
        let result = Self::in_transaction(&conn, "BEGIN IMMEDIATE", |tx| body(tx));
        self.release(conn);
        result
    }

    /// One read-only transaction that never waits: on an idle connection (none: `None`, as
    /// opening one is left to a blocking thread) with no busy handler, so a busy database
    /// answers `None` at once instead of sleeping in SQLite's handler.
    pub(crate) fn read_now<T>(
        &self,
        body: &mut dyn FnMut(&mut dyn KvRead) -> Result<T>,
    ) -> Option<Result<T>> {
        let conn = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop()?;
        if conn.busy_timeout(Duration::ZERO).is_err() {
            return None;
        }
        let result = Self::in_transaction(&conn, "BEGIN DEFERRED", |tx| body(tx));
        // A connection whose handler cannot be set back is not reused.
        if conn.busy_timeout(self.busy_timeout).is_ok() {
            self.release(conn);
        }
        match result {
            Err(e) if e.is_sqlite_busy() => None,
            answered => Some(answered),
        }
    }

    /// One attempt of a read-only transaction: a consistent snapshot, no write lock.
    pub(crate) fn read_once<T>(
        &self,
        body: &mut dyn FnMut(&mut dyn KvRead) -> Result<T>,
    ) -> Result<T> {
        let conn = self.acquire()?;
        let result = Self::in_transaction(&conn, "BEGIN DEFERRED", |tx| body(tx));
        self.release(conn);
        result
    }

    fn in_transaction<T>(
        conn: &Connection,
        begin: &str,
        body: impl FnOnce(&mut SqliteTx<'_>) -> Result<T>,
    ) -> Result<T> {
        // Prepared once per connection, as the body's statements are: parsing BEGIN and COMMIT
        // again for every transaction was a visible share of a point read (a replay).
        conn.prepare_cached(begin)?.execute([])?;
        let result = body(&mut SqliteTx {
            conn,
            written: limits::Written::default(),
        })
        .and_then(|value| {
            conn.prepare_cached("COMMIT")?.execute([])?;
            Ok(value)
        });
        if result.is_err() && !conn.is_autocommit() {
            // Nothing of a failed body may persist; if even ROLLBACK fails, the connection is
            // dropped by `release` and SQLite rolls back when it closes.
            let _ = conn
                .prepare_cached("ROLLBACK")
                .and_then(|mut rollback| rollback.execute([]));
        }
        result
    }
}

struct SqliteTx<'c> {
    conn: &'c Connection,
    written: limits::Written,
}

impl KvRead for SqliteTx<'_> {
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        limits::key(key)?;
        let mut stmt = self
            .conn
            .prepare_cached("SELECT value FROM kv WHERE key = ?1")?;
        Ok(stmt.query_row(params![key], |row| row.get(0)).optional()?)
    }

    fn get_range(
        &mut self,
        begin: &[u8],
        end: &[u8],
        limit: usize,
        reverse: bool,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let sql = if reverse {
            "SELECT key, value FROM kv WHERE key >= ?1 AND key < ?2 ORDER BY key DESC LIMIT ?3"
        } else {
            "SELECT key, value FROM kv WHERE key >= ?1 AND key < ?2 ORDER BY key ASC LIMIT ?3"
        };
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut stmt = self.conn.prepare_cached(sql)?;
        let rows = stmt.query_map(params![begin, end, limit], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}

impl KvTransaction for SqliteTx<'_> {
    fn set(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.written.set(key, value)?;
        let mut stmt = self
            .conn
            .prepare_cached("INSERT INTO kv (key, value) VALUES (?1, ?2) ON CONFLICT(key) DO UPDATE SET value = excluded.value")?;
        stmt.execute(params![key, value])?;
        Ok(())
    }

    fn clear(&mut self, key: &[u8]) -> Result<()> {
        limits::key(key)?;
        self.written.clear(key.len())?;
        self.conn
            .prepare_cached("DELETE FROM kv WHERE key = ?1")?
            .execute(params![key])?;
        Ok(())
    }

    fn clear_range(&mut self, begin: &[u8], end: &[u8]) -> Result<()> {
        self.written.clear(begin.len() + end.len())?;
        self.conn
            .prepare_cached("DELETE FROM kv WHERE key >= ?1 AND key < ?2")?
            .execute(params![begin, end])?;
        Ok(())
    }
}
