//! Everything one simulation shares: its settings, chain, endpoints, store, keys, the signer's
//! job queue, what was sent, the trace, and the violations found.

use crate::actors::{Purpose, SignQueue};
use crate::chain::Chain;
use crate::exec::{Task, now_ms};
use crate::kv::{Backend, SimStore};
use crate::node::SimEndpoint;
use alloy_signer_local::PrivateKeySigner;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sigcast_evm::Address;
use sigcast_protocol::Rules;
use sigcast_signer::keys::{DigestSigner, KeyHandle, KeystoreKey};
use sigcast_store::KvTransaction;
use sigcast_store::operations::Guard;
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Mutex;

/// A deliberately broken decision, to show the simulation catches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tamper {
    /// The product's decisions.
    None,
    /// REJECTED on a nonce past ours with a null receipt (the load generator's defect).
    NullReceiptRejects,
    /// Decided changes applied whatever the record's revision (the replica defect).
    IgnoreRevision,
    /// Settled at depth 1 whatever the reorganisations (the no-depth REJECTED defect).
    NoDepth,
    /// Fee bumps without a count limit (the unbounded-bumps defect).
    UnboundedBumps,
    /// Fees signed without the chain's cap (the unbounded-fees defect).
    Uncapped,
    /// Solana: an endpoint's history taken to reach every slot, whatever it says (the
    /// pruned-history defect: "never landed" read from a history that forgot the landing).
    TrustPrunedHistory,
    /// Solana: a status list shorter than the signatures asked read as "the rest unknown"
    /// (the one-entry-per-signature defect).
    ShortStatuses,
    /// Solana: a cancelled blockhash operation sent again while its blockhash lives (the
    /// cancel defect).
    CancelResends,
    /// Solana: a nonce account read before the signing slot taken as proof of an advance
    /// (the stale-nonce defect the simulation found).
    IgnoreNonceSlot,
    /// Solana: an endpoint's first slot kept read before the statuses, not after (the
    /// pruned-during-the-read defect the simulation found).
    HistoryReadFirst,
    /// Solana: the statuses taken whatever slot their node had reached (the load-balancer
    /// defect: empty statuses from a node behind the landing, the height from one ahead).
    IgnoreStatusesSlot,
    /// EVM: the signer skips another sender's nonce as soon as the head shows it used, not
    /// at the confirmation depth (the reorged-gap defect the simulation found).
    LatestNonce,
    /// EVM: a signing transaction whose body refused (the token failed after the nonce was
    /// allocated) is committed with what it wrote (the orphaned-nonce defect).
    CommitRefusals,
    /// EVM: the broadcaster's work listed as it once was: the first 1,000 operations of a state
    /// by op_id, other chains' dropped afterwards (the starved-by-a-backlog defect).
    ListByOpId,
    /// EVM: the signer refuses to start when an endpoint of any chain it is configured for
    /// does not answer (the one-chain-down defect: every chain stopped with it).
    StartNeedsEveryChain,
    /// EVM: a hedged read settled by one endpoint drops the requests still in flight without
    /// counting the time they took (the hedged-latency defect: an endpoint that turned slow
    /// kept its fast average, and every read started there and waited for the hedge).
    AbandonedUnrecorded,
    /// EVM: a landing taken at the depth its endpoint's head says, the blocks above it never
    /// linked to it (the load-balancer defect: the head from one node, the receipt from
    /// another that still holds a block a reorg removed).
    IgnoreDepthLink,
}

impl Tamper {
    /// Every tamper, by its command-line name.
    pub const ALL: [(&str, Tamper); 18] = [
        ("none", Tamper::None),
        ("null-receipt-rejects", Tamper::NullReceiptRejects),
        ("ignore-revision", Tamper::IgnoreRevision),
        ("no-depth", Tamper::NoDepth),
        ("unbounded-bumps", Tamper::UnboundedBumps),
        ("uncapped", Tamper::Uncapped),
        ("trust-pruned-history", Tamper::TrustPrunedHistory),
        ("short-statuses", Tamper::ShortStatuses),
        ("cancel-resends", Tamper::CancelResends),
        ("ignore-nonce-slot", Tamper::IgnoreNonceSlot),
        ("history-read-first", Tamper::HistoryReadFirst),
        ("ignore-statuses-slot", Tamper::IgnoreStatusesSlot),
        ("latest-nonce", Tamper::LatestNonce),
        ("commit-refusals", Tamper::CommitRefusals),
        ("list-by-op-id", Tamper::ListByOpId),
        ("start-needs-every-chain", Tamper::StartNeedsEveryChain),
        ("abandoned-unrecorded", Tamper::AbandonedUnrecorded),
        ("ignore-depth-link", Tamper::IgnoreDepthLink),
    ];
}

