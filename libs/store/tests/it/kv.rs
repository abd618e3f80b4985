//! The key-value contract: reads, writes, ranges, atomicity, retries, idempotent re-runs.

use crate::test_store;
use sigcast_store::{Backend, Error, Store, StoreConfig};
use std::time::Duration;

fn counter(store: &Store) -> u64 {
    let key = store.root().pack(&("counter",));
    store
        .read(|tx| {
            Ok(tx
                .get(&key)?
                .map_or(0, |v| u64::from_be_bytes(v.try_into().unwrap())))
        })
        .unwrap()
}

/// One read-modify-write increment of a shared counter.
pub(crate) fn increment(store: &Store) {
    let key = store.root().pack(&("counter",));
    store
        .run(|tx| {
            let value = tx
                .get(&key)?
                .map_or(0, |v| u64::from_be_bytes(v.try_into().unwrap()));
            tx.set(&key, &(value + 1).to_be_bytes())
        })
        .unwrap();
}

pub(crate) fn read_counter(store: &Store) -> u64 {
    counter(store)
}

#[test]
fn get_set_clear_and_read_your_writes() {
    let t = test_store("basic");
    let s = &t.store;
    let a = s.root().pack(&("k", "a"));
    assert_eq!(s.read(|tx| tx.get(&a)).unwrap(), None);
    let seen = s
        .run(|tx| {
            tx.set(&a, b"1")?;
            tx.get(&a)
        })
        .unwrap();
    assert_eq!(
        seen.as_deref(),
        Some(&b"1"[..]),
        "a transaction sees its own writes"
    );
    assert_eq!(s.read(|tx| tx.get(&a)).unwrap().as_deref(), Some(&b"1"[..]));
    s.run(|tx| tx.set(&a, b"2")).unwrap();
    assert_eq!(
        s.read(|tx| tx.get(&a)).unwrap().as_deref(),
        Some(&b"2"[..]),
        "set overwrites"
    );
    s.run(|tx| tx.clear(&a)).unwrap();
    assert_eq!(s.read(|tx| tx.get(&a)).unwrap(), None);
}

#[test]
fn ranges_are_ordered_limited_and_reversible() {
    let t = test_store("ranges");
    let s = &t.store;
    let items = s.root().subspace(&("items",));
    s.run(|tx| {
        // Inserted out of order, with integers whose byte order differs from naive encoding.
        for n in [300i64, -5, 2, 10, 1, 0] {
            tx.set(&items.pack(&(n,)), n.to_string().as_bytes())?;
        }
        tx.set(&s.root().pack(&("itemz",)), b"outside")
    })
    .unwrap();
    let (begin, end) = items.range();
    let all = s
        .read(|tx| tx.get_range(&begin, &end, usize::MAX, false))
        .unwrap();
    let values: Vec<String> = all
        .iter()
        .map(|(_, v)| String::from_utf8(v.clone()).unwrap())
        .collect();
    assert_eq!(
        values,
        ["-5", "0", "1", "2", "10", "300"],
        "tuple order, nothing outside the subspace"
    );
    let first_two = s.read(|tx| tx.get_range(&begin, &end, 2, false)).unwrap();
    assert_eq!(first_two.len(), 2);
    let last_two = s.read(|tx| tx.get_range(&begin, &end, 2, true)).unwrap();
    assert_eq!(
        last_two
            .iter()
            .map(|(_, v)| v.as_slice())
            .collect::<Vec<_>>(),
        [&b"300"[..], b"10"]
    );
    let (mid_begin, mid_end) = (items.pack(&(1i64,)), items.pack(&(10i64,)));
    s.run(|tx| tx.clear_range(&mid_begin, &mid_end)).unwrap();
    let left = s
        .read(|tx| tx.get_range(&begin, &end, usize::MAX, false))
        .unwrap();
    assert_eq!(left.len(), 4, "clear_range removes [1, 10) only");
}

#[test]
fn a_failed_body_changes_nothing() {
    let t = test_store("atomic");
    let s = &t.store;
    let (a, b) = (s.root().pack(&("a",)), s.root().pack(&("b",)));
    let result: Result<(), Error> = s.run(|tx| {
        tx.set(&a, b"x")?;
        tx.set(&b, b"y")?;
        Err(Error::Corrupt {
            what: "test",
            key: String::new(),
            reason: "abort on purpose".into(),
        })
    });
    assert!(
        matches!(result, Err(Error::Corrupt { .. })),
        "a non-retryable error is returned as is"
    );
    assert_eq!(
        s.read(|tx| Ok((tx.get(&a)?, tx.get(&b)?))).unwrap(),
        (None, None)
    );
}

