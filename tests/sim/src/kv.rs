//! The store as the simulation runs it: the real SQLite backend (each transaction atomic, as
//! SQLite's write lock makes it), or an in-memory backend with FoundationDB's semantics —
//! optimistic transactions that conflict when another commit wrote what they read, commits
//! whose result is unknown (the body then runs again, as FoundationDB's retry loop does, so a
//! body that did commit runs twice), transactions too old after 5 s, and FoundationDB's size
//! limits. Either way the bodies are the product's own (`sigcast_store::operations`,
//! `accounts`, the signer's signing bodies).

use crate::exec::{now_ms, yield_now};
use rand::Rng;
use rand::rngs::StdRng;
use sigcast_store::tuple::Subspace;
use sigcast_store::{Error, KvRead, KvTransaction, Result, Store, StoreConfig};
use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};

const MAX_KEY: usize = 10_000;
const MAX_VALUE: usize = 100_000;
const MAX_TRANSACTION: usize = 10_000_000;
/// FoundationDB refuses a transaction whose reads are older than this.
const TOO_OLD_MS: u64 = 5_000;

/// Which backend a simulation runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The real embedded backend, on a temporary file.
    Sqlite,
    /// In memory, with FoundationDB's transaction semantics and faults.
    Fdb,
}

/// Faults of the simulated FoundationDB.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FdbFaults {
    /// Share of commits whose result the client does not learn (half of them applied).
    pub(crate) unknown_result: f64,
}

struct Committed {
    version: u64,
    keys: Vec<Vec<u8>>,
    ranges: Vec<(Vec<u8>, Vec<u8>)>,
}

/// The simulated cluster's data.
pub(crate) struct FdbSim {
    data: BTreeMap<Vec<u8>, Vec<u8>>,
    version: u64,
    log: Vec<Committed>,
    faults: FdbFaults,
    rng: StdRng,
    /// Transactions retried for a conflict, an unknown result, or age (for the report).
    pub(crate) retries: u64,
}

#[derive(Clone)]
enum Write {
    Set(Vec<u8>, Vec<u8>),
    Clear(Vec<u8>),
    ClearRange(Vec<u8>, Vec<u8>),
}

/// One attempt of a transaction on the simulated cluster: reads see the committed data as of
/// its start plus its own writes.
struct SimTx<'a> {
    data: &'a BTreeMap<Vec<u8>, Vec<u8>>,
    writes: Vec<Write>,
    read_keys: HashSet<Vec<u8>>,
    read_ranges: Vec<(Vec<u8>, Vec<u8>)>,
    size: usize,
}

impl SimTx<'_> {
    fn overlay(&self, key: &[u8], base: Option<Vec<u8>>) -> Option<Vec<u8>> {
        let mut value = base;
        for write in &self.writes {
            match write {
                Write::Set(k, v) if k == key => value = Some(v.clone()),
                Write::Clear(k) if k == key => value = None,
                Write::ClearRange(b, e) if key >= b.as_slice() && key < e.as_slice() => {
                    value = None
                }
                _ => {}
            }
        }
        value
    }

    fn grow(&mut self, bytes: usize) -> Result<()> {
        self.size += bytes;
        if self.size > MAX_TRANSACTION {
            return Err(Error::TooLarge {
                what: "transaction",
                size: self.size,
                limit: MAX_TRANSACTION,
            });
        }
        Ok(())
    }
}

fn key_limit(key: &[u8]) -> Result<()> {
    if key.len() > MAX_KEY {
        return Err(Error::TooLarge {
            what: "key",
            size: key.len(),
            limit: MAX_KEY,
        });
    }
    Ok(())
}

impl KvRead for SimTx<'_> {
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        key_limit(key)?;
        self.read_keys.insert(key.to_vec());
        Ok(self.overlay(key, self.data.get(key).cloned()))
    }

    fn get_range(
        &mut self,
        begin: &[u8],
        end: &[u8],
        limit: usize,
        reverse: bool,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.read_ranges.push((begin.to_vec(), end.to_vec()));
        if begin >= end {
            return Ok(Vec::new());
        }
        let mut merged: BTreeMap<Vec<u8>, Vec<u8>> = self
            .data
            .range(begin.to_vec()..end.to_vec())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for write in &self.writes {
            match write {
                Write::Set(k, v) if k.as_slice() >= begin && k.as_slice() < end => {
                    merged.insert(k.clone(), v.clone());
                }
                Write::Clear(k) => {
                    merged.remove(k);
                }
                Write::ClearRange(b, e) => merged.retain(|k, _| k < b || k >= e),
                _ => {}
            }
        }
        let rows: Vec<(Vec<u8>, Vec<u8>)> = if reverse {
            merged.into_iter().rev().take(limit).collect()
        } else {
            merged.into_iter().take(limit).collect()
        };
        Ok(rows)
    }
}