/// The signer's fee cap in the simulation, per gas: below the base fee of the chaos's fee
/// spikes, so capped transactions wait, and bumps meet the cap.
pub(crate) const FEE_CAP: u128 = 25_000_000_000;
/// What a simulated defect in a transaction body panics with (kept out of the test output).
pub(crate) const SIMULATED_PANIC: &str = "a simulated defect in a transaction body";
/// The broadcaster's limit of fee bumps per operation.
pub(crate) const MAX_FEE_BUMPS: u32 = 3;

/// A PKCS#11 token with a device error: every signature fails.
struct FailingToken;

impl DigestSigner for FailingToken {
    fn sign_digest(&self, _: &sigcast_evm::B256) -> Result<sigcast_evm::Signature, String> {
        Err("token: signing: CKR_DEVICE_ERROR".into())
    }

    fn backend(&self) -> &'static str {
        "pkcs11"
    }
}

/// What one seed simulates.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The store backend.
    pub backend: Backend,
    /// Accounts (keys) of the signer.
    pub accounts: usize,
    /// Operations submitted.
    pub ops: usize,
    /// Endpoints of the chain.
    pub endpoints: usize,
    /// Signer replicas.
    pub signers: usize,
    /// Broadcaster replicas.
    pub broadcasters: usize,
    /// Deepest reorganisation.
    pub max_reorg: usize,
    /// The broadcaster's confirmation depth.
    pub confirmations: u64,
    /// Submits spread over this long.
    pub submit_spread_ms: u64,
    /// Share of operations cancelled.
    pub cancel_rate: f64,
    /// The broadcaster's poll.
    pub poll_ms: u64,
    /// How long faults go on.
    pub fault_ms: u64,
    /// How long after the faults every operation must be terminal.
    pub settle_ms: u64,
    /// Chance per step that a signer or broadcaster replica is killed (while faults go on).
    pub crash_rate: f64,
    /// Most transactions per block.
    pub gas_limit: usize,
    /// Share of commits with an unknown result (FoundationDB semantics).
    pub unknown_commits: f64,
    /// Another holder of the keys sends at their nonces.
    pub outside_sender: bool,
    /// Share of signatures the key refuses while faults go on, as a PKCS#11 token with a
    /// device error does: after the nonce is allocated, inside the signing transaction.
    pub token_failures: f64,
    /// Share of signing transaction bodies that panic while faults go on (a defect in the
    /// product's own code, met by one operation): on the embedded store, run by the signer's
    /// group commit, which must fail that signature alone and go on committing.
    pub body_panics: f64,
    /// A third of the operations are contract calls with 100–120 kB of calldata: records and
    /// payloads larger than one FoundationDB value.
    pub large_calls: bool,
    /// Operations of another chain stored before the run, sorted before its own (a backlog
    /// no simulated process serves).
    pub backlog: usize,
    /// First signatures are asked for account by account, many in one call, and signed in one
    /// transaction (the signer's batches), instead of one by one.
    pub batch_signing: bool,
    /// With batch signing, submits spread over this long instead of `submit_spread_ms`: a
    /// burst, so that an account has many operations to sign at once.
    pub burst_ms: Option<u64>,
    /// Broadcaster replicas share blocks' receipt outcomes through the store, and each keeps
    /// its blocks' lists across passes, as the worker does: one replica reads a block's list
    /// and the others take its outcomes.
    pub shared_lists: bool,
    /// The signer reads as the product's pool does: fees hedged across the endpoints and an
    /// account's nonces from one endpoint at a time, both in the order of the process's own
    /// ranking of them (see `hedged`), instead of from one endpoint drawn per signature.
    pub hedged_reads: bool,
    /// Behind the first endpoint's URL, two nodes (the first two endpoints'), each read
    /// answered by either (a load balancer).
    pub balanced_nodes: bool,
    /// A broken decision, if any.
    pub tamper: Tamper,
}

/// What every simulated world has, whatever its chain: the store, the op_ids accepted, the
/// trace, the violations found, the tasks started from inside others, whether faults go on,
/// and the bytes sent of every attempt.
pub(crate) struct Base {
    /// The store.
    pub(crate) store: SimStore,
    /// The op_ids accepted so far.
    pub(crate) submitted: Mutex<Vec<String>>,
    trace: RefCell<VecDeque<String>>,
    live_trace: bool,
    violations: RefCell<Vec<String>>,
    spawns: RefCell<Vec<(String, Task)>>,
    faulty: Cell<bool>,
    check: Cell<bool>,
    sent: RefCell<HashMap<(String, u32), Vec<u8>>>,
}