#[test]
fn concurrent_read_modify_writes_lose_nothing() {
    let t = test_store("conflicts");
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let store = t.store.clone();
            std::thread::spawn(move || (0..100).for_each(|_| increment(&store)))
        })
        .collect();
    threads.into_iter().for_each(|h| h.join().unwrap());
    assert_eq!(counter(&t.store), 800);
}

#[test]
fn a_committed_body_run_again_changes_nothing() {
    // What a caller does after a commit whose result was unknown: run the same body again.
    // The body records its own idempotency token with its effect, so the second run finds the
    // token and does nothing.
    let t = test_store("rerun");
    let s = &t.store;
    let token = s.root().pack(&("applied", "transfer-42"));
    let balance = s.root().pack(&("balance",));
    let body = |tx: &mut dyn sigcast_store::KvTransaction| {
        if tx.get(&token)?.is_some() {
            return Ok(false);
        }
        let value = tx
            .get(&balance)?
            .map_or(0, |v| u64::from_be_bytes(v.try_into().unwrap()));
        tx.set(&balance, &(value + 42).to_be_bytes())?;
        tx.set(&token, b"")?;
        Ok(true)
    };
    assert!(s.run(body).unwrap(), "first run applies");
    assert!(!s.run(body).unwrap(), "second run finds its token");
    let stored = s.read(|tx| tx.get(&balance)).unwrap().unwrap();
    assert_eq!(u64::from_be_bytes(stored.try_into().unwrap()), 42);
}

#[test]
fn a_busy_database_is_retried_until_the_lock_is_released() {
    let t = test_store("busy");
    if t.config.backend != Backend::Sqlite {
        return; // FoundationDB has no lock to hold; its conflicts are covered above.
    }
    // A short busy timeout: the runner's retry loop, not the busy handler, bridges the lock;
    // the default: the busy handler does.
    for (busy_timeout_ms, count) in [(20, 1), (StoreConfig::default().busy_timeout_ms, 2)] {
        let config = StoreConfig {
            busy_timeout_ms,
            ..t.config.clone()
        };
        let store = Store::open(&config).unwrap();
        let holder = rusqlite::Connection::open(&config.path).unwrap();
        holder.execute_batch("BEGIN IMMEDIATE").unwrap();
        let writer = std::thread::spawn(move || increment(&store));
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            !writer.is_finished(),
            "the write waits while another process holds the lock"
        );
        holder.execute_batch("COMMIT").unwrap();
        writer
            .join()
            .expect("the write succeeds once the lock is free");
        assert_eq!(counter(&t.store), count);
    }
}

#[test]
fn a_busy_timeout_past_what_sqlite_counts_in_milliseconds_opens_and_writes() {
    let t = test_store("long-busy");
    if t.config.backend != Backend::Sqlite {
        return;
    }
    // SQLite's own timeout is an i32 of milliseconds (24.8 days); the setting is a u64.
    let config = StoreConfig {
        busy_timeout_ms: u64::MAX,
        ..t.config.clone()
    };
    let store = Store::open(&config).expect("opens with any busy timeout");
    increment(&store);
    assert_eq!(counter(&t.store), 1);
}

#[test]
fn a_full_store_refuses_the_whole_write_keeps_reading_and_takes_writes_when_space_returns() {
    let t = test_store("full");
    if t.config.backend != Backend::Sqlite {
        return; // A size limit of the embedded file; a cluster's space is the cluster's.
    }
    let limited = StoreConfig {
        max_size_mb: Some(1),
        ..t.config.clone()
    };
    let store = Store::open(&limited).unwrap();
    let value = vec![7u8; 60_000];
    let write = |store: &Store, n: u32| {
        store.run(|tx| {
            // Two keys per transaction: neither may be stored without the other.
            tx.set(format!("full/{n}/a").as_bytes(), &value)?;
            tx.set(format!("full/{n}/b").as_bytes(), &value)?;
            Ok(())
        })
    };
    let mut written = 0;
    let error = loop {
        match write(&store, written) {
            Ok(()) => written += 1,
            Err(error) => break error,
        }
        assert!(written < 100, "1 MiB took more than 100 writes of 120 kB");
    };
    assert!(error.is_full(), "{error}");
    assert!(written >= 4, "only {written} writes fit in 1 MiB");
    let read = |store: &Store, key: String| store.read(|tx| tx.get(key.as_bytes())).unwrap();
    assert!(read(&store, format!("full/{}/a", written - 1)).is_some());
    assert!(read(&store, format!("full/{written}/a")).is_none());
    assert!(read(&store, format!("full/{written}/b")).is_none());
    // Space back (a larger limit, as a larger disk): the refused write goes through.
    drop(store);
    let roomier = Store::open(&StoreConfig {
        max_size_mb: Some(4),
        ..t.config.clone()
    })
    .unwrap();
    write(&roomier, written).unwrap();
    assert!(read(&roomier, format!("full/{written}/b")).is_some());
    assert!(read(&roomier, "full/0/a".to_owned()).is_some());
}

