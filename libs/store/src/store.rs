//! The store handle services hold: opens the configured backend, runs transaction bodies with
//! retries, and moves them off the async runtime.

use crate::kv::{KvRead, KvTransaction};
use crate::sqlite::SqliteBackend;
use crate::tuple::Subspace;
use crate::{Error, Result};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// How long a transaction keeps retrying on a busy database before giving up with
/// [`Error::Busy`]. (Two seconds in this crate's unit tests, which wait it out.)
#[cfg(not(test))]
const RETRY_DEADLINE: Duration = Duration::from_secs(60);
#[cfg(test)]
const RETRY_DEADLINE: Duration = Duration::from_secs(2);

/// FoundationDB's transaction timeout, retries included (its error 1031 after it).
pub(crate) const FDB_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(30);

/// Which backend holds the data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// Embedded SQLite file, shared by the processes of one host.
    Sqlite,
    /// A FoundationDB cluster (needs the `fdb` feature).
    Fdb,
}

/// Store settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// Which backend holds the data.
    pub backend: Backend,
    /// SQLite: the database file; created with its directory if missing. Every process of
    /// one deployment must name the same file, on a local filesystem.
    pub path: PathBuf,
    /// SQLite: how long one attempt of a transaction waits for another process's write lock
    /// before the transaction is retried, in milliseconds.
    pub busy_timeout_ms: u64,
    /// FoundationDB: the cluster file; FoundationDB's default location when absent.
    pub cluster_file: Option<PathBuf>,
    /// Top-level key prefix, so several deployments (or test runs) can share one cluster.
    pub namespace: String,
    /// Most transactions run at once by this process.
    pub max_concurrency: usize,
    /// SQLite: the most the database file may grow to, in MiB; none: until the disk is full.
    /// A write past it fails exactly as on a full disk (UNAVAILABLE, nothing accepted, reads
    /// go on), with room left on the volume for the write-ahead log to be checkpointed. It
    /// binds the writes of the process that sets it: give every service the same value.
    pub max_size_mb: Option<u64>,
}

impl Default for StoreConfig {
    /// An SQLite file `sigcast.db` in the working directory.
    fn default() -> Self {
        Self {
            backend: Backend::Sqlite,
            path: PathBuf::from("sigcast.db"),
            busy_timeout_ms: 5_000,
            cluster_file: None,
            namespace: "sigcast".to_owned(),
            max_concurrency: 16,
            max_size_mb: None,
        }
    }
}

impl StoreConfig {
    /// An SQLite store at `path` with default settings.
    pub fn sqlite(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            ..Self::default()
        }
    }

    /// A FoundationDB store with default settings.
    pub fn fdb(cluster_file: Option<PathBuf>) -> Self {
        Self {
            backend: Backend::Fdb,
            cluster_file,
            ..Self::default()
        }
    }
}

enum Engine {
    Sqlite(SqliteBackend),
    #[cfg(feature = "fdb")]
    Fdb(crate::fdb::FdbBackend),
}

struct Inner {
    engine: Engine,
    root: Subspace,
    permits: Semaphore,
    /// The group-commit queue and thread, started on first use.
    group: std::sync::OnceLock<GroupCommit>,
    /// When the group-commit thread started the transaction it is running; `None` while it
    /// waits for work.
    group_busy_since: std::sync::Mutex<Option<Instant>>,
    /// How long one transaction of the group-commit thread may run before the thread counts
    /// as stalled: twice the longest a healthy one takes on this backend.
    stall_after: Duration,
    /// Where the store's data format is recorded (`check_format`).
    format_key: Vec<u8>,
    /// The newer data format a write found recorded since the store was opened (0: none):
    /// from then on this process writes nothing, and its liveness says so.
    newer_format_found: std::sync::atomic::AtomicU32,
}

struct GroupCommit {
    queue: std::sync::mpsc::Sender<Job>,
    thread: std::thread::JoinHandle<()>,
}

