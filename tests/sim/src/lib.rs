//! A deterministic simulation of sigcast's protocol, FoundationDB-style: one seed decides
//! everything — how many accounts, endpoints and replicas, the store backend, which endpoint
//! lags, freezes, shows state before receipts or prunes, which sends are lost before or after
//! the pool took them, when the chain reorganises and another holder of the keys sends, when
//! a signer or broadcaster replica is killed, which commits have an unknown result, which
//! signatures the key's token refuses, which operations carry 100 kB of calldata — and the
//! order in which every process takes its next step. The product's own code runs inside:
//! `sigcast_protocol::decide`, the evidence readers of `sigcast_evm`, the record functions, the
//! store's transaction bodies and work listing, and the signer's signing bodies (alone and in
//! batches) with in-process keys or a token that fails, committed on the embedded store through
//! each signer process's own group commit (whose bodies panic now and then in some seeds), as
//! the broadcasters' record updates and the gateway's submits and cancels are through theirs;
//! the signer's rule for each endpoint's answer at start; in some seeds, the endpoint pool's
//! hedged reads and ranking (`sigcast_jsonrpc::hedge`) for the signer's reads, and a backlog of
//! another chain's operations.
//! The invariants of `check` are checked after every change of the chain and every settlement,
//! and, once the faults stop, every operation must be terminal within a bound.
//!
//! The `solana` module runs the same on a simulated Solana cluster (slots, blockhash expiry,
//! durable nonces, pruned histories, failed executions).
//!
//! Not simulated: Solana instruction lists, the gRPC layers, group commit's grouping of
//! concurrent bodies, and the gateway's validation (each covered by other tests).

/// `println!` that ends the process quietly when stdout is closed (`sigcast-sim run | head`)
/// instead of panicking.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {{
        use ::std::io::Write as _;
        if writeln!(::std::io::stdout().lock(), $($arg)*).is_err() {
            ::std::process::exit(0);
        }
    }};
}

mod actors;
mod chain;
mod check;
mod exec;
mod hedged;
mod kv;
pub mod model;
mod node;
pub mod solana;
mod world;

pub use kv::Backend;
pub use world::{Settings, Tamper};

use alloy_signer_local::PrivateKeySigner;
use exec::{Executor, now_ms, sleep};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use world::World;

/// What one seed did.
#[derive(Debug)]
pub struct Report {
    /// The seed.
    pub seed: u64,
    /// Its settings, as drawn.
    pub settings: String,
    /// Invariants broken (empty: the seed passed).
    pub violations: Vec<String>,
    /// The trace's last lines.
    pub trace: Vec<String>,
    /// Steps taken.
    pub steps: u64,
    /// Simulated time, in milliseconds.
    pub sim_ms: u64,
    /// Blocks mined, and reorganisations.
    pub blocks: u64,
    /// Transactions retried by the simulated FoundationDB.
    pub retries: u64,
}

impl Settings {
    /// The settings seed `seed` draws.
    pub fn draw(seed: u64) -> Self {
        let (mut settings, mut rng) = Self::draw_up_to_two_replicas(seed);
        draw_third_replicas(&mut rng, &mut settings.signers, &mut settings.broadcasters);
        // From a generator of their own, so that every other setting stays as it was drawn
        // (and `as_found`, which does not draw them, keeps the settings seeds found defects
        // with).
        let mut hedged = StdRng::seed_from_u64(seed ^ 0x4ed9e);
        settings.hedged_reads = hedged.gen_bool(0.5);
        let streams = settings.hedged_reads
            && settings.burst_ms.is_none()
            // Where a commit costs little: the reads are what these seeds are for.
            && settings.backend == Backend::Fdb
            && !settings.large_calls;
        // Also from a generator of its own, for the same reason.
        settings.balanced_nodes =
            settings.endpoints > 1 && StdRng::seed_from_u64(seed ^ 0xba1a).gen_bool(0.5);
        if streams && hedged.gen_bool(0.5) {
            // A stream of submits while the faults go on: signatures, and so reads, all along,
            // while endpoints turn slow and heal. (Each submit waits up to `submit_spread_ms`
            // after the last.)
            settings.ops = hedged.gen_range(16..=32);
            let gap = 2 * settings.fault_ms / settings.ops as u64;
            settings.submit_spread_ms = hedged.gen_range(gap / 2..=gap);
        }
        settings
    }