impl KvTransaction for SimTx<'_> {
    fn set(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        key_limit(key)?;
        if value.len() > MAX_VALUE {
            return Err(Error::TooLarge {
                what: "value",
                size: value.len(),
                limit: MAX_VALUE,
            });
        }
        self.grow(key.len() + value.len())?;
        self.writes.push(Write::Set(key.to_vec(), value.to_vec()));
        Ok(())
    }

    fn clear(&mut self, key: &[u8]) -> Result<()> {
        key_limit(key)?;
        self.grow(key.len())?;
        self.writes.push(Write::Clear(key.to_vec()));
        Ok(())
    }

    fn clear_range(&mut self, begin: &[u8], end: &[u8]) -> Result<()> {
        self.grow(begin.len() + end.len())?;
        self.writes
            .push(Write::ClearRange(begin.to_vec(), end.to_vec()));
        Ok(())
    }
}

impl FdbSim {
    fn new(faults: FdbFaults, rng: StdRng) -> Self {
        Self {
            data: BTreeMap::new(),
            version: 0,
            log: Vec::new(),
            faults,
            rng,
            retries: 0,
        }
    }

    /// Whether a commit since `version` wrote anything the transaction read.
    fn conflicts(
        &self,
        version: u64,
        keys: &HashSet<Vec<u8>>,
        ranges: &[(Vec<u8>, Vec<u8>)],
    ) -> bool {
        let in_ranges = |k: &[u8]| {
            ranges
                .iter()
                .any(|(b, e)| k >= b.as_slice() && k < e.as_slice())
        };
        self.log.iter().filter(|c| c.version > version).any(|c| {
            c.keys.iter().any(|k| keys.contains(k) || in_ranges(k))
                || c.ranges.iter().any(|(b, e)| {
                    keys.iter().any(|k| k >= b && k < e)
                        || ranges.iter().any(|(rb, re)| rb < e && b < re)
                })
        })
    }

    fn apply(&mut self, writes: Vec<Write>) {
        self.version += 1;
        let mut keys = Vec::new();
        let mut ranges = Vec::new();
        for write in writes {
            match write {
                Write::Set(k, v) => {
                    keys.push(k.clone());
                    self.data.insert(k, v);
                }
                Write::Clear(k) => {
                    self.data.remove(&k);
                    keys.push(k);
                }
                Write::ClearRange(b, e) => {
                    let doomed: Vec<Vec<u8>> = self
                        .data
                        .range(b.clone()..e.clone())
                        .map(|(k, _)| k.clone())
                        .collect();
                    for k in doomed {
                        self.data.remove(&k);
                    }
                    ranges.push((b, e));
                }
            }
        }
        self.log.push(Committed {
            version: self.version,
            keys,
            ranges,
        });
        if self.log.len() > 4_096 {
            self.log.drain(..1_024);
        }
    }
}

/// The store of one simulation, shared by its processes.
#[derive(Clone)]
pub(crate) struct SimStore {
    root: Subspace,
    engine: Engine,
}

#[derive(Clone)]
enum Engine {
    /// The store, each process's own handles on it, and the temporary directory its file
    /// lives in (removed when dropped, after the handles).
    Sqlite(
        Store,
        Arc<Handles>,
        #[allow(dead_code)] Arc<tempfile::TempDir>,
    ),
    Fdb(Arc<Mutex<FdbSim>>),
}

/// Each process's own handle on the embedded store, as each process opens it: its own
/// connections and its own group-commit thread.
struct Handles {
    config: StoreConfig,
    open: Mutex<std::collections::HashMap<String, Store>>,
}

impl Handles {
    /// Process `process`'s handle, opened at its first write since it started.
    fn of(&self, process: &str) -> Store {
        let mut open = self.open.lock().unwrap();
        open.entry(process.to_owned())
            .or_insert_with(|| Store::open(&self.config).expect("open the embedded store"))
            .clone()
    }
}

/// What a transaction body is.
pub(crate) trait Body<T>: FnMut(&mut dyn KvTransaction) -> Result<T> {}
impl<T, F: FnMut(&mut dyn KvTransaction) -> Result<T>> Body<T> for F {}