/// A transaction body with its output captured elsewhere.
type Body = Box<dyn FnMut(&mut dyn KvTransaction) -> Result<()> + Send>;

/// One caller's transaction body waiting for a group commit.
struct Job {
    body: Body,
    done: tokio::sync::oneshot::Sender<Result<()>>,
}

/// The name of the thread that runs every grouped transaction of a process.
pub const GROUP_COMMIT_THREAD: &str = "store-group-commit";

/// Most bodies committed together.
const GROUP_MAX: usize = 256;

/// The data format this build reads and writes. Raise it with any change an older build would
/// misread, together with the migration in [`Store::check_format`].
///
/// - 1: the first release.
/// - 2: values over 90,000 bytes are stored in pieces (format 1 stored them whole; it reads as
///   is); operations not yet terminal have a `work` index entry (added to format-1 records by
///   [`Store::index_work`] when a store is opened, and by the broadcaster's sweep).
/// - 3: an operation carries the authenticated caller that submitted it (`Operation.caller`,
///   which an older build would drop when it rewrites the record) and, when it has one, a
///   `by_caller` index entry. Format-2 records have no caller and need no entry.
pub const FORMAT_VERSION: u32 = 3;

/// A handle on the store; cheap to clone.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").finish_non_exhaustive()
    }
}

impl Store {
    /// Opens the configured backend, creating what is missing.
    pub fn open(config: &StoreConfig) -> Result<Self> {
        // The longest a healthy transaction takes on this backend.
        let longest = match config.backend {
            Backend::Sqlite => RETRY_DEADLINE + Duration::from_millis(config.busy_timeout_ms),
            Backend::Fdb => FDB_TRANSACTION_TIMEOUT,
        };
        let root = Subspace::all().subspace(&config.namespace.as_str());
        let engine = match config.backend {
            Backend::Sqlite => Engine::Sqlite(SqliteBackend::open(
                &config.path,
                Duration::from_millis(config.busy_timeout_ms),
                config.max_size_mb,
            )?),
            #[cfg(feature = "fdb")]
            Backend::Fdb => Engine::Fdb(crate::fdb::FdbBackend::open(
                config.cluster_file.as_deref(),
            )?),
            #[cfg(not(feature = "fdb"))]
            Backend::Fdb => {
                return Err(Error::Open {
                    backend: "foundationdb",
                    location: config.cluster_file.as_ref().map_or_else(
                        || "the default cluster file".into(),
                        |p| p.display().to_string(),
                    ),
                    reason: "this build has no FoundationDB support (build with --features fdb)"
                        .into(),
                });
            }
        };
        let store = Self {
            inner: Arc::new(Inner {
                engine,
                format_key: root.pack(&("meta", "format")),
                newer_format_found: std::sync::atomic::AtomicU32::new(0),
                root,
                permits: Semaphore::new(config.max_concurrency.max(1)),
                group: std::sync::OnceLock::new(),
                group_busy_since: std::sync::Mutex::new(None),
                stall_after: 2 * longest,
            }),
        };
        store.migrate()?;
        store.check_format(FORMAT_VERSION)?;
        Ok(store)
    }

    /// Brings a store of an older format up to this one.
    fn migrate(&self) -> Result<()> {
        let key = self.inner.format_key.clone();
        let found = self.read(|tx| tx.get(&key))?;
        if found.as_deref() == Some(&1u32.to_be_bytes()[..]) {
            tracing::info!("store of data format 1: adding the work index");
            self.index_work()?;
        }
        Ok(())
    }

    /// Adds the work index entries that records written by a data-format-1 process lack, in
    /// transactions of a bounded size. Idempotent; the broadcaster runs it now and then, in
    /// case such a process was still running during an upgrade.
    pub fn index_work(&self) -> Result<()> {
        let root = self.root().clone();
        let mut after: Option<Vec<u8>> = None;
        loop {
            let from = after.clone();
            after =
                self.run(|tx| crate::operations::index_work(tx, &root, from.as_deref(), 500))?;
            if after.is_none() {
                return Ok(());
            }
        }
    }