/// Everything an EVM simulation shares.
pub(crate) struct World {
    base: Base,
    /// Its settings.
    pub(crate) settings: Settings,
    /// The chain.
    pub(crate) chain: std::sync::Arc<Mutex<Chain>>,
    /// Its endpoints.
    pub(crate) endpoints: Vec<SimEndpoint>,
    /// The signer's keys.
    pub(crate) keys: Vec<PrivateKeySigner>,
    /// Their handles as the signer loads a keystore's (libsecp256k1).
    signing: Vec<KeyHandle>,
    /// Their accounts.
    pub(crate) accounts: Vec<Address>,
    /// The broadcaster's decision settings.
    pub(crate) rules: Rules,
    /// Requests waiting for a signer replica.
    pub(crate) sign_jobs: SignQueue<Purpose>,
    /// Transactions of the keys sent outside sigcast.
    pub(crate) foreign: Mutex<HashSet<String>>,
    /// Draws the token's failures, apart from every other draw.
    token: RefCell<StdRng>,
    /// Draws the bodies that panic, apart from every other draw.
    panics: RefCell<StdRng>,
}

impl std::ops::Deref for World {
    type Target = Base;
    fn deref(&self) -> &Base {
        &self.base
    }
}

/// Trace lines kept for a failure report.
const TRACE_KEPT: usize = 400;