    /// The settings as drawn before a third replica could be, and the generator after them.
    fn draw_up_to_two_replicas(seed: u64) -> (Self, StdRng) {
        let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
        let max_reorg = rng.gen_range(0..=2);
        let mut settings = Settings {
            backend: if rng.gen_bool(0.8) {
                Backend::Fdb
            } else {
                Backend::Sqlite
            },
            accounts: rng.gen_range(1..=3),
            ops: rng.gen_range(4..=16),
            endpoints: rng.gen_range(1..=3),
            signers: rng.gen_range(1..=2),
            broadcasters: rng.gen_range(1..=2),
            max_reorg,
            confirmations: max_reorg as u64 + 1,
            submit_spread_ms: rng.gen_range(50..1_500),
            cancel_rate: if rng.gen_bool(0.3) { 0.2 } else { 0.0 },
            poll_ms: 200,
            fault_ms: rng.gen_range(10_000..30_000),
            settle_ms: 150_000,
            crash_rate: if rng.gen_bool(0.5) { 0.002 } else { 0.0 },
            gas_limit: rng.gen_range(2..=8),
            unknown_commits: if rng.gen_bool(0.5) { 0.05 } else { 0.0 },
            outside_sender: rng.gen_bool(0.4),
            // Drawn last, so that the settings drawn before them stay those of earlier
            // versions, seed for seed.
            token_failures: if rng.gen_bool(0.3) { 0.1 } else { 0.0 },
            large_calls: rng.gen_bool(0.1),
            backlog: if rng.gen_bool(0.05) { 1_100 } else { 0 },
            batch_signing: rng.gen_bool(0.5),
            burst_ms: None,
            shared_lists: false,
            body_panics: 0.0,
            hedged_reads: false,
            balanced_nodes: false,
            tamper: Tamper::None,
        };
        if settings.batch_signing && rng.gen_bool(0.5) {
            // Submits in a burst, so that an account has many operations to sign at once.
            settings.burst_ms = Some(rng.gen_range(5..200));
        }
        settings.shared_lists = rng.gen_bool(0.5);
        // From a generator of their own, so that every other setting stays as it was drawn.
        let mut panics = StdRng::seed_from_u64(seed ^ 0xba0d);
        if settings.backend == Backend::Sqlite && panics.gen_bool(0.5) {
            settings.body_panics = 0.05;
        }
        (settings, rng)
    }

    /// The settings seed `seed` drew when it found a defect, before first signatures were
    /// drawn to be asked for in batches, before replicas shared receipt outcomes, before a
    /// third replica was drawn and before the signer's reads were hedged.
    pub fn as_found(seed: u64) -> Self {
        Settings {
            batch_signing: false,
            burst_ms: None,
            shared_lists: false,
            body_panics: 0.0,
            ..Self::draw_up_to_two_replicas(seed).0
        }
    }
}

/// Keeps the simulated panics of transaction bodies (`Settings::body_panics`), which happen on
/// a store's group-commit thread, out of the output; every other panic is reported as before.
fn quiet_simulated_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let payload = info.payload();
            let message = payload
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| payload.downcast_ref::<String>().map(String::as_str));
            let on_group_commit =
                std::thread::current().name() == Some(sigcast_store::GROUP_COMMIT_THREAD);
            if !(on_group_commit && message == Some(world::SIMULATED_PANIC)) {
                previous(info);
            }
        }));
    });
}