    /// Records this binary's data format in an empty store, and refuses to run on a store
    /// written by a newer format: during a rolling upgrade an old replica stops loudly instead
    /// of misreading what a new one wrote. (An older format would be migrated here.)
    pub fn check_format(&self, ours: u32) -> Result<()> {
        let key = self.inner.format_key.clone();
        let found = self.run(|tx| {
            let found = match tx.get(&key)? {
                Some(bytes) => Some(u32::from_be_bytes(bytes.as_slice().try_into().map_err(
                    |_| Error::Corrupt {
                        what: "store format",
                        key: key.iter().map(|b| format!("{b:02x}")).collect(),
                        reason: "not 4 bytes".into(),
                    },
                )?)),
                None => None,
            };
            if found.is_none_or(|found| found < ours) {
                tx.set(&key, &ours.to_be_bytes())?;
            }
            Ok(found)
        })?;
        match found {
            Some(found) if found > ours => Err(Error::NewerFormat { found, ours }),
            _ => Ok(()),
        }
    }

    /// The subspace every key of this deployment lives in.
    pub fn root(&self) -> &Subspace {
        &self.inner.root
    }

    /// Runs a read-write transaction body until it commits, retrying conflicts and a busy
    /// database. The body may run several times: it must be idempotent. Blocking.
    ///
    /// Refused (`NewerFormat`) once a newer build has raised the store's data format, read
    /// in the same transaction: the format is checked when a store is opened, and a process
    /// still running through a rolling upgrade would otherwise rewrite records with what it
    /// cannot read dropped (format 3's `caller`: the submitter's own retries then refused as
    /// another caller's). On FoundationDB the read also makes the change of format conflict
    /// with the transaction.
    pub fn run<T>(&self, mut body: impl FnMut(&mut dyn KvTransaction) -> Result<T>) -> Result<T> {
        let format_key = self.inner.format_key.as_slice();
        let mut body = |tx: &mut dyn KvTransaction| {
            refuse_a_newer_format(tx, format_key).inspect_err(|refused| {
                if let Error::NewerFormat { found, .. } = refused {
                    self.inner
                        .newer_format_found
                        .store(*found, std::sync::atomic::Ordering::Relaxed);
                }
            })?;
            body(tx)
        };
        match &self.inner.engine {
            Engine::Sqlite(sqlite) => retry_busy(|| sqlite.run_once(&mut body)),
            #[cfg(feature = "fdb")]
            Engine::Fdb(fdb) => fdb.run(&mut body),
        }
    }

    /// Runs a read-only transaction body on a consistent snapshot. Blocking.
    pub fn read<T>(&self, mut body: impl FnMut(&mut dyn KvRead) -> Result<T>) -> Result<T> {
        match &self.inner.engine {
            Engine::Sqlite(sqlite) => retry_busy(|| sqlite.read_once(&mut body)),
            #[cfg(feature = "fdb")]
            Engine::Fdb(fdb) => fdb.read(&mut body),
        }
    }

