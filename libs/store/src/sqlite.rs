//! The embedded backend: one SQLite table of ordered byte keys, in WAL mode with
//! `synchronous=FULL`. Every write transaction begins `IMMEDIATE`, taking SQLite's write lock
//! up front, so transactions of any number of processes sharing the file are serializable and
//! never fail half-way with a conflict; waiting for the lock is the only contention.
//!
//! WAL needs every process on one host: never put the file on a network filesystem.

use crate::kv::{KvRead, KvTransaction, limits};
use crate::{Error, Result};
use rusqlite::{Connection, OptionalExtension, params};
use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Idle connections kept for reuse.
const MAX_IDLE: usize = 8;

/// How long opening a fresh file waits for other processes creating it at the same moment.
const OPEN_DEADLINE: Duration = Duration::from_secs(30);

pub(crate) struct SqliteBackend {
    path: PathBuf,
    /// How long one attempt of a transaction waits for another process's lock before
    /// reporting busy; the runner then retries the whole transaction until its own deadline.
    busy_timeout: Duration,
    /// The most pages the database may hold (`max_size_mb`), if limited.
    max_pages: Option<u64>,
    idle: Mutex<Vec<Connection>>,
}

/// SQLite's default page size, which sigcast never changes.
const PAGE_BYTES: u64 = 4096;

/// The first pause before looking again at another process's lock, and the longest. SQLite's
/// own busy handler pauses 1, 2, 5, 10, … then 100 ms at a time: a writer slept on for up to
/// 100 ms after the lock was free. With 2 signers, 2 broadcasters and a gateway writing one
/// file, the broadcasters' group-commit threads slept 385 and 275 times in 25 s, up to 104 ms
/// each time (BENCHMARKS.md).
const FIRST_LOCK_PAUSE: Duration = Duration::from_micros(50);
const LONGEST_LOCK_PAUSE: Duration = Duration::from_millis(1);
/// Any longer wait is taken as this one, so that the deadline is always a valid `Instant`
/// (`Duration::MAX` ahead is not).
const LONGEST_LOCK_WAIT: Duration = Duration::from_secs(365 * 24 * 3600);