/// Runs one seed with `settings`; `live_trace` prints the trace as it goes (a replay).
pub fn run(seed: u64, settings: Settings, live_trace: bool) -> Report {
    quiet_simulated_panics();
    exec::reset_clock();
    let mut rng = StdRng::seed_from_u64(seed);
    let chain = Arc::new(Mutex::new(chain::Chain::new(settings.gas_limit)));
    let mut endpoints: Vec<node::SimEndpoint> = (0..settings.endpoints)
        .map(|i| node::SimEndpoint::new(i, chain.clone(), StdRng::seed_from_u64(seed + i as u64)))
        .collect();
    if settings.balanced_nodes && endpoints.len() > 1 {
        // Endpoint 0's URL leads to its node or to endpoint 1's, read by read.
        let other = endpoints[1].clone();
        endpoints[0].balance_with(&other, StdRng::seed_from_u64(seed ^ 0xba1a));
    }
    let store = kv::SimStore::open(
        settings.backend,
        kv::FdbFaults {
            unknown_result: settings.unknown_commits,
        },
        StdRng::seed_from_u64(seed.wrapping_mul(31)),
    );
    let keys: Vec<PrivateKeySigner> = (0..settings.accounts)
        .map(|i| {
            let mut bytes = [0u8; 32];
            bytes[..8].copy_from_slice(&seed.to_be_bytes());
            bytes[31] = i as u8 + 1;
            PrivateKeySigner::from_bytes(&bytes.into()).expect("a valid key")
        })
        .collect();
    let rules = sigcast_protocol::Rules {
        confirmations: match settings.tamper {
            Tamper::NoDepth => 1,
            _ => settings.confirmations,
        },
        check_after: std::time::Duration::from_millis(500),
        rebroadcast_after: std::time::Duration::from_millis(3_000),
        fee_bump_after: Some(std::time::Duration::from_millis(8_000)),
        max_fee_bumps: match settings.tamper {
            Tamper::UnboundedBumps => u32::MAX,
            _ => world::MAX_FEE_BUMPS,
        },
        ..sigcast_protocol::Rules::default()
    };
    let world = Rc::new(World::new(
        settings.clone(),
        chain.clone(),
        endpoints,
        store,
        keys,
        rules,
        StdRng::seed_from_u64(seed ^ 0x70ce),
        live_trace,
    ));
    world.trace(format!("seed {seed}: {settings:?}"));

    let mut executor = Executor::default();
    let fork = |rng: &mut StdRng| StdRng::seed_from_u64(rng.r#gen());
    executor.spawn("gateway", actors::gateway(world.clone(), fork(&mut rng)));
    if settings.outside_sender {
        executor.spawn(
            "outside",
            actors::outside_sender(world.clone(), fork(&mut rng)),
        );
    }
    let processes = replicas(settings.signers, settings.broadcasters);
    for name in &processes {
        start(&mut executor, &world, name, fork(&mut rng));
    }
    executor.spawn("miner", miner(world.clone(), fork(&mut rng)));
    executor.spawn("chaos", chaos(world.clone(), fork(&mut rng)));
    for i in 0..settings.endpoints {
        executor.spawn(
            format!("sync-{i}"),
            syncer(world.clone(), i, fork(&mut rng)),
        );
    }

    let limits = Limits {
        crash_rate: settings.crash_rate,
        fault_ms: settings.fault_ms,
        settle_ms: settings.settle_ms,
        ops: settings.ops,
    };
    let steps = drive(
        &mut executor,
        &mut rng,
        &world,
        &processes,
        limits,
        |executor, name, rng| start(executor, &world, name, rng),
        |end| check::check(&world, end),
    );
    let blocks = chain.lock().unwrap().blocks.len() as u64;
    Report::of(seed, &settings, &world, steps, blocks)
}

impl Report {
    /// What seed `seed` with `settings` did in `world`, in `steps`, over `blocks` blocks.
    pub(crate) fn of(
        seed: u64,
        settings: &impl std::fmt::Debug,
        world: &world::Base,
        steps: u64,
        blocks: u64,
    ) -> Self {
        Report {
            seed,
            settings: format!("{settings:?}"),
            violations: world.violations(),
            trace: world.trace_lines(),
            steps,
            sim_ms: now_ms(),
            blocks,
            retries: world.store.retries(),
        }
    }
}

/// A third signer, and a third broadcaster, each in one seed of ten: drawn after every other
/// setting, so that those stay as they were drawn before, seed for seed.
pub(crate) fn draw_third_replicas(rng: &mut StdRng, signers: &mut usize, broadcasters: &mut usize) {
    if rng.gen_bool(0.1) {
        *signers = 3;
    }
    if rng.gen_bool(0.1) {
        *broadcasters = 3;
    }
}

/// The names of `signers` signer and `broadcasters` broadcaster replicas.
pub(crate) fn replicas(signers: usize, broadcasters: usize) -> Vec<String> {
    (0..signers)
        .map(|i| format!("signer-{i}"))
        .chain((0..broadcasters).map(|i| format!("broadcaster-{i}")))
        .collect()
}

fn start(executor: &mut Executor, world: &Rc<World>, name: &str, rng: StdRng) {
    let future: std::pin::Pin<Box<dyn std::future::Future<Output = ()>>> =
        if name.starts_with("signer") {
            Box::pin(actors::signer(world.clone(), name.to_owned(), rng))
        } else {
            Box::pin(actors::broadcaster(world.clone(), name.to_owned(), rng))
        };
    executor.spawn(name, future);
}

/// How long a run's faults go on, how long it then has to settle, and how often a replica is
/// killed meanwhile.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    crash_rate: f64,
    fault_ms: u64,
    settle_ms: u64,
    ops: usize,
}