    /// [`Store::run`] on a blocking thread, at most `max_concurrency` at once.
    pub async fn run_async<T, F>(&self, body: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnMut(&mut dyn KvTransaction) -> Result<T> + Send + 'static,
    {
        self.on_blocking_thread(move |store| store.run(body)).await
    }

    /// [`Store::run`] with group commit: the bodies of concurrent callers run one after the
    /// other inside one transaction, so one commit (one fsync) carries many. Each body sees the
    /// writes of those before it, exactly as if the transactions had run in that order, and
    /// must be idempotent as for [`Store::run`] (a retried transaction re-runs all of them).
    /// If a body fails, the group is rolled back and every body runs again in a transaction of
    /// its own, so one failure never fails another caller. A body whose caller has dropped
    /// this future by its turn is not run (a caller that gave up reads no answer).
    pub async fn run_grouped<T, F>(&self, mut body: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnMut(&mut dyn KvTransaction) -> Result<T> + Send + 'static,
    {
        let output = std::sync::Arc::new(std::sync::Mutex::new(None));
        let slot = output.clone();
        // Each body runs on the group-commit thread in its caller's span, as on its own.
        let span = tracing::Span::current();
        let job_body = move |tx: &mut dyn KvTransaction| {
            // A body that panics must fail only its own caller: the group-commit thread runs
            // every caller's body, and if it died the process would stay up committing nothing.
            let run = std::panic::AssertUnwindSafe(|| span.in_scope(|| body(tx)));
            let value = std::panic::catch_unwind(run).map_err(|panic| {
                Error::Task(format!(
                    "a transaction body panicked: {}",
                    panic_message(&*panic)
                ))
            })??;
            *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(value);
            Ok(())
        };
        let (done, committed) = tokio::sync::oneshot::channel();
        let job = Job {
            body: Box::new(job_body),
            done,
        };
        self.group_commit()
            .queue
            .send(job)
            .map_err(|_| Error::Task("the group-commit thread is gone".into()))?;
        committed
            .await
            .map_err(|_| Error::Task("the group-commit thread dropped a transaction".into()))??;
        let value = output.lock().unwrap_or_else(|p| p.into_inner()).take();
        value.ok_or_else(|| Error::Task("a committed body left no result".into()))
    }

    /// [`Store::run_grouped`] for a body that may refuse: when it returns `Ok(Err(refusal))`,
    /// everything it wrote is rolled back — it never commits half of what it set out to do,
    /// such as a nonce allocated for a signature that then failed — and the refusal is
    /// returned.
    pub async fn run_grouped_or_refuse<T, E, F>(&self, body: F) -> Result<Result<T, E>>
    where
        T: Send + 'static,
        E: Send + 'static,
        F: FnMut(&mut dyn KvTransaction) -> Result<Result<T, E>> + Send + 'static,
    {
        let (body, refusal) = refusable(body);
        take_refusal(self.run_grouped(body).await, &refusal)
    }

    /// [`Store::run_async`] for a body that may refuse, as [`Store::run_grouped_or_refuse`].
    pub async fn run_async_or_refuse<T, E, F>(&self, body: F) -> Result<Result<T, E>>
    where
        T: Send + 'static,
        E: Send + 'static,
        F: FnMut(&mut dyn KvTransaction) -> Result<Result<T, E>> + Send + 'static,
    {
        let (body, refusal) = refusable(body);
        take_refusal(self.run_async(body).await, &refusal)
    }

    /// How long one transaction of the group-commit thread may run before
    /// [`Store::check_group_commit`] calls it stalled: twice the longest a healthy one takes
    /// (SQLite: retrying a busy database until its deadline, the last attempt waiting the busy
    /// timeout; FoundationDB: its transaction timeout).
    pub fn group_commit_stall_after(&self) -> Duration {
        self.inner.stall_after
    }

    /// [`Store::check_group_commit`] as a liveness check, at the time it is called.
    pub fn group_commit_check(&self) -> impl Fn() -> Result<()> + Send + Sync + 'static {
        let store = self.clone();
        move || store.check_group_commit(Instant::now())
    }

    fn group_commit(&self) -> &GroupCommit {
        self.inner.group.get_or_init(|| {
            let (queue, receiver) = std::sync::mpsc::channel::<Job>();
            // The thread holds the store weakly: it ends when the last handle is dropped.
            let store = std::sync::Arc::downgrade(&self.inner);
            let thread = std::thread::Builder::new()
                .name(GROUP_COMMIT_THREAD.into())
                .spawn(move || group_commit(&store, &receiver))
                .expect("spawning the group-commit thread");
            GroupCommit { queue, thread }
        })
    }

    /// Whether the group-commit thread, which commits every grouped transaction of this
    /// process, is alive at `now`: an error when it has ended or has been inside one
    /// transaction for longer than [`Store::group_commit_stall_after`], or when a write found
    /// that a newer build raised the store's data format (`NewerFormat`: this process writes
    /// nothing more, and a restart refuses the store at its opening, loudly). Either way the
    /// process accepts work it will never commit, and only a restart helps: this is what
    /// liveness probes ask. A thread not started yet (nothing grouped so far) is alive.
    pub fn check_group_commit(&self, now: Instant) -> Result<()> {
        let found = self
            .inner
            .newer_format_found
            .load(std::sync::atomic::Ordering::Relaxed);
        if found != 0 {
            return Err(Error::NewerFormat {
                found,
                ours: FORMAT_VERSION,
            });
        }
        if self
            .inner
            .group
            .get()
            .is_some_and(|group| group.thread.is_finished())
        {
            return Err(Error::GroupCommitEnded);
        }
        let since = *self
            .inner
            .group_busy_since
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        match since.map(|since| now.saturating_duration_since(since)) {
            Some(running) if running > self.inner.stall_after => Err(Error::GroupCommitStalled {
                seconds: running.as_secs(),
            }),
            _ => Ok(()),
        }
    }

    /// A read of a few keys (a record by its op_id) on the calling task's own thread when
    /// the backend can answer at once, else as [`Store::read_async`]. On SQLite a read in WAL
    /// mode waits for no writer and takes microseconds, while handing it to a blocking
    /// thread and back takes two thread wake-ups: most of what a replayed submit cost above
    /// a health check (the scheduler's share of the gateway's profile). In place only on an
    /// idle connection and without SQLite's busy handler: a database that is busy (rare for
    /// a reader: a WAL being recovered) or a connection to open goes to a blocking thread,
    /// never a sleep on this one. FoundationDB reads go over the network: always on a
    /// blocking thread.
    pub async fn read_point<T, F>(&self, mut body: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnMut(&mut dyn KvRead) -> Result<T> + Send + 'static,
    {
        let answered = match &self.inner.engine {
            Engine::Sqlite(sqlite) => sqlite.read_now(&mut body),
            #[cfg(feature = "fdb")]
            Engine::Fdb(_) => None,
        };
        match answered {
            Some(answered) => answered,
            None => self.read_async(body).await,
        }
    }

    /// [`Store::read`] on a blocking thread, at most `max_concurrency` at once.
    pub async fn read_async<T, F>(&self, body: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnMut(&mut dyn KvRead) -> Result<T> + Send + 'static,
    {
        self.on_blocking_thread(move |store| store.read(body)).await
    }

    /// Runs `work` on a blocking thread, at most `max_concurrency` at once, in the caller's
    /// span (a blocking thread starts in none): what a body logs there, a token's session
    /// reopened while signing, names the caller's operation.
    async fn on_blocking_thread<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Store) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let _permit = self
            .inner
            .permits
            .acquire()
            .await
            .map_err(|e| Error::Task(e.to_string()))?;
        let store = self.clone();
        let span = tracing::Span::current();
        tokio::task::spawn_blocking(move || span.in_scope(|| work(&store)))
            .await
            .map_err(|e| Error::Task(e.to_string()))?
    }
}

/// Where a refusing body leaves its refusal while the store rolls its transaction back.
type RefusalSlot<E> = Arc<std::sync::Mutex<Option<E>>>;

/// Turns a body's refusal into [`Error::Refused`], which rolls its transaction back, keeping
/// the refusal aside.
fn refusable<T, E>(
    mut body: impl FnMut(&mut dyn KvTransaction) -> Result<Result<T, E>>,
) -> (
    impl FnMut(&mut dyn KvTransaction) -> Result<T>,
    RefusalSlot<E>,
) {
    let slot: RefusalSlot<E> = Arc::new(std::sync::Mutex::new(None));
    let kept = slot.clone();
    let body = move |tx: &mut dyn KvTransaction| match body(tx)? {
        Ok(value) => Ok(value),
        Err(refusal) => {
            *kept.lock().unwrap_or_else(|p| p.into_inner()) = Some(refusal);
            Err(Error::Refused)
        }
    };
    (body, slot)
}

fn take_refusal<T, E>(result: Result<T>, slot: &RefusalSlot<E>) -> Result<Result<T, E>> {
    match result {
        Ok(value) => Ok(Ok(value)),
        Err(Error::Refused) => slot
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .map(Err)
            .ok_or(Error::Refused),
        Err(other) => Err(other),
    }
}

/// The group-commit loop: waits for a body, takes every other one already queued (up to
/// [`GROUP_MAX`]), and commits them in one transaction.
fn group_commit(store: &std::sync::Weak<Inner>, queue: &std::sync::mpsc::Receiver<Job>) {
    while let Ok(first) = queue.recv() {
        let mut jobs = vec![first];
        while jobs.len() < GROUP_MAX {
            match queue.try_recv() {
                Ok(job) => jobs.push(job),
                Err(_) => break,
            }
        }
        let Some(inner) = store.upgrade() else { return };
        let store = Store { inner };
        // Bodies catch their own panics (see `run_grouped`); this catches the rest (a value a
        // body held that panics when dropped here), which would otherwise end the thread
        // and leave the process up, committing nothing. The callers whose answer was not sent
        // yet hear that their transaction was dropped; its outcome is theirs to read again.
        let group = std::panic::AssertUnwindSafe(|| commit_group(&store, jobs));
        if let Err(panic) = std::panic::catch_unwind(group) {
            let message = panic_message(&*panic);
            tracing::error!(%message, "a panic in the group-commit thread: the group's remaining callers get an error");
        }
        *store
            .inner
            .group_busy_since
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = None;
    }
}

/// `NewerFormat` if the format recorded at `key` is past this build's. Nothing recorded yet
/// (a store being created) or a value that is no format (which opening reports) passes.
fn refuse_a_newer_format(tx: &mut dyn KvTransaction, key: &[u8]) -> Result<()> {
    let found = tx
        .get(key)?
        .and_then(|bytes| <[u8; 4]>::try_from(bytes.as_slice()).ok())
        .map(u32::from_be_bytes);
    match found {
        Some(found) if found > FORMAT_VERSION => Err(Error::NewerFormat {
            found,
            ours: FORMAT_VERSION,
        }),
        _ => Ok(()),
    }
}

/// What a panic said, when it said it with a string.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}

/// Commits `jobs` in one transaction or, when that fails, each alone, so that one body's
/// failure fails no other caller.
fn commit_group(store: &Store, jobs: Vec<Job>) {
    let busy = |running: bool| {
        *store
            .inner
            .group_busy_since
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = running.then(Instant::now);
    };
    // A caller that gave up while its job waited (its deadline passed: under overload, the
    // queue is where the time goes) reads no answer; running its body would only lengthen
    // the queue for the callers still waiting. Not run: to it, the outcome is unknown either
    // way, as after any cancellation.
    let (jobs, abandoned): (Vec<Job>, Vec<Job>) =
        jobs.into_iter().partition(|job| !job.done.is_closed());
    let (mut bodies, answers): (Vec<Body>, Vec<_>) =
        jobs.into_iter().map(|job| (job.body, job.done)).unzip();
    busy(true);
    let together = match bodies.is_empty() {
        true => Ok(()),
        false => store.run(|tx| {
            for body in bodies.iter_mut() {
                body(tx)?;
            }
            Ok(())
        }),
    };
    busy(false);
    match together {
        Ok(()) => {
            for done in answers {
                let _ = done.send(Ok(()));
            }
        }
        // Alone, each body commits or fails on its own; unless what failed was the store as
        // a whole (another process holding the write lock past the deadline, a data format
        // a newer build raised), which each body alone would meet again, one caller after
        // another.
        Err(failed) => {
            let mut store_wide = failed.store_wide(true);
            for (body, done) in bodies.iter_mut().zip(answers) {
                if done.is_closed() {
                    continue;
                }
                if let Some(wide) = store_wide {
                    let _ = done.send(Err(wide.into()));
                    continue;
                }
                busy(true);
                let result = store.run(|tx| body(tx));
                busy(false);
                store_wide = result.as_ref().err().and_then(|e| e.store_wide(false));
                let _ = done.send(result);
            }
        }
    }
    // Dropped once every caller has its answer, each alone: a value a body held that panics
    // when dropped must not take another caller's answer (or body) with it.
    for body in bodies
        .into_iter()
        .chain(abandoned.into_iter().map(|job| job.body))
    {
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(body))).is_err() {
            tracing::error!("a panic dropping a transaction body, after its caller was answered");
        }
    }
}

