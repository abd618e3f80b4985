//! A deterministic executor: every task is a future polled one step at a time, in an order
//! drawn from the seed, on one thread, against a simulated clock. A task yields at every point
//! where another process could act (a store commit, an RPC request, a sleep); the executor
//! may also drop a task there — a crash.

use rand::Rng;
use rand::rngs::StdRng;
use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, RawWaker, RawWakerVTable, Waker};
use std::time::{Duration, SystemTime};

thread_local! {
    static NOW_MS: Cell<u64> = const { Cell::new(0) };
    static SLEEP_UNTIL: Cell<Option<u64>> = const { Cell::new(None) };
}

/// Simulated milliseconds since the start.
pub(crate) fn now_ms() -> u64 {
    NOW_MS.with(Cell::get)
}

/// The simulated wall clock, as the protocol is given it.
pub(crate) fn system_time() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000) + Duration::from_millis(now_ms())
}

/// The simulated clock as a monotonic instant (a fixed origin plus the simulated time): what
/// the broadcaster's pass cache keeps, and for how long, follows the simulation, not the
/// machine it runs on.
pub(crate) fn instant() -> std::time::Instant {
    static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    *ORIGIN.get_or_init(std::time::Instant::now) + Duration::from_millis(now_ms())
}

pub(crate) fn reset_clock() {
    NOW_MS.with(|n| n.set(0));
    SLEEP_UNTIL.with(|s| s.set(None));
}

/// A point where other tasks may run.
pub(crate) struct Yield(bool);

impl Future for Yield {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            Poll::Pending
        }
    }
}

/// Lets other tasks run before going on.
pub(crate) fn yield_now() -> Yield {
    Yield(false)
}

/// Waits until the simulated clock reaches a time.
pub(crate) struct Sleep(u64);

impl Future for Sleep {
    type Output = ();
    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        if now_ms() >= self.0 {
            Poll::Ready(())
        } else {
            SLEEP_UNTIL.with(|s| s.set(Some(self.0)));
            Poll::Pending
        }
    }
}

/// Sleeps `ms` simulated milliseconds.
pub(crate) fn sleep(ms: u64) -> Sleep {
    Sleep(now_ms() + ms)
}

/// Takes `ms` simulated milliseconds (an answer's latency); at 0, other tasks may still run
/// first.
pub(crate) async fn take_time(ms: u64) {
    if ms > 0 {
        sleep(ms).await;
    } else {
        yield_now().await;
    }
}

/// Waits, blocking this thread, for a future another thread completes (the store's
/// group-commit thread); no simulated time passes and no other task runs meanwhile.
pub(crate) fn wait_for<F: Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(std::sync::Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        match future.as_mut().poll(&mut cx) {
            Poll::Ready(output) => return output,
            Poll::Pending => std::thread::park(),
        }
    }
}

pub(crate) type Task = Pin<Box<dyn Future<Output = ()>>>;

struct Slot {
    name: String,
    future: Task,
    wake_at: u64,
}

/// The tasks of one simulation.
#[derive(Default)]
pub(crate) struct Executor {
    tasks: Vec<Slot>,
}

fn noop_waker() -> Waker {
    fn clone(_: *const ()) -> RawWaker {
        RawWaker::new(std::ptr::null(), &VTABLE)
    }
    fn noop(_: *const ()) {}
    static VTABLE: RawWakerVTable = RawWakerVTable::new(clone, noop, noop, noop);
    // SAFETY: every function of the vtable ignores its data pointer.
    unsafe { Waker::from_raw(RawWaker::new(std::ptr::null(), &VTABLE)) }
}

impl Executor {
    /// Adds a task named `name`.
    pub(crate) fn spawn(
        &mut self,
        name: impl Into<String>,
        future: impl Future<Output = ()> + 'static,
    ) {
        self.tasks.push(Slot {
            name: name.into(),
            future: Box::pin(future),
            wake_at: now_ms(),
        });
    }

    /// Drops the task named `name` where it stands (a crash); whether there was one.
    pub(crate) fn kill(&mut self, name: &str) -> bool {
        let before = self.tasks.len();
        self.tasks.retain(|t| t.name != name);
        self.tasks.len() != before
    }

    /// Polls one runnable task, chosen by `rng`, or moves the clock to the next wake-up.
    /// Returns the name of the task polled, if one was.
    pub(crate) fn step(&mut self, rng: &mut StdRng) -> Option<String> {
        let now = now_ms();
        let runnable: Vec<usize> = (0..self.tasks.len())
            .filter(|&i| self.tasks[i].wake_at <= now)
            .collect();
        if runnable.is_empty() {
            let next = self.tasks.iter().map(|t| t.wake_at).min()?;
            NOW_MS.with(|n| n.set(next.max(now + 1)));
            return None;
        }
        let index = runnable[rng.gen_range(0..runnable.len())];
        let waker = noop_waker();
        let mut cx = Context::from_waker(&waker);
        SLEEP_UNTIL.with(|s| s.set(None));
        let done = self.tasks[index].future.as_mut().poll(&mut cx).is_ready();
        let name = self.tasks[index].name.clone();
        if done {
            self.tasks.remove(index);
        } else {
            // A yield runs again at once; a sleep when its time comes.
            let until = SLEEP_UNTIL.with(Cell::take);
            self.tasks[index].wake_at = until.unwrap_or(now);
        }
        // Every step takes a little simulated time.
        NOW_MS.with(|n| n.set(n.get() + rng.gen_range(0..=1)));
        Some(name)
    }
}
