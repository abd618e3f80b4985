//! The simulation on a Solana cluster: slots and block heights, blockhash expiry, durable
//! nonces (advanced by another holder too), endpoints with a pruned history, statuses not yet
//! indexed or missing from an answer, failed executions, forks of the unconfirmed tip. Inside
//! run the product's `decide` and `lifetime`, its status reader
//! (`sigcast_solana::evidence::read_view`), its send classification, the record functions,
//! the store's bodies and the signer's Solana signing body (`sign_solana_attempt`) with
//! in-process keys.

mod actors;
mod check;
mod cluster;
mod endpoint;

use crate::exec::{Executor, sleep};
use crate::kv::{self, Backend};
use crate::world::{Base, Tamper};
use crate::{Limits, Report, drive};
use cluster::Cluster;
use endpoint::{SolEndpoint, SolFaults};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sigcast_protocol::Rules;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::{Arc, Mutex};

/// The cluster's name in the operations' chain (`solana:sim`).
pub(crate) const CLUSTER: &str = "sim";

/// What one Solana seed simulates.
#[derive(Debug, Clone)]
pub struct SolanaSettings {
    /// The store backend.
    pub backend: Backend,
    /// Keys (fee payers) of the signer.
    pub accounts: usize,
    /// Durable-nonce accounts registered for each key (0: its operations use blockhashes).
    pub nonce_accounts: Vec<usize>,
    /// Operations submitted.
    pub ops: usize,
    /// Endpoints of the cluster.
    pub endpoints: usize,
    /// Signer replicas.
    pub signers: usize,
    /// Broadcaster replicas.
    pub broadcasters: usize,
    /// Blocks a blockhash lives for.
    pub max_age: u64,
    /// Most transactions per block.
    pub per_block: usize,
    /// Share of transfers whose execution fails.
    pub fail_rate: f64,
    /// Submits spread over this long.
    pub submit_spread_ms: u64,
    /// Share of operations cancelled.
    pub cancel_rate: f64,
    /// How long faults go on.
    pub fault_ms: u64,
    /// How long after the faults every operation must be terminal.
    pub settle_ms: u64,
    /// Chance per step that a replica is killed (while faults go on).
    pub crash_rate: f64,
    /// Share of commits with an unknown result (FoundationDB semantics).
    pub unknown_commits: f64,
    /// Another holder of the keys advances their nonce accounts.
    pub outside_advances: bool,
    /// The unconfirmed tip is abandoned now and then.
    pub forks: bool,
    /// Endpoints may answer statuses from another node behind their URL, far behind.
    pub balanced_statuses: bool,
    /// A broken decision, if any.
    pub tamper: Tamper,
}

impl SolanaSettings {
    /// The settings seed `seed` draws.
    pub fn draw(seed: u64) -> Self {
        let (mut settings, mut rng) = Self::draw_up_to_two_replicas(seed);
        crate::draw_third_replicas(&mut rng, &mut settings.signers, &mut settings.broadcasters);
        // Drawn after everything a seed drew before, so the seeds found before it (and
        // replayed `as_found`) run as they did.
        settings.balanced_statuses = rng.gen_bool(0.5);
        settings
    }

    /// The settings seed `seed` drew when it found a defect: before a third replica was drawn.
    pub fn as_found(seed: u64) -> Self {
        Self::draw_up_to_two_replicas(seed).0
    }

    fn draw_up_to_two_replicas(seed: u64) -> (Self, StdRng) {
        let mut rng = StdRng::seed_from_u64(seed ^ 0x0050_1a4a);
        let accounts = rng.gen_range(1..=3);
        let settings = Self {
            backend: if rng.gen_bool(0.8) {
                Backend::Fdb
            } else {
                Backend::Sqlite
            },
            accounts,
            nonce_accounts: (0..accounts)
                .map(|_| {
                    if rng.gen_bool(0.5) {
                        rng.gen_range(1..=2)
                    } else {
                        0
                    }
                })
                .collect(),
            ops: rng.gen_range(4..=16),
            endpoints: rng.gen_range(1..=3),
            signers: rng.gen_range(1..=2),
            broadcasters: rng.gen_range(1..=2),
            max_age: rng.gen_range(6..=16),
            per_block: rng.gen_range(1..=6),
            fail_rate: if rng.gen_bool(0.3) { 0.15 } else { 0.0 },
            submit_spread_ms: rng.gen_range(50..1_500),
            cancel_rate: if rng.gen_bool(0.4) { 0.25 } else { 0.0 },
            fault_ms: rng.gen_range(10_000..30_000),
            settle_ms: 90_000,
            crash_rate: if rng.gen_bool(0.5) { 0.002 } else { 0.0 },
            unknown_commits: if rng.gen_bool(0.5) { 0.05 } else { 0.0 },
            outside_advances: rng.gen_bool(0.4),
            forks: rng.gen_bool(0.5),
            balanced_statuses: false,
            tamper: Tamper::None,
        };
        (settings, rng)
    }
}