impl World {
    /// A world over the given parts.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        settings: Settings,
        chain: std::sync::Arc<Mutex<Chain>>,
        endpoints: Vec<SimEndpoint>,
        store: SimStore,
        keys: Vec<PrivateKeySigner>,
        rules: Rules,
        token: StdRng,
        live_trace: bool,
    ) -> Self {
        let accounts = keys.iter().map(|k| k.address()).collect();
        let signing = keys
            .iter()
            .map(|k| KeyHandle::new(KeystoreKey::new(k).expect("both libraries sign alike")))
            .collect();
        Self {
            base: Base::new(store, live_trace),
            settings,
            chain,
            endpoints,
            keys,
            signing,
            accounts,
            rules,
            sign_jobs: Mutex::default(),
            foreign: Mutex::default(),
            // Seeded from the token's generator without advancing it: the token draws as before.
            panics: RefCell::new(StdRng::seed_from_u64(token.clone().r#gen())),
            token: RefCell::new(token),
        }
    }
}

impl Base {
    /// A world's common parts over `store`.
    pub(crate) fn new(store: SimStore, live_trace: bool) -> Self {
        Self {
            store,
            submitted: Mutex::default(),
            trace: RefCell::default(),
            live_trace,
            violations: RefCell::default(),
            spawns: RefCell::default(),
            faulty: Cell::new(true),
            check: Cell::new(false),
            sent: RefCell::default(),
        }
    }

    /// Adds a line to the trace.
    pub(crate) fn trace(&self, line: String) {
        let line = format!("{:>7} ms  {line}", now_ms());
        if self.live_trace {
            crate::say!("{line}");
        }
        let mut trace = self.trace.borrow_mut();
        trace.push_back(line);
        if trace.len() > TRACE_KEPT {
            trace.pop_front();
        }
    }

    /// The trace's last lines.
    pub(crate) fn trace_lines(&self) -> Vec<String> {
        self.trace.borrow().iter().cloned().collect()
    }

    /// Records a broken invariant.
    pub(crate) fn violation(&self, what: String) {
        self.trace(format!("VIOLATION: {what}"));
        self.violations.borrow_mut().push(what);
    }

    /// The invariants broken so far.
    pub(crate) fn violations(&self) -> Vec<String> {
        self.violations.borrow().clone()
    }

    /// Starts a task from inside another.
    pub(crate) fn spawn(&self, name: String, future: impl Future<Output = ()> + 'static) {
        self.spawns.borrow_mut().push((name, Box::pin(future)));
    }

    pub(crate) fn take_spawns(&self) -> Vec<(String, Task)> {
        std::mem::take(&mut *self.spawns.borrow_mut())
    }

    /// Whether faults still go on.
    pub(crate) fn faulty(&self) -> bool {
        self.faulty.get()
    }

    pub(crate) fn end_faults(&self) {
        self.faulty.set(false);
    }

    /// Asks for the invariants to be checked after this step.
    pub(crate) fn check_now(&self) {
        self.check.set(true);
    }

    pub(crate) fn take_check(&self) -> bool {
        self.check.replace(false)
    }

    /// Whether an attempt's bytes were ever sent (left the store).
    pub(crate) fn was_sent(&self, op_id: &str, attempt: u32) -> bool {
        self.sent
            .borrow()
            .contains_key(&(op_id.to_owned(), attempt))
    }

    /// Notes the bytes sent for an attempt: every send of an attempt is byte-identical.
    pub(crate) fn same_bytes(&self, op_id: &str, attempt: u32, raw: &[u8]) {
        let mut sent = self.sent.borrow_mut();
        let key = (op_id.to_owned(), attempt);
        match sent.get(&key) {
            Some(before) if before.as_slice() != raw => {
                drop(sent);
                self.violation(format!(
                    "{op_id} attempt {attempt} was sent with other bytes than before"
                ));
            }
            Some(_) => {}
            None => {
                sent.insert(key, raw.to_vec());
            }
        }
    }
}

impl World {
    /// The fee cap the signer holds transactions to (none, broken on purpose).
    pub(crate) fn fee_cap(&self) -> u128 {
        match self.settings.tamper {
            Tamper::Uncapped => u128::MAX,
            _ => FEE_CAP,
        }
    }

    /// How deep the signer reads the account's count of another sender's transactions: the
    /// broadcaster's depth (or, broken on purpose, the head).
    pub(crate) fn signer_depth(&self) -> u64 {
        match self.settings.tamper {
            Tamper::LatestNonce => 1,
            _ => self.rules.confirmations,
        }
    }

    /// The signer's key of account `index`: in this process, or, while faults go on and at the
    /// seed's rate, one whose token refuses to sign.
    pub(crate) fn key(&self, index: usize) -> KeyHandle {
        let fails = self.faulty()
            && self.settings.token_failures > 0.0
            && self
                .token
                .borrow_mut()
                .gen_bool(self.settings.token_failures);
        if fails {
            KeyHandle::new(FailingToken)
        } else {
            self.signing[index].clone()
        }
    }

    /// Commits a signing transaction's body as signer replica `process` does: through its
    /// group commit when the key signs in the process, alone when in a token (the signer's
    /// `commit`); a refusal rolls back what it wrote (or, broken on purpose, is committed with
    /// it). While faults go on, at the seed's rate, a grouped body panics instead; a panic of
    /// the product's own body is a violation.
    pub(crate) async fn commit_signing<T, E>(
        &self,
        process: &str,
        in_process: bool,
        mut body: impl FnMut(&mut dyn KvTransaction) -> sigcast_store::Result<Result<T, E>>
        + Send
        + 'static,
    ) -> sigcast_store::Result<Result<T, E>>
    where
        T: Send + 'static,
        E: Send + 'static,
    {
        let panics = in_process
            && self.faulty()
            && self.settings.body_panics > 0.0
            && self.panics.borrow_mut().gen_bool(self.settings.body_panics);
        if panics {
            self.trace(format!("{process}: a signing body panics"));
        }
        let body = move |tx: &mut dyn KvTransaction| {
            if panics {
                panic!("{SIMULATED_PANIC}");
            }
            body(tx)
        };
        let committed = match (self.settings.tamper, in_process) {
            (Tamper::CommitRefusals, true) => self.store.run_grouped(process, body).await,
            (Tamper::CommitRefusals, false) => self.store.run(body).await,
            (_, true) => self.store.run_grouped_or_refuse(process, body).await,
            (_, false) => self.store.run_or_refuse(body).await,
        };
        if let Err(error) = &committed
            && !panics
            && error.to_string().contains("panicked")
        {
            self.violation(format!("{process}: a signing body panicked: {error}"));
        }
        committed
    }

    /// The guard of a decided change: the record's revision (or, broken on purpose, none).
    pub(crate) fn decided_guard(&self, op: &sigcast_proto::pb::Operation) -> Guard {
        match self.settings.tamper {
            Tamper::IgnoreRevision => Guard::NotTerminal,
            _ => Guard::Revision(op.revision),
        }
    }

    /// The chains intents may name.
    pub(crate) fn intent_rules(&self) -> sigcast_domain::IntentRules {
        sigcast_domain::IntentRules {
            evm_chain_ids: [31337].into(),
            solana_clusters: Default::default(),
            max_evm_call_data: usize::MAX,
        }
    }

    /// Notes the bytes sent for an attempt: every send of an attempt is byte-identical, and
    /// none offers more per gas than the cap.
    pub(crate) fn record_sent(&self, op_id: &str, attempt: u32, raw: &[u8]) {
        if let Some(params) = sigcast_evm::params_of(raw)
            && params.fees.max_per_gas() > FEE_CAP
        {
            self.violation(format!(
                "{op_id} attempt {attempt} offers {} wei per gas, above the cap of {FEE_CAP}",
                params.fees.max_per_gas()
            ));
        }
        self.same_bytes(op_id, attempt, raw);
    }
}