impl SimStore {
    /// A fresh store on `backend`.
    pub(crate) fn open(backend: Backend, faults: FdbFaults, rng: StdRng) -> Self {
        let root = Subspace::all().subspace(&"sim");
        let engine = match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().expect("temp dir");
                let mut config = StoreConfig::sqlite(dir.path().join("sim.db"));
                config.namespace = "sim".into();
                let store = Store::open(&config).expect("open the embedded store");
                let handles = Handles {
                    config,
                    open: Mutex::default(),
                };
                Engine::Sqlite(store, Arc::new(handles), Arc::new(dir))
            }
            Backend::Fdb => Engine::Fdb(Arc::new(Mutex::new(FdbSim::new(faults, rng)))),
        };
        Self { root, engine }
    }

    /// The root subspace every key lives in.
    pub(crate) fn root(&self) -> &Subspace {
        match &self.engine {
            Engine::Sqlite(store, ..) => store.root(),
            Engine::Fdb(_) => &self.root,
        }
    }

    /// Transactions retried so far (FoundationDB semantics only).
    pub(crate) fn retries(&self) -> u64 {
        match &self.engine {
            Engine::Sqlite(..) => 0,
            Engine::Fdb(fdb) => fdb.lock().unwrap().retries,
        }
    }

    /// Runs a read-write body until it commits, yielding between its reads and its commit so
    /// that other processes' commits can come in between.
    pub(crate) async fn run<T>(&self, mut body: impl Body<T>) -> Result<T> {
        match &self.engine {
            Engine::Sqlite(store, ..) => {
                yield_now().await;
                store.run(body)
            }
            Engine::Fdb(fdb) => loop {
                let started = now_ms();
                let (version, outcome, writes, keys, ranges) = {
                    let guard = fdb.lock().unwrap();
                    let mut tx = SimTx {
                        data: &guard.data,
                        writes: Vec::new(),
                        read_keys: HashSet::new(),
                        read_ranges: Vec::new(),
                        size: 0,
                    };
                    let outcome = body(&mut tx);
                    (
                        guard.version,
                        outcome,
                        tx.writes,
                        tx.read_keys,
                        tx.read_ranges,
                    )
                };
                let value = outcome?; // a failed body commits nothing and is not retried
                yield_now().await;
                let mut guard = fdb.lock().unwrap();
                if now_ms().saturating_sub(started) > TOO_OLD_MS
                    || guard.conflicts(version, &keys, &ranges)
                {
                    guard.retries += 1;
                    drop(guard);
                    continue;
                }
                let unknown_result = guard.faults.unknown_result;
                if guard.rng.gen_bool(unknown_result) {
                    // commit_unknown_result: applied or not, the client cannot tell and runs
                    // the body again.
                    if guard.rng.gen_bool(0.5) {
                        guard.apply(writes);
                    }
                    guard.retries += 1;
                    drop(guard);
                    continue;
                }
                guard.apply(writes);
                return Ok(value);
            },
        }
    }

    /// [`SimStore::run`] for a body that may refuse: a refusal rolls back what it wrote.
    pub(crate) async fn run_or_refuse<T, E>(
        &self,
        mut body: impl FnMut(&mut dyn KvTransaction) -> Result<Result<T, E>>,
    ) -> Result<Result<T, E>> {
        let mut refusal = None;
        let outcome = self
            .run(|tx| match body(tx)? {
                Ok(value) => Ok(value),
                Err(e) => {
                    refusal = Some(e);
                    Err(Error::Refused)
                }
            })
            .await;
        match outcome {
            Ok(value) => Ok(Ok(value)),
            Err(Error::Refused) => Ok(Err(refusal.expect("a refusal was kept"))),
            Err(other) => Err(other),
        }
    }

    /// [`SimStore::run`] as process `process` commits its writes, as
    /// [`SimStore::run_grouped_or_refuse`] does.
    pub(crate) async fn run_grouped<T: Send + 'static>(
        &self,
        process: &str,
        body: impl Body<T> + Send + 'static,
    ) -> Result<T> {
        match self.handle(process) {
            Some(store) => {
                yield_now().await;
                crate::exec::wait_for(store.run_grouped(body))
            }
            None => self.run(body).await,
        }
    }

    /// [`SimStore::run_or_refuse`] as process `process` commits its writes: on the embedded
    /// store through that process's own handle and the product's group commit
    /// (`Store::run_grouped_or_refuse`: its thread, and what it makes of a body that panics),
    /// waited for on this thread — one body at a time, so that a group is of one and the seed
    /// replays exactly; on FoundationDB semantics as [`SimStore::run_or_refuse`].
    pub(crate) async fn run_grouped_or_refuse<T, E>(
        &self,
        process: &str,
        body: impl Body<Result<T, E>> + Send + 'static,
    ) -> Result<Result<T, E>>
    where
        T: Send + 'static,
        E: Send + 'static,
    {
        match self.handle(process) {
            Some(store) => {
                yield_now().await;
                crate::exec::wait_for(store.run_grouped_or_refuse(body))
            }
            None => self.run_or_refuse(body).await,
        }
    }

    /// Process `process`'s own handle on the embedded store (none on FoundationDB semantics).
    fn handle(&self, process: &str) -> Option<Store> {
        match &self.engine {
            Engine::Sqlite(_, handles, _) => Some(handles.of(process)),
            Engine::Fdb(_) => None,
        }
    }

    /// Process `process` ended (killed): its handle on the store, and with it its group
    /// commit, end too; its next start opens its own.
    pub(crate) fn process_ended(&self, process: &str) {
        if let Engine::Sqlite(_, handles, _) = &self.engine {
            handles.open.lock().unwrap().remove(process);
        }
    }

    /// A read of the committed data, at once (for the invariants, which observe from outside).
    pub(crate) fn read<T>(&self, mut body: impl FnMut(&mut dyn KvRead) -> Result<T>) -> Result<T> {
        match &self.engine {
            Engine::Sqlite(store, ..) => store.read(body),
            Engine::Fdb(fdb) => {
                let guard = fdb.lock().unwrap();
                let mut tx = SimTx {
                    data: &guard.data,
                    writes: Vec::new(),
                    read_keys: HashSet::new(),
                    read_ranges: Vec::new(),
                    size: 0,
                };
                body(&mut tx)
            }
        }
    }
}