#[test]
fn a_store_written_by_a_newer_format_is_refused_not_misread() {
    let t = test_store("format");
    let s = &t.store;
    // Opening recorded this build's format; checking again with it is fine.
    s.check_format(sigcast_store::FORMAT_VERSION).unwrap();
    // A newer build records its format; this one must now refuse the store.
    s.check_format(sigcast_store::FORMAT_VERSION + 1).unwrap();
    let error = s.check_format(sigcast_store::FORMAT_VERSION).unwrap_err();
    assert!(
        matches!(error, sigcast_store::Error::NewerFormat { found, ours }
            if found == sigcast_store::FORMAT_VERSION + 1 && ours == sigcast_store::FORMAT_VERSION),
        "{error}"
    );
}

#[test]
fn a_process_running_when_a_newer_build_raises_the_format_writes_no_more() {
    // Opened at this build's format; then a newer build opens the store and raises it.
    let t = test_store("format-raised");
    let running = &t.store;
    let key = running.root().pack(&("written",));
    running.run(|tx| tx.set(&key, b"before")).unwrap();
    let newer = Store::open(&t.config).unwrap();
    newer
        .check_format(sigcast_store::FORMAT_VERSION + 1)
        .unwrap();
    // What the running process would write could drop what it cannot read: refused, alone
    // or grouped; reads go on.
    let refused = running.run(|tx| tx.set(&key, b"after")).unwrap_err();
    assert!(
        matches!(refused, Error::NewerFormat { found, ours }
            if found == sigcast_store::FORMAT_VERSION + 1 && ours == sigcast_store::FORMAT_VERSION),
        "{refused}"
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let grouped = runtime.block_on(running.run_grouped({
        let key = key.clone();
        move |tx| tx.set(&key, b"grouped")
    }));
    assert!(
        matches!(grouped, Err(Error::NewerFormat { .. })),
        "{grouped:?}"
    );
    assert_eq!(
        running.read(|tx| tx.get(&key)).unwrap().as_deref(),
        Some(&b"before"[..])
    );
    // And says so where liveness probes ask: only a restart (which refuses the store at its
    // opening) helps.
    let dead = running
        .check_group_commit(std::time::Instant::now())
        .unwrap_err();
    assert!(matches!(dead, Error::NewerFormat { .. }), "{dead}");
}

#[test]
fn grouped_transactions_lose_nothing_and_one_failure_fails_no_other() {
    let t = test_store("grouped");
    let store = t.store.clone();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let key = store.root().pack(&("counter",));
    let results = runtime.block_on(async {
        let tasks: Vec<_> = (0..300)
            .map(|i| {
                let store = store.clone();
                let key = key.clone();
                tokio::spawn(async move {
                    store
                        .run_grouped(move |tx| {
                            if i == 150 {
                                return Err(Error::Task("this body fails".into()));
                            }
                            let value = tx
                                .get(&key)?
                                .map_or(0, |v| u64::from_be_bytes(v.try_into().unwrap()));
                            tx.set(&key, &(value + 1).to_be_bytes())?;
                            Ok(value + 1)
                        })
                        .await
                })
            })
            .collect();
        let mut results = Vec::new();
        for task in tasks {
            results.push(task.await.unwrap());
        }
        results
    });
    let failed: Vec<usize> = results
        .iter()
        .enumerate()
        .filter(|(_, r)| r.is_err())
        .map(|(i, _)| i)
        .collect();
    assert_eq!(failed, [150], "only the failing body fails");
    // Every other body committed exactly once, and each saw the ones before it.
    assert_eq!(counter(&store), 299);
    let mut seen: Vec<u64> = results.into_iter().filter_map(Result::ok).collect();
    seen.sort_unstable();
    assert_eq!(seen, (1..=299).collect::<Vec<_>>());
}

#[test]
fn a_panic_outside_any_body_does_not_end_group_commit() {
    // A value a body holds panics when the group-commit thread drops it, after the body ran
    // and outside the body's own guard: the thread must survive that too.
    struct PanicsOnDrop;
    impl Drop for PanicsOnDrop {
        fn drop(&mut self) {
            if !std::thread::panicking() {
                panic!("a bug in a value a transaction body held");
            }
        }
    }
    let t = test_store("group-drop-panic");
    let store = t.store.clone();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (first, second) = (
        store.root().pack(&("first",)),
        store.root().pack(&("second",)),
    );
    runtime.block_on(async {
        let held = PanicsOnDrop;
        let key = first.clone();
        store
            .run_grouped(move |tx| {
                let _held = &held;
                tx.set(&key, b"written")
            })
            .await
            .expect("its caller is answered before the value is dropped");
        let key = second.clone();
        store
            .run_grouped(move |tx| tx.set(&key, b"written"))
            .await
            .expect("later grouped transactions still commit");
    });
    for key in [&first, &second] {
        assert_eq!(
            store.read(|tx| tx.get(key)).unwrap().as_deref(),
            Some(&b"written"[..])
        );
    }
    assert!(store.check_group_commit(std::time::Instant::now()).is_ok());
}

#[test]
fn a_grouped_transaction_whose_caller_gave_up_before_its_turn_never_runs() {
    // Under overload callers time out while their transactions wait in the queue; running
    // them anyway would spend the store on answers nobody reads, and the queue would only
    // grow. A caller that gave up learns nothing either way: its transaction's outcome is
    // unknown to it, as after any cancellation, and its retry reads it again.
    use std::future::Future;
    let t = test_store("group-abandoned");
    let store = t.store.clone();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (entered_tx, entered) = std::sync::mpsc::channel::<()>();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let released = std::sync::Mutex::new(released);
    let blocking = {
        let store = store.clone();
        runtime.spawn(async move {
            store
                .run_grouped(move |_tx| {
                    let _ = entered_tx.send(());
                    let _ = released.lock().unwrap().recv();
                    Ok(())
                })
                .await
        })
    };
    entered.recv().unwrap();
    // Queued behind it, then abandoned by its caller.
    let ran = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let abandoned_key = store.root().pack(&("abandoned",));
    let mut abandoned = Box::pin(store.run_grouped({
        let (ran, key) = (ran.clone(), abandoned_key.clone());
        move |tx| {
            ran.store(true, std::sync::atomic::Ordering::SeqCst);
            tx.set(&key, b"written")
        }
    }));
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    assert!(abandoned.as_mut().poll(&mut context).is_pending(), "queued");
    drop(abandoned);
    release.send(()).unwrap();
    runtime.block_on(blocking).unwrap().unwrap();
    // A transaction queued after it has committed: the queue has passed it.
    let later = store.root().pack(&("later",));
    runtime
        .block_on(store.run_grouped({
            let key = later.clone();
            move |tx| tx.set(&key, b"written")
        }))
        .unwrap();
    assert!(store.read(|tx| tx.get(&later)).unwrap().is_some());
    assert!(
        !ran.load(std::sync::atomic::Ordering::SeqCst),
        "the abandoned body ran"
    );
    assert_eq!(store.read(|tx| tx.get(&abandoned_key)).unwrap(), None);
}

#[test]
fn a_group_commit_stuck_in_one_transaction_is_reported_stalled() {
    let t = test_store("group-stall");
    let store = t.store.clone();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (entered_tx, entered) = std::sync::mpsc::channel::<()>();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let released = std::sync::Mutex::new(released);
    let key = store.root().pack(&("stalled",));
    let blocked = {
        let store = store.clone();
        runtime.spawn(async move {
            store
                .run_grouped(move |tx| {
                    let _ = entered_tx.send(());
                    // Stands for a body stuck in I/O that never returns (a disk that stopped answering).
                    let _ = released.lock().unwrap().recv();
                    tx.set(&key, b"at last")
                })
                .await
        })
    };
    entered.recv().unwrap();
    let now = std::time::Instant::now();
    assert!(
        store.check_group_commit(now).is_ok(),
        "a transaction in progress is not yet stalled"
    );
    let later = now + store.group_commit_stall_after() + std::time::Duration::from_secs(1);
    let stalled = store
        .check_group_commit(later)
        .expect_err("one transaction running past the bound is a stall");
    assert!(
        matches!(stalled, Error::GroupCommitStalled { .. }),
        "{stalled}"
    );
    release.send(()).unwrap();
    runtime.block_on(blocked).unwrap().unwrap();
    assert!(
        store.check_group_commit(later).is_ok(),
        "an idle group commit is never stalled"
    );
}

#[test]
fn a_group_commit_is_stalled_only_past_the_longest_a_healthy_transaction_takes() {
    // SQLite: retrying a busy database for a minute, the last attempt waiting the busy
    // timeout; a longer busy timeout gives a later bound, never a restart loop under load.
    let dir = tempfile::tempdir().unwrap();
    let mut config = StoreConfig::sqlite(dir.path().join("store.db"));
    config.busy_timeout_ms = 90_000;
    let store = Store::open(&config).unwrap();
    assert_eq!(store.group_commit_stall_after(), Duration::from_secs(300));
}

#[test]
fn a_panicking_grouped_body_fails_its_caller_and_group_commit_goes_on() {
    let t = test_store("group-panic");
    let store = t.store.clone();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let key = store.root().pack(&("after",));
    runtime.block_on(async {
        let panicked = store
            .run_grouped(|_tx| -> Result<(), Error> { panic!("a bug inside a transaction body") })
            .await;
        assert!(
            panicked.is_err(),
            "the caller of a panicking body gets an error"
        );
        let key = key.clone();
        store
            .run_grouped(move |tx| tx.set(&key, b"written"))
            .await
            .expect("later grouped transactions still commit");
    });
    assert_eq!(
        store.read(|tx| tx.get(&key)).unwrap().as_deref(),
        Some(&b"written"[..])
    );
}

#[test]
fn a_point_read_answers_from_the_committed_state_while_a_writer_holds_its_transaction() {
    let t = test_store("point-read");
    let store = t.store.clone();
    let key = store.root().pack(&("k", "point"));
    store.run(|tx| tx.set(&key, b"old")).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let point = |store: &Store| {
        let key = key.clone();
        let store = store.clone();
        runtime.block_on(async move { store.read_point(move |tx| tx.get(&key)).await })
    };
    // A writer in the middle of its transaction: it has written and not committed.
    let (written, wait_written) = std::sync::mpsc::channel();
    let (release, wait_release) = std::sync::mpsc::channel::<()>();
    let writer = {
        let store = store.clone();
        let key = key.clone();
        std::thread::spawn(move || {
            let wait_release = std::sync::Mutex::new(wait_release);
            store
                .run(|tx| {
                    tx.set(&key, b"new")?;
                    let _ = written.send(());
                    let _ = wait_release
                        .lock()
                        .unwrap()
                        .recv_timeout(Duration::from_secs(10));
                    Ok(())
                })
                .unwrap();
        })
    };
    wait_written.recv().unwrap();
    assert_eq!(
        point(&store).unwrap().as_deref(),
        Some(&b"old"[..]),
        "answered without waiting for the writer, from what is committed"
    );
    release.send(()).unwrap();
    writer.join().unwrap();
    assert_eq!(point(&store).unwrap().as_deref(), Some(&b"new"[..]));
    let absent = store.root().pack(&("k", "absent"));
    assert_eq!(
        runtime
            .block_on(store.read_point(move |tx| tx.get(&absent)))
            .unwrap(),
        None
    );
}

#[test]
fn a_point_read_that_reads_twice_sees_one_snapshot_while_writers_commit_between_its_reads() {
    let t = test_store("point-read-twice");
    let store = t.store.clone();
    let (a, b) = (
        store.root().pack(&("k", "a")),
        store.root().pack(&("k", "b")),
    );
    let write_both = {
        let (store, a, b) = (store.clone(), a.clone(), b.clone());
        move |n: u64| {
            store
                .run(|tx| {
                    tx.set(&a, &n.to_be_bytes())?;
                    tx.set(&b, &n.to_be_bytes())
                })
                .unwrap()
        }
    };
    write_both(0);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    // Between its two reads the body has another writer commit both keys: however often it
    // runs, what it answers must come from one state (a == b).
    let mut written = 0;
    let (first, second) = runtime
        .block_on(store.read_point(move |tx| {
            let first = tx.get(&a)?;
            written += 1;
            write_both(written);
            let second = tx.get(&b)?;
            Ok((first, second))
        }))
        .unwrap();
    assert!(first.is_some());
    assert_eq!(first, second, "the two reads of one body saw two states");
}