/// A durable-nonce account and one of its values.
pub(crate) type NonceValue = ([u8; 32], [u8; 32]);

/// Everything a Solana simulation shares.
pub(crate) struct SolWorld {
    base: Base,
    pub(crate) settings: SolanaSettings,
    pub(crate) cluster: Arc<Mutex<Cluster>>,
    pub(crate) endpoints: Vec<SolEndpoint>,
    /// The signer's keys.
    pub(crate) keys: Vec<ed25519_dalek::SigningKey>,
    /// Their public keys.
    pub(crate) accounts: Vec<[u8; 32]>,
    /// Durable-nonce accounts, with the index of the key that is their authority.
    pub(crate) nonce_accounts: Vec<([u8; 32], usize)>,
    pub(crate) rules: Rules,
    pub(crate) sign_jobs: crate::actors::SignQueue<actors::Purpose>,
    /// Which operation signed over each nonce account's value first.
    pub(crate) nonce_users: Mutex<BTreeMap<NonceValue, String>>,
}

impl std::ops::Deref for SolWorld {
    type Target = Base;
    fn deref(&self) -> &Base {
        &self.base
    }
}

pub(crate) fn b58(bytes: &[u8]) -> String {
    bs58::encode(bytes).into_string()
}

/// Runs one Solana seed with `settings`; `live_trace` prints the trace as it goes.
pub fn run(seed: u64, settings: SolanaSettings, live_trace: bool) -> Report {
    crate::exec::reset_clock();
    let mut rng = StdRng::seed_from_u64(seed);
    let keys: Vec<ed25519_dalek::SigningKey> = (0..settings.accounts)
        .map(|i| {
            let mut secret = [0u8; 32];
            secret[..8].copy_from_slice(&seed.to_be_bytes());
            secret[31] = i as u8 + 1;
            ed25519_dalek::SigningKey::from_bytes(&secret)
        })
        .collect();
    let accounts: Vec<[u8; 32]> = keys.iter().map(|k| k.verifying_key().to_bytes()).collect();
    let nonce_accounts: Vec<([u8; 32], usize)> = settings
        .nonce_accounts
        .iter()
        .enumerate()
        .flat_map(|(key, &count)| {
            (0..count).map(move |j| {
                let mut account = [0x6e; 32];
                account[0] = key as u8;
                account[1] = j as u8;
                (account, key)
            })
        })
        .collect();
    let cluster = Arc::new(Mutex::new(Cluster::new(
        &nonce_accounts
            .iter()
            .map(|(account, key)| (*account, accounts[*key]))
            .collect::<Vec<_>>(),
        settings.max_age,
        settings.per_block,
        settings.fail_rate,
    )));
    let endpoints = (0..settings.endpoints)
        .map(|i| SolEndpoint::new(i, cluster.clone(), StdRng::seed_from_u64(seed + i as u64)))
        .collect();
    let store = kv::SimStore::open(
        settings.backend,
        kv::FdbFaults {
            unknown_result: settings.unknown_commits,
        },
        StdRng::seed_from_u64(seed.wrapping_mul(31)),
    );
    let rules = Rules {
        solana_commitment: sigcast_protocol::Commitment::Confirmed,
        check_after: std::time::Duration::from_millis(500),
        rebroadcast_after: std::time::Duration::from_millis(2_000),
        ..Rules::default()
    };
    let world = Rc::new(SolWorld {
        base: Base::new(store, live_trace),
        settings: settings.clone(),
        cluster: cluster.clone(),
        endpoints,
        keys,
        accounts,
        nonce_accounts,
        rules,
        sign_jobs: Mutex::default(),
        nonce_users: Mutex::default(),
    });
    world.trace(format!("seed {seed} (solana): {settings:?}"));

    let mut executor = Executor::default();
    let fork = |rng: &mut StdRng| StdRng::seed_from_u64(rng.r#gen());
    executor.spawn("gateway", actors::gateway(world.clone(), fork(&mut rng)));
    if settings.outside_advances && !world.nonce_accounts.is_empty() {
        executor.spawn("outside", outside_holder(world.clone(), fork(&mut rng)));
    }
    let processes = crate::replicas(settings.signers, settings.broadcasters);
    for name in &processes {
        start(&mut executor, &world, name, fork(&mut rng));
    }
    executor.spawn("leader", leader(world.clone(), fork(&mut rng)));
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
    let blocks = cluster.lock().unwrap().blocks.len() as u64;
    Report::of(seed, &settings, &world, steps, blocks)
}

fn start(executor: &mut Executor, world: &Rc<SolWorld>, name: &str, rng: StdRng) {
    let future: std::pin::Pin<Box<dyn std::future::Future<Output = ()>>> =
        if name.starts_with("signer") {
            Box::pin(actors::signer(world.clone(), name.to_owned(), rng))
        } else {
            Box::pin(actors::broadcaster(world.clone(), name.to_owned(), rng))
        };
    executor.spawn(name, future);
}

/// A slot about every 400 ms.
async fn leader(world: Rc<SolWorld>, mut rng: StdRng) {
    loop {
        sleep(rng.gen_range(300..500)).await;
        world.cluster.lock().unwrap().produce(&mut rng);
        world.check_now();
    }
}

/// Each endpoint catches up with the cluster now and then.
async fn syncer(world: Rc<SolWorld>, index: usize, mut rng: StdRng) {
    loop {
        sleep(rng.gen_range(100..1_500)).await;
        let cluster = world.cluster.lock().unwrap();
        world.endpoints[index].node.lock().unwrap().sync(&cluster);
    }
}

/// Another holder of the keys advances their nonce accounts now and then (while faults go on).
async fn outside_holder(world: Rc<SolWorld>, mut rng: StdRng) {
    let mut count = 0u64;
    while world.faulty() {
        sleep(rng.gen_range(3_000..12_000)).await;
        if !world.faulty() {
            return;
        }
        let (account, _) = world.nonce_accounts[rng.gen_range(0..world.nonce_accounts.len())];
        let mut cluster = world.cluster.lock().unwrap();
        let Some(value) = cluster.tip().nonces.get(&account).copied() else {
            continue;
        };
        count += 1;
        let signature = format!("outside-{count}");
        let taken = cluster.submit(cluster::SolTx {
            signature: signature.clone(),
            blockhash: value,
            nonce_account: Some(account),
            transfers: false,
        });
        drop(cluster);
        world.trace(format!(
            "outside: advances nonce account {} ({taken:?})",
            b58(&account)
        ));
    }
}

/// Faults while they go on: endpoints misbehave, the tip forks, the leaders lose their queue.
async fn chaos(world: Rc<SolWorld>, mut rng: StdRng) {
    while world.faulty() {
        sleep(rng.gen_range(500..4_000)).await;
        if !world.faulty() {
            break;
        }
        let index = rng.gen_range(0..world.endpoints.len());
        let faults = SolFaults {
            lag: if rng.gen_bool(0.3) {
                rng.gen_range(1..6)
            } else {
                0
            },
            frozen: rng.gen_bool(0.1),
            down: rng.gen_bool(0.1),
            slow_ms: if rng.gen_bool(0.3) {
                rng.gen_range(100..3_000)
            } else {
                0
            },
            // Endpoint 0 is an archive: some endpoint must reach every signing slot for
            // "never landed" to be provable at all (an operation whose signing slot every
            // endpoint pruned stays SENT, by design).
            history_slots: rng
                .gen_bool(0.3)
                .then(|| rng.gen_range(2..20))
                .filter(|_| index != 0),
            statuses_behind: if rng.gen_bool(0.3) {
                rng.gen_range(1..cluster::FINAL_DEPTH)
            } else {
                0
            },
            short_statuses: rng.gen_bool(0.15),
            balanced_behind: if world.settings.balanced_statuses && rng.gen_bool(0.15) {
                rng.gen_range(1..3 * cluster::FINAL_DEPTH)
            } else {
                0
            },
            no_minimum_ledger_slot: rng.gen_bool(0.2),
            lose_before: if rng.gen_bool(0.3) { 0.3 } else { 0.0 },
            lose_after: if rng.gen_bool(0.3) { 0.3 } else { 0.0 },
        };
        world.trace(format!("chaos: solana-{index} {faults:?}"));
        world.endpoints[index].node.lock().unwrap().faults = faults;
        if world.settings.forks && rng.gen_bool(0.3) {
            world.cluster.lock().unwrap().fork(&mut rng);
            world.trace("chaos: the tip forked away".into());
            world.check_now();
        }
        if rng.gen_bool(0.2) {
            world.cluster.lock().unwrap().drop_queued(&mut rng);
            world.trace("chaos: the leaders lost part of their queue".into());
        }
    }
    for endpoint in &world.endpoints {
        endpoint.node.lock().unwrap().faults = SolFaults::default();
    }
    world.trace("chaos: healed".into());
}