/// Runs a world's tasks one step at a time until every operation is terminal once the faults
/// stopped, the settling time is over, or an invariant broke: kills and restarts replicas
/// while faults go on, and checks the invariants when asked and every 500 steps. Returns the
/// steps taken.
pub(crate) fn drive(
    executor: &mut Executor,
    rng: &mut StdRng,
    world: &world::Base,
    processes: &[String],
    limits: Limits,
    start: impl Fn(&mut Executor, &str, StdRng),
    check: impl Fn(bool),
) -> u64 {
    let mut steps = 0u64;
    let mut restarts: Vec<(u64, String)> = Vec::new();
    loop {
        steps += 1;
        executor.step(rng);
        for (name, future) in world.take_spawns() {
            executor.spawn(name, future);
        }
        if world.faulty() {
            if rng.gen_bool(limits.crash_rate) {
                let name = &processes[rng.gen_range(0..processes.len())];
                if executor.kill(name) {
                    world.store.process_ended(name);
                    world.trace(format!("CRASH {name}"));
                    restarts.push((now_ms() + rng.gen_range(100..3_000), name.clone()));
                }
            }
            if now_ms() >= limits.fault_ms {
                world.end_faults();
                world.trace("faults end".into());
            }
        }
        restarts.retain(|(at, name)| {
            if now_ms() >= *at || !world.faulty() {
                world.trace(format!("RESTART {name}"));
                start(executor, name, StdRng::seed_from_u64(*at));
                false
            } else {
                true
            }
        });
        if world.take_check() || steps.is_multiple_of(500) {
            check(false);
        }
        let done = !world.faulty() && all_terminal(world, limits.ops);
        let overdue = now_ms() > limits.fault_ms + limits.settle_ms;
        if done || overdue || !world.violations().is_empty() {
            if world.violations().is_empty() {
                check(true);
            }
            return steps;
        }
    }
}

fn all_terminal(world: &world::Base, ops: usize) -> bool {
    let ids = world.submitted.lock().unwrap().clone();
    if ids.len() < ops {
        return false;
    }
    let root = world.store.root().clone();
    world
        .store
        .read(|tx| {
            for id in &ids {
                let Some(op) = sigcast_store::operations::get(tx, &root, id)? else {
                    return Ok(false);
                };
                if !matches!(
                    op.state(),
                    sigcast_proto::pb::OperationState::Confirmed
                        | sigcast_proto::pb::OperationState::Rejected
                        | sigcast_proto::pb::OperationState::Cancelled
                ) {
                    return Ok(false);
                }
            }
            Ok(true)
        })
        .unwrap_or(false)
}

/// A block about every second.
async fn miner(world: Rc<World>, mut rng: StdRng) {
    loop {
        sleep(rng.gen_range(800..1_200)).await;
        world.chain.lock().unwrap().mine(&mut rng);
        world.check_now();
    }
}

/// Each endpoint catches up with the chain now and then.
async fn syncer(world: Rc<World>, index: usize, mut rng: StdRng) {
    loop {
        sleep(rng.gen_range(100..1_500)).await;
        let chain = world.chain.lock().unwrap();
        world.endpoints[index].node.lock().unwrap().sync(&chain);
    }
}

/// Faults while they go on: endpoints misbehave, the chain reorganises, the pool evicts.
async fn chaos(world: Rc<World>, mut rng: StdRng) {
    while world.faulty() {
        sleep(rng.gen_range(500..4_000)).await;
        if !world.faulty() {
            break;
        }
        let index = rng.gen_range(0..world.endpoints.len());
        let faults = node::NodeFaults {
            lag: if rng.gen_bool(0.3) {
                rng.gen_range(1..4)
            } else {
                0
            },
            frozen: rng.gen_bool(0.1),
            down: rng.gen_bool(0.1),
            receipts_behind_state: if rng.gen_bool(0.4) {
                rng.gen_range(1..4)
            } else {
                0
            },
            slow_ms: if rng.gen_bool(0.3) {
                rng.gen_range(100..4_000)
            } else {
                0
            },
            receipts_kept: rng.gen_bool(0.2).then(|| rng.gen_range(1..6)),
            state_kept: rng.gen_bool(0.2).then(|| rng.gen_range(2..8)),
            lose_before: if rng.gen_bool(0.3) { 0.3 } else { 0.0 },
            lose_after: if rng.gen_bool(0.3) { 0.3 } else { 0.0 },
        };
        world.trace(format!("chaos: node-{index} {faults:?}"));
        world.endpoints[index].node.lock().unwrap().faults = faults;
        if world.settings.max_reorg > 0 && rng.gen_bool(0.25) {
            let depth = rng.gen_range(1..=world.settings.max_reorg);
            world
                .chain
                .lock()
                .unwrap()
                .reorg(depth, 0.7, Vec::new(), &mut rng);
            world.trace(format!("chaos: reorg of {depth}"));
            world.check_now();
        }
        if rng.gen_bool(0.2) {
            world.chain.lock().unwrap().evict(&mut rng);
        }
        if rng.gen_bool(0.1) {
            let mut chain = world.chain.lock().unwrap();
            chain.base_fee = if chain.base_fee > 1_000_000_000 {
                1_000_000_000
            } else {
                40_000_000_000
            };
            world.trace(format!("chaos: base fee {}", chain.base_fee));
        }
    }
    for endpoint in &world.endpoints {
        endpoint.node.lock().unwrap().faults = node::NodeFaults::default();
    }
    world.chain.lock().unwrap().base_fee = 1_000_000_000;
    world.trace("chaos: healed".into());
}