thread_local! {
    /// Until when the statements this thread runs wait for another process's lock; `None`:
    /// they answer busy at once. Set around each transaction by [`waiting`].
    static LOCK_WAIT_UNTIL: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// How long to pause before the look after `looks` earlier ones, with `left` until the
/// deadline; `None`: stop waiting.
fn lock_pause(looks: i32, left: Duration) -> Option<Duration> {
    if left.is_zero() {
        return None;
    }
    let doublings = looks.clamp(0, 5).unsigned_abs();
    Some(
        FIRST_LOCK_PAUSE
            .saturating_mul(1 << doublings)
            .min(LONGEST_LOCK_PAUSE)
            .min(left),
    )
}

/// Every connection's busy handler.
fn wait_for_lock(looks: i32) -> bool {
    let Some(until) = LOCK_WAIT_UNTIL.get() else {
        return false;
    };
    match lock_pause(looks, until.saturating_duration_since(Instant::now())) {
        Some(pause) => {
            std::thread::sleep(pause);
            true
        }
        None => false,
    }
}

/// Runs `f` with this thread's statements waiting up to `wait` for another process's lock
/// (`None`: not at all), as it was set before once `f` returns or unwinds.
fn waiting<T>(wait: Option<Duration>, f: impl FnOnce() -> T) -> T {
    struct Restore(Option<Instant>);
    impl Drop for Restore {
        fn drop(&mut self) {
            LOCK_WAIT_UNTIL.set(self.0);
        }
    }
    let until = wait.map(|wait| Instant::now() + wait.min(LONGEST_LOCK_WAIT));
    let _restore = Restore(LOCK_WAIT_UNTIL.replace(until));
    f()
}

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
            let opened = waiting(Some(busy_timeout), || {
                let conn = backend.connect()?;
                conn.execute_batch(
                    "CREATE TABLE IF NOT EXISTS kv (key BLOB PRIMARY KEY NOT NULL, value BLOB NOT NULL) WITHOUT ROWID;",
                )?;
                Ok::<_, Error>(conn)
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
        conn.busy_handler(Some(wait_for_lock))?;
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
        waiting(Some(self.busy_timeout), || {
            let conn = self.acquire()?;
            let result = Self::in_transaction(&conn, "BEGIN IMMEDIATE", |tx| body(tx));
            self.release(conn);
            result
        })
    }

    /// One read-only transaction that never waits: on an idle connection (none: `None`, as
    /// opening one is left to a blocking thread) and without waiting for any lock, so a busy
    /// database answers `None` at once instead of pausing in the busy handler.
    pub(crate) fn read_now<T>(
        &self,
        body: &mut dyn FnMut(&mut dyn KvRead) -> Result<T>,
    ) -> Option<Result<T>> {
        let conn = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop()?;
        let result = waiting(None, || {
            // One statement is a snapshot of its own: a body that reads once (a record under
            // 90 KB) needs no BEGIN and COMMIT (3.8 -> 3.3 us a point read, criterion's
            // replay_point_read). A body that asks for a second read runs again, whole, in a
            // transaction: its reads must agree.
            let mut single = SingleRead {
                tx: SqliteTx {
                    conn: &conn,
                    written: limits::Written::default(),
                },
                reads: 0,
            };
            let answered = body(&mut single);
            if single.reads <= 1 {
                return answered;
            }
            Self::in_transaction(&conn, "BEGIN DEFERRED", |tx| body(tx))
        });
        self.release(conn);
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
        waiting(Some(self.busy_timeout), || {
            let conn = self.acquire()?;
            let result = Self::in_transaction(&conn, "BEGIN DEFERRED", |tx| body(tx));
            self.release(conn);
            result
        })
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

/// A read-only body's view outside any transaction: its first read is one statement, a
/// snapshot by itself; any later one is refused (and counted), so that the caller runs the
/// body again inside a transaction whatever it made of the refusal.
struct SingleRead<'c> {
    tx: SqliteTx<'c>,
    reads: u32,
}

impl SingleRead<'_> {
    fn first(&mut self) -> Result<()> {
        self.reads += 1;
        match self.reads {
            1 => Ok(()),
            _ => Err(Error::Task(
                "a second read outside a transaction (the body runs again in one)".into(),
            )),
        }
    }
}

impl KvRead for SingleRead<'_> {
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.first()?;
        self.tx.get(key)
    }

    fn get_range(
        &mut self,
        begin: &[u8],
        end: &[u8],
        limit: usize,
        reverse: bool,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.first()?;
        self.tx.get_range(begin, end, limit, reverse)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiting_writer_looks_again_within_a_millisecond_and_never_past_its_deadline() {
        let (us, ms) = (Duration::from_micros, Duration::from_millis);
        let pauses: Vec<_> = (0..8).map(|looks| lock_pause(looks, ms(5_000))).collect();
        let expected = [
            us(50),
            us(100),
            us(200),
            us(400),
            us(800),
            ms(1),
            ms(1),
            ms(1),
        ];
        assert_eq!(pauses, expected.map(Some));
        assert_eq!(lock_pause(i32::MAX, ms(5_000)), Some(ms(1)));
        assert_eq!(lock_pause(-1, ms(5_000)), Some(us(50)));
        assert_eq!(lock_pause(4, us(30)), Some(us(30)), "cut to the deadline");
        assert_eq!(
            lock_pause(0, Duration::ZERO),
            None,
            "the deadline has passed"
        );
    }

    #[test]
    fn a_write_waits_in_the_busy_handler_for_another_process_s_lock_or_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store.db");
        let write = |backend: &SqliteBackend| backend.run_once(&mut |tx| tx.set(b"k", b"v"));
        let holder = Connection::open(&path).unwrap();
        let waits = SqliteBackend::open(&path, Duration::from_secs(60), None).unwrap();
        let at_once = SqliteBackend::open(&path, Duration::ZERO, None).unwrap();
        holder.execute_batch("BEGIN IMMEDIATE").unwrap();
        // No wait: busy at once (the runner, not SQLite, would retry it).
        let refused = write(&at_once).expect_err("the lock is held");
        assert!(refused.is_sqlite_busy(), "{refused}");
        // A wait: the one attempt waits in the handler and writes once the lock is free.
        let writer = std::thread::spawn(move || write(&waits));
        std::thread::sleep(Duration::from_millis(300));
        assert!(!writer.is_finished(), "waits while the lock is held");
        holder.execute_batch("COMMIT").unwrap();
        writer
            .join()
            .unwrap()
            .expect("one attempt, bridged by the handler");
    }

    #[test]
    fn a_wait_is_set_for_its_closure_only_and_nests() {
        assert_eq!(LOCK_WAIT_UNTIL.get(), None);
        let (outer, inner) = waiting(Some(Duration::from_secs(5)), || {
            let inner = waiting(None, || LOCK_WAIT_UNTIL.get());
            (LOCK_WAIT_UNTIL.get(), inner)
        });
        assert!(outer.is_some());
        assert_eq!(inner, None);
        assert_eq!(LOCK_WAIT_UNTIL.get(), None);
        // The longest wait is taken as a year, not an overflow: past an hour's deadline.
        let hour = waiting(Some(Duration::from_secs(3600)), || LOCK_WAIT_UNTIL.get());
        let far = waiting(Some(Duration::MAX), || LOCK_WAIT_UNTIL.get());
        assert!(far.zip(hour).is_some_and(|(far, hour)| far > hour));
        let unwound = std::panic::catch_unwind(|| {
            waiting(Some(Duration::from_secs(1)), || panic!("a body panics"))
        });
        assert!(unwound.is_err());
        assert_eq!(
            LOCK_WAIT_UNTIL.get(),
            None,
            "set back when its closure unwinds"
        );
    }
}