/// Retries an SQLite attempt while the database is busy (another process holds the write
/// lock past the busy timeout), with a growing pause, until [`RETRY_DEADLINE`].
fn retry_busy<T>(mut attempt: impl FnMut() -> Result<T>) -> Result<T> {
    let start = Instant::now();
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        match attempt() {
            Err(e) if e.is_sqlite_busy() => {
                if start.elapsed() >= RETRY_DEADLINE {
                    return Err(Error::Busy {
                        attempts,
                        elapsed_ms: start.elapsed().as_millis(),
                    });
                }
                tracing::debug!(attempts, "store busy, retrying transaction");
                std::thread::sleep(Duration::from_millis(u64::from(attempts.min(10)) * 5));
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A group refused because another process held the write lock past the retry deadline
    /// answers every caller with that: run alone, each body would wait the deadline again,
    /// one caller after another (256 of them: hours), while the stall check, timing each run,
    /// saw nothing wrong.
    #[test]
    fn a_group_refused_by_a_busy_store_answers_every_caller_without_running_each_alone() {
        let dir = tempfile::tempdir().unwrap();
        let config = StoreConfig {
            busy_timeout_ms: 20,
            ..StoreConfig::sqlite(dir.path().join("busy.db"))
        };
        let store = Store::open(&config).unwrap();
        let holder = rusqlite::Connection::open(&config.path).unwrap();
        holder.execute_batch("BEGIN IMMEDIATE").unwrap();
        let (jobs, mut answers): (Vec<Job>, Vec<_>) = (0..3i64)
            .map(|i| {
                let (done, answer) = tokio::sync::oneshot::channel();
                let key = store.root().pack(&("busy", i));
                let body: Body = Box::new(move |tx: &mut dyn KvTransaction| tx.set(&key, b"x"));
                (Job { body, done }, answer)
            })
            .unzip();
        let group = {
            let store = store.clone();
            std::thread::spawn(move || commit_group(&store, jobs))
        };
        // The first answer comes after the deadline; the lock is free from then on, so a body
        // run alone after it would commit.
        let first = answers.remove(0).blocking_recv().unwrap();
        holder.execute_batch("ROLLBACK").unwrap();
        group.join().unwrap();
        assert!(matches!(first, Err(Error::Busy { .. })), "{first:?}");
        for mut answer in answers {
            let result = answer.try_recv().expect("answered with the group");
            assert!(matches!(result, Err(Error::Busy { .. })), "{result:?}");
        }
        let (begin, end) = store.root().range();
        let written = store
            .read(|tx| tx.get_range(&begin, &end, usize::MAX, false))
            .unwrap();
        assert!(
            !written
                .iter()
                .any(|(k, _)| k.windows(4).any(|w| w == b"busy")),
            "nothing written"
        );
    }
}
