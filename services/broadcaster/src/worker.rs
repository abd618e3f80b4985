//! The broadcaster's work loop: read, decide, apply.
//!
//! Each pass lists the work fairly (account by account), and for each operation calls the
//! protocol's pure `decide` — first with no evidence (is a read needed at all?), then with
//! views read one endpoint at a time while it asks for more — and applies the action. A
//! decided change is applied in one store transaction only if the record still has the
//! revision it was decided on, so a replica that read an older record never acts on it.
//! Recording what a node answered to a send is a fact, applied whatever else changed.

use crate::chains::{self, Chain, Chains, View};
use crate::config::Config;
use crate::outcomes::StoreOutcomes;
use crate::signer::{Refusal, SignerClient};
use futures::StreamExt;
use sigcast_domain::OperationState;
use sigcast_evm::EvmRpc;
use sigcast_evm::evidence::RecentReceipts;
use sigcast_proto::sigcast::signer::v1::SignPurpose;
use sigcast_proto::{pb, state_from_proto};
use sigcast_protocol::evm::replacement_base_fee;
use sigcast_protocol::record::{self, reasons};
use sigcast_protocol::{Action, Evidence, Replacement, Rules, SendOutcome, Settlement, decide};
use sigcast_runtime::clock::SteadyClock;
use sigcast_solana::SolanaRpc;
use sigcast_store::work::{PASS_BUDGET, WorkList};
use sigcast_store::{Store, accounts, operations};
use sigcast_telemetry::metrics;
use sigcast_telemetry::trace::op_span;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tracing::Instrument;

/// The signer refused a replacement at the chain's fee cap.
struct AtFeeCap;

/// First signatures asked for in one signer call (the signer takes at most 256).
const SIGN_BATCH: usize = 256;
/// SENT operations in a pass from which inclusions are read from whole blocks' receipt lists.
const BLOCK_LISTS_FROM: usize = 64;
/// How long a readiness probe may take.
const PROBE_WITHIN: Duration = Duration::from_millis(1_500);
/// How often records written by a data-format-1 process are given their work entries.
const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// `work`, its time observed as pass stage `stage`.
async fn timed<T>(stage: &'static str, work: impl std::future::Future<Output = T>) -> T {
    let started = Instant::now();
    let output = work.await;
    observe_stage(stage, started);
    output
}

fn observe_stage(stage: &'static str, started: Instant) {
    metrics::metrics()
        .pass_stage_duration
        .get_or_create(&metrics::owned(&[("stage", stage)]))
        .observe(started.elapsed().as_secs_f64());
}

/// The broadcaster's state: the store, the signer client and the chains.
#[derive(Clone)]
pub struct Worker {
    store: Store,
    signer: SignerClient,
    chains: Arc<Chains>,
    rules: Rules,
    concurrency: usize,
    work: Arc<WorkList>,
    swept: Arc<std::sync::Mutex<Option<Instant>>>,
    /// When each SENT operation's chain state was last read: read again only after
    /// `check_after`, as after a send. Without it every pass (every `poll_ms`) read every
    /// operation waiting for its block, and those reads, not the sends, were most of the
    /// node's work. Only paces reads: lost with the process, the next pass reads at once.
    read_at: Arc<std::sync::Mutex<HashMap<String, SystemTime>>>,
    /// Each EVM chain's recent blocks' receipt lists, kept across passes (see
    /// [`RecentReceipts`]).
    recent_receipts: Arc<HashMap<String, RecentReceipts>>,
    /// The time every decision and record is made with: steps of the system clock while
    /// running move nothing (see `sigcast_runtime::clock`).
    clock: SteadyClock,
}

impl Worker {
    /// A worker for `config` over `store`.
    pub fn new(config: &Config, store: Store) -> anyhow::Result<Self> {
        let timeout = Duration::from_millis(config.rpc_timeout_ms);
        let mut chains = HashMap::new();
        for chain in &config.evm_chains {
            chains.insert(
                format!("eip155:{}", chain.chain_id),
                Chain::Evm(EvmRpc::new(&chain.rpc_urls, timeout)?),
            );
        }
        for cluster in &config.solana_clusters {
            chains.insert(
                format!("solana:{}", cluster.cluster),
                Chain::Solana(
                    SolanaRpc::new(&cluster.rpc_urls, timeout)?
                        .expecting_cluster(&cluster.cluster, cluster.genesis_hash.as_deref()),
                ),
            );
        }
        // The replicas share each block's receipt list through the store; this is this
        // process among them, drawn at each start.
        let replica: u64 = rand::random();
        let recent_receipts = config
            .evm_chains
            .iter()
            .map(|chain| {
                let chain = format!("eip155:{}", chain.chain_id);
                let shared = StoreOutcomes::new(store.clone(), chain.clone(), replica);
                (chain, RecentReceipts::shared_by(Arc::new(shared)))
            })
            .collect();
        Ok(Self {
            store,
            signer: SignerClient::new(&config.signer_url, config.signer_tls.as_ref())?,
            chains: Arc::new(chains),
            rules: config.rules(),
            concurrency: config.concurrency,
            work: Arc::default(),
            swept: Arc::default(),
            read_at: Arc::default(),
            recent_receipts: Arc::new(recent_receipts),
            clock: SteadyClock::start(),
        })
    }

    /// What each dependency answers now, by its health service name: `sigcast.store`,
    /// `sigcast.signer`, and `sigcast.chain.<chain>` for each served chain (a head read from
    /// any of its endpoints). One chain's outage says nothing of the others.
    pub async fn probe(&self) -> Vec<(String, bool)> {
        // All at once, each within `PROBE_WITHIN`: one slow dependency delays no other's
        // status, and one that does not answer in time is not ready.
        let mut probes: Vec<(String, futures::future::BoxFuture<'_, bool>)> = vec![
            (
                "sigcast.store".to_owned(),
                Box::pin(async {
                    self.store
                        .read_async(|tx| tx.get(b"\x00health"))
                        .await
                        .is_ok()
                }),
            ),
            ("sigcast.signer".to_owned(), Box::pin(self.signer.answers())),
        ];
        for (name, chain) in self.chains.iter() {
            // Every endpoint's head, which also exports how far each lags; ready when one
            // endpoint of this chain (not of another chain or cluster) answers.
            probes.push((
                format!("sigcast.chain.{name}"),
                Box::pin(chains::read_heads(name, chain)),
            ));
        }
        let names: Vec<String> = probes.iter().map(|(name, _)| name.clone()).collect();
        let answers = futures::future::join_all(probes.into_iter().map(|(_, probe)| async move {
            tokio::time::timeout(PROBE_WITHIN, probe)
                .await
                .unwrap_or(false)
        }))
        .await;
        names.into_iter().zip(answers).collect()
    }

    /// One pass over the work of the served chains.
    pub async fn pass(&self) -> anyhow::Result<()> {
        // The three stages work on disjoint states and every change checks what it decided
        // on, so they run side by side: signing never waits for sends or checks.
        let started = Instant::now();
        let (signed, sent, checked) = tokio::join!(
            timed("sign", self.sign_stage()),
            timed("send", self.send_stage()),
            timed("check", self.check_stage())
        );
        self.sweep().await;
        observe_stage("pass", started);
        signed.and(sent).and(checked)
    }

    /// Now and then, work entries for records a data-format-1 process wrote (an upgrade).
    async fn sweep(&self) {
        let due = {
            let mut swept = self.swept.lock().unwrap_or_else(|p| p.into_inner());
            let due = swept.is_none_or(|at| at.elapsed() >= SWEEP_EVERY);
            if due {
                *swept = Some(Instant::now());
            }
            due
        };
        if due {
            let store = self.store.clone();
            match tokio::task::spawn_blocking(move || store.index_work()).await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => {
                    tracing::warn!(%error, "indexing work failed; next sweep retries")
                }
                Err(error) => tracing::warn!(%error, "indexing work failed"),
            }
        }
    }

    /// Declares every series the worker counts for its chains at 0 from the start (see
    /// [`metrics::declare`]); the in-flight gauges start at 0 too.
    pub fn declare_metrics(&self) {
        let m = metrics::metrics();
        for chain in self.chains.keys() {
            for outcome in ["accepted", "rejected", "unknown"] {
                metrics::declare(&m.attempts, &[("chain", chain), ("outcome", outcome)]);
            }
            metrics::declare(&m.resends, &[("chain", chain)]);
            for resolution in ["CONFIRMED", "REJECTED", "CANCELLED"] {
                metrics::declare(
                    &m.unknown_resolved,
                    &[("chain", chain), ("resolution", resolution)],
                );
            }
        }
        for state in ["SENT", "CONFIRMED", "REJECTED", "CANCELLED"] {
            metrics::declare(&m.transitions, &[("state", state)]);
        }
        for state in ["RECEIVED", "SIGNED", "SENT"] {
            let _ = m
                .in_flight
                .get_or_create(&metrics::owned(&[("state", state)]));
        }
    }

    async fn take(&self, state: pb::OperationState) -> anyhow::Result<Vec<pb::Operation>> {
        let chains: Vec<String> = self.chains.keys().cloned().collect();
        let listing = self.work.listing(state, chains, PASS_BUDGET);
        let root = self.store.root().clone();
        let taken = self
            .store
            .read_async(move |tx| listing.read(tx, &root))
            .await?;
        let ops = self.work.advance(taken);
        let name = state.as_str_name().trim_start_matches("OPERATION_STATE_");
        metrics::metrics()
            .in_flight
            .get_or_create(&metrics::owned(&[("state", name)]))
            .set(i64::try_from(ops.len()).unwrap_or(i64::MAX));
        Ok(ops)
    }

    /// RECEIVED → SIGNED (by the signer), or REJECTED if the signer refuses the operation.
    /// An account's operations are signed together, in the order they were received, up to
    /// [`SIGN_BATCH`] per call: the signer allocates their nonces and records them in one
    /// transaction.
    async fn sign_stage(&self) -> anyhow::Result<()> {
        let mut by_account: BTreeMap<(String, String), Vec<pb::Operation>> = BTreeMap::new();
        for op in self.take(pb::OperationState::Received).await? {
            by_account
                .entry((op.chain.clone(), op.account.clone()))
                .or_default()
                .push(op);
        }
        let mut batches = Vec::new();
        for mut ops in by_account.into_values() {
            ops.sort_by(|a, b| {
                let created =
                    |op: &pb::Operation| op.create_time.as_ref().map(|t| (t.seconds, t.nanos));
                created(a)
                    .cmp(&created(b))
                    .then_with(|| a.op_id.cmp(&b.op_id))
            });
            let now = self.clock.now();
            ops.retain(|op| decide(op, &Evidence::None, now, &self.rules) == Action::Sign);
            batches.extend(ops.chunks(SIGN_BATCH).map(<[_]>::to_vec));
        }
        // In an order of its own: replicas taking the same accounts in the same order would
        // race for each, and one would win them all while the other only waits behind it.
        rand::seq::SliceRandom::shuffle(batches.as_mut_slice(), &mut rand::thread_rng());
        futures::stream::iter(batches)
            .for_each_concurrent(self.concurrency, |ops| self.sign_together(ops))
            .await;
        Ok(())
    }

    /// First signatures of `ops` (one account's) in one signer call, and what each answer
    /// means for its operation.
    async fn sign_together(&self, ops: Vec<pb::Operation>) {
        let asked: Vec<(String, tracing::Span)> = ops
            .iter()
            .map(|op| (op.op_id.clone(), op_span("Sign", &op.op_id)))
            .collect();
        let answers = self.signer.sign_first(&asked).await;
        for ((op, (_, span)), answer) in ops.iter().zip(asked).zip(answers) {
            self.signed(op, answer).instrument(span).await;
        }
    }

    async fn signed(&self, op: &pb::Operation, answer: Result<u32, Refusal>) {
        match answer {
            Ok(_) => {}
            Err(Refusal::Operation(reason)) => {
                // The signer will never sign it (no key, or policy): it was never applied.
                tracing::warn!(sigcast.op_id = %op.op_id, %reason, "signer refused the operation; rejecting it");
                let settlement = Settlement {
                    state: OperationState::Rejected,
                    result: None,
                    error: Some(pb::OperationError {
                        reason: reasons::SIGNER_REFUSED.into(),
                        message: reason,
                    }),
                    evidence: None,
                };
                self.settle(op, settlement).await;
            }
            Err(Refusal::WaitingForNonceAccount) => {
                tracing::debug!(sigcast.op_id = %op.op_id, "waiting for a durable-nonce account")
            }
            Err(Refusal::Failed(status)) => {
                tracing::warn!(sigcast.op_id = %op.op_id, code = ?status.code(), message = status.message(), "signing failed; will retry")
            }
            // Only a replacement meets the cap (a first signature is held to it).
            Err(Refusal::AtFeeCap) => {}
        }
    }

    /// SIGNED → SENT. Sends of one account go out in nonce order; accounts proceed side by
    /// side.
    async fn send_stage(&self) -> anyhow::Result<()> {
        let mut by_account: BTreeMap<(String, String), Vec<pb::Operation>> = BTreeMap::new();
        for op in self.take(pb::OperationState::Signed).await? {
            by_account
                .entry((op.chain.clone(), op.account.clone()))
                .or_default()
                .push(op);
        }
        futures::stream::iter(by_account.into_values())
            .for_each_concurrent(self.concurrency, |mut ops| async move {
                ops.sort_by_key(sigcast_protocol::evm::nonce_of);
                self.first_sends(ops).await;
            })
            .await;
        Ok(())
    }

    /// First sends of one account's SIGNED operations, in nonce order. Every attempt is
    /// recorded as being sent before any of them goes out (the records commit together), each
    /// goes to one endpoint in turn, and their outcomes are recorded together after. A crash in
    /// between leaves them SENT without an outcome: read from chain state, as any unknown one.
    async fn first_sends(&self, ops: Vec<pb::Operation>) {
        let prepared = futures::future::join_all(ops.into_iter().map(|op| {
            let span = op_span("FirstSend", &op.op_id);
            let prepare = self.prepare_first_send(op).instrument(span.clone());
            async move { (prepare.await, span) }
        }))
        .await;
        let mut outcomes = Vec::new();
        for (prepared, parent) in prepared {
            let Some((op, attempt)) = prepared else {
                continue;
            };
            let span = parent.in_scope(|| send_span(&op, attempt));
            if let Some(sent) = self.transmit(&op, attempt).instrument(span.clone()).await {
                outcomes.push(async move {
                    self.record_outcome(&op, attempt, sent, &span)
                        .instrument(span.clone())
                        .await
                });
            }
        }
        futures::future::join_all(outcomes).await;
    }

    /// What a SIGNED operation's first send is: the operation recorded SENT and the attempt
    /// to send, or `None` if there is nothing to send (it moved on, or was settled).
    async fn prepare_first_send(&self, op: pb::Operation) -> Option<(pb::Operation, u32)> {
        match decide(&op, &Evidence::None, self.clock.now(), &self.rules) {
            Action::Send(attempt) => {
                let now = self.clock.now();
                let sending = self
                    .apply_decided(&op, move |op| record::record_sending(op, attempt, now))
                    .await?;
                Some((sending, attempt))
            }
            Action::Replace(replacement) => {
                let attempt = self.replace(&op, replacement, None).await.ok().flatten()?;
                let now = self.clock.now();
                let sending = self
                    .apply_fact(&op.op_id, move |op| {
                        record::record_sending_new(op, attempt, now)
                    })
                    .await?;
                Some((sending, attempt))
            }
            Action::Settle(settlement) => {
                self.settle(&op, settlement).await;
                None
            }
            _ => None,
        }
    }

    /// SENT → CONFIRMED | REJECTED | CANCELLED, or a resend, replacement or re-sign.
    async fn check_stage(&self) -> anyhow::Result<()> {
        let sent = self.take(pb::OperationState::Sent).await?;
        {
            // Forget the operations no longer SENT (or no longer this replica's to take).
            let taken: std::collections::HashSet<&str> =
                sent.iter().map(|op| op.op_id.as_str()).collect();
            self.read_at
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .retain(|op_id, _| taken.contains(op_id.as_str()));
        }
        // Each endpoint's head, blocks and state at a block are read once per pass.
        let endpoints: HashMap<&str, _> = self
            .chains
            .iter()
            .map(|(name, chain)| (name.as_str(), chain.endpoints()))
            .collect();
        // Each EVM endpoint's chain id, asked once here (and kept by the pass's cache), not by
        // every operation of the pass at once.
        if !sent.is_empty() {
            for (name, chain_endpoints) in &endpoints {
                for endpoint in chain_endpoints {
                    match self.chains.get(*name) {
                        Some(Chain::Evm(_)) => {
                            let _ = sigcast_jsonrpc::Endpoint::request(
                                endpoint,
                                "eth_chainId",
                                serde_json::json!([]),
                            )
                            .await;
                        }
                        // Its genesis hash likewise (and the cluster pinned, if it is to be).
                        Some(Chain::Solana(rpc)) => {
                            let _ = rpc.serves_cluster(endpoint).await;
                        }
                        None => {}
                    }
                }
            }
        }
        let endpoints = &endpoints;
        // Many operations waiting: their inclusions are read from the recent blocks' whole
        // receipt lists. Few: each from its own receipt (a whole block read for one operation
        // costs the node more than that operation's receipt).
        let mut waiting: HashMap<String, usize> = HashMap::new();
        for op in &sent {
            *waiting.entry(op.chain.clone()).or_default() += 1;
        }
        let recent: HashMap<String, &RecentReceipts> = waiting
            .into_iter()
            .filter(|(_, count)| *count >= BLOCK_LISTS_FROM)
            .filter_map(|(chain, _)| Some((chain.clone(), self.recent_receipts.get(&chain)?)))
            .collect();
        let recent = &recent;
        futures::stream::iter(sent)
            .for_each_concurrent(self.concurrency, |op| async move {
                let span = op_span("Check", &op.op_id);
                span.record("sigcast.chain", op.chain.as_str());
                span.record("sigcast.account", op.account.as_str());
                if let Some(nonce) = sigcast_protocol::evm::nonce_of(&op) {
                    span.record("sigcast.nonce", nonce);
                }
                let Some(endpoints) = endpoints.get(op.chain.as_str()) else {
                    return;
                };
                let recent = recent.get(op.chain.as_str()).copied();
                self.check(op, endpoints, recent).instrument(span).await
            })
            .await;
        Ok(())
    }

    async fn check(
        &self,
        op: pb::Operation,
        endpoints: &[sigcast_jsonrpc::PassCache<sigcast_jsonrpc::PoolEndpoint<'_>>],
        recent: Option<&sigcast_evm::evidence::RecentReceipts>,
    ) {
        let Some(chain) = self.chains.get(&op.chain) else {
            return;
        };
        let now = self.clock.now();
        let read_recently = self
            .read_at
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&op.op_id)
            .is_some_and(|&at| now < at + self.rules.check_after);
        if read_recently {
            return;
        }
        let mut evidence = Evidence::None;
        let mut action = decide(&op, &evidence, now, &self.rules);
        if matches!(action, Action::ReadMore(_)) {
            self.read_at
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(op.op_id.clone(), now);
        }
        let mut next = endpoints.iter();
        while let Action::ReadMore(_) = action {
            let Some(endpoint) = next.next() else { break };
            match chains::read_view(endpoint, &op, chain, recent, self.rules.confirmations).await {
                Some(View::Evm(view)) => match &mut evidence {
                    Evidence::Evm(views) => views.push(view),
                    _ => evidence = Evidence::Evm(vec![view]),
                },
                Some(View::Solana(view)) => match &mut evidence {
                    Evidence::Solana(views) => views.push(view),
                    _ => evidence = Evidence::Solana(vec![view]),
                },
                None => continue,
            }
            action = decide(&op, &evidence, self.clock.now(), &self.rules);
        }
        match action {
            Action::Wait(why) => {
                tracing::trace!(sigcast.op_id = %op.op_id, %why, "nothing to do");
            }
            // Every endpoint read, and still not enough to act on: counted, so that an
            // operation that stays SENT says what it waits for (an unlinked depth, a nonce's
            // user not found, a history too short, statuses behind).
            Action::ReadMore(why) => {
                tracing::debug!(sigcast.op_id = %op.op_id, %why, "every endpoint read; undecided");
                metrics::inc(
                    &metrics::metrics().checks_undecided,
                    &[("chain", op.chain.as_str()), ("reason", why.label())],
                );
            }
            Action::Sign => {}
            Action::Send(attempt) => self.send_again(&op, attempt).await,
            Action::Replace(replacement) => match self
                .replace(&op, replacement, replacement_base_fee(&evidence))
                .await
            {
                Ok(Some(attempt)) => self.send_new_attempt(&op.op_id, attempt).await,
                Ok(None) => {}
                Err(AtFeeCap) => {
                    // Recorded, so that the next passes do not ask again before a bump period.
                    let newest = op.attempts.last().map_or(0, |a| a.number);
                    let now = self.clock.now();
                    let Some(op) = self
                        .apply_decided(&op, move |op| {
                            record::record_held_at_fee_cap(op, newest, now)
                        })
                        .await
                    else {
                        return;
                    };
                    let after = sigcast_protocol::evm::at_fee_cap(&op, now, &self.rules);
                    if let Action::Send(attempt) = after {
                        self.send_again(&op, attempt).await;
                    }
                }
            },
            Action::Resign(proof) => {
                let newest = op.attempts.last().map_or(0, |a| a.number);
                tracing::info!(sigcast.op_id = %op.op_id, endpoint = %proof.endpoint, head = proof.head, "no attempt can land: re-signing");
                match self
                    .signer
                    .sign(&op.op_id, SignPurpose::Resign, newest, None)
                    .await
                {
                    Ok(attempt) if attempt != newest => {
                        self.send_new_attempt(&op.op_id, attempt).await
                    }
                    Ok(_) => {}
                    Err(Refusal::Operation(reason)) => {
                        tracing::warn!(sigcast.op_id = %op.op_id, %reason, "signer refused the re-sign; rejecting the operation on the proof");
                        let settlement =
                            sigcast_protocol::solana::resign_refused(&op, proof, &reason);
                        self.settle(&op, settlement).await;
                    }
                    Err(refusal) => {
                        tracing::warn!(sigcast.op_id = %op.op_id, ?refusal, "re-sign refused; will retry")
                    }
                }
            }
            Action::Settle(settlement) => self.settle(&op, settlement).await,
        }
    }

    /// Records an attempt as being sent, then sends it (again, if it went out before).
    async fn send_again(&self, op: &pb::Operation, attempt: u32) {
        let resend = op
            .attempts
            .iter()
            .any(|a| a.number == attempt && record::was_sent(a));
        let now = self.clock.now();
        if let Some(op) = self
            .apply_decided(op, move |op| record::record_sending(op, attempt, now))
            .await
        {
            if resend {
                metrics::inc(&metrics::metrics().resends, &[("chain", op.chain.as_str())]);
            }
            self.send(&op, attempt).await;
        }
    }

    /// Asks the signer for a replacement of the newest attempt, priced for at least
    /// `min_base_fee`; returns the new attempt, or `None` when there is none (yet); `AtFeeCap`
    /// when the chain's fee cap leaves no room.
    async fn replace(
        &self,
        op: &pb::Operation,
        replacement: Replacement,
        min_base_fee: Option<u128>,
    ) -> Result<Option<u32>, AtFeeCap> {
        let newest = op.attempts.last().map_or(0, |a| a.number);
        let purpose = match replacement {
            Replacement::FeeBump => SignPurpose::FeeBump,
            Replacement::Cancel => SignPurpose::Cancel,
            Replacement::GapFill => SignPurpose::GapFill,
        };
        match self
            .signer
            .sign(&op.op_id, purpose, newest, min_base_fee)
            .await
        {
            Ok(attempt) if attempt != newest => {
                tracing::info!(sigcast.op_id = %op.op_id, attempt, reason = %replacement.reason(), "replacement signed");
                Ok(Some(attempt))
            }
            Ok(_) => Ok(None),
            Err(Refusal::AtFeeCap) => {
                tracing::debug!(sigcast.op_id = %op.op_id, purpose = purpose.as_str_name(), "replacement held back by the fee cap");
                Err(AtFeeCap)
            }
            Err(refusal) => {
                tracing::warn!(sigcast.op_id = %op.op_id, purpose = purpose.as_str_name(), ?refusal, "replacement not signed; will retry");
                Ok(None)
            }
        }
    }

    /// Records a freshly signed attempt as being sent, then sends it.
    async fn send_new_attempt(&self, op_id: &str, attempt: u32) {
        let now = self.clock.now();
        if let Some(op) = self
            .apply_fact(op_id, move |op| {
                record::record_sending_new(op, attempt, now)
            })
            .await
        {
            self.send(&op, attempt).await;
        }
    }

    /// Sends an attempt's stored bytes to one endpoint and records the outcome.
    async fn send(&self, op: &pb::Operation, attempt: u32) {
        let span = send_span(op, attempt);
        async {
            if let Some(sent) = self.transmit(op, attempt).await {
                self.record_outcome(op, attempt, sent, &span).await;
            }
        }
        .instrument(span.clone())
        .await;
    }

    /// Sends an attempt's stored bytes to one endpoint, once; returns the endpoint, what it
    /// answered, and when the bytes left.
    async fn transmit(
        &self,
        op: &pb::Operation,
        attempt: u32,
    ) -> Option<(String, SendOutcome, SystemTime)> {
        let chain = self.chains.get(&op.chain)?;
        let root = self.store.root().clone();
        let id = op.op_id.clone();
        let raw = match self
            .store
            .read_async(move |tx| accounts::payload(tx, &root, &id, attempt))
            .await
        {
            Ok(Some(raw)) => raw,
            Ok(None) => {
                tracing::error!(sigcast.op_id = %op.op_id, attempt, "signed payload missing from the store");
                return None;
            }
            Err(error) => {
                tracing::warn!(sigcast.op_id = %op.op_id, %error, "reading payload");
                return None;
            }
        };
        // Each send of the same bytes to the next endpoint in rank: one that acknowledges
        // and drops them holds the attempt for one send, not for good. This send is counted
        // already (recorded before its bytes leave).
        let turn = op
            .attempts
            .iter()
            .find(|a| a.number == attempt)
            .map_or(0, |a| a.sends.saturating_sub(1));
        let left = self.clock.now();
        let (endpoint, outcome) = chain.send(&raw, turn).await;
        Some((endpoint, outcome, left))
    }

    /// Records what the endpoint said of an attempt, and when its bytes left: a fact, applied
    /// whatever else changed.
    async fn record_outcome(
        &self,
        op: &pb::Operation,
        attempt: u32,
        (endpoint, outcome, left): (String, SendOutcome, SystemTime),
        span: &tracing::Span,
    ) {
        let label = match outcome {
            SendOutcome::Accepted => "accepted",
            SendOutcome::Refused { .. } => "rejected",
            SendOutcome::Unknown => "unknown",
        };
        tracing::info!(sigcast.op_id = %op.op_id, attempt, %endpoint, outcome = label, "sent");
        span.record("sigcast.endpoint", metrics::endpoint_label(&endpoint));
        span.record("sigcast.outcome", label);
        metrics::inc(
            &metrics::metrics().attempts,
            &[("chain", op.chain.as_str()), ("outcome", label)],
        );
        let now = self.clock.now();
        self.apply_fact(&op.op_id, move |op| {
            record::record_left(op, attempt, left);
            record::record_outcome(op, attempt, &endpoint, &outcome, now);
            true
        })
        .await;
    }

    /// Applies a settlement decided on `op`'s revision.
    async fn settle(&self, op: &pb::Operation, settlement: Settlement) {
        let state = settlement.state;
        let message = settlement.error.as_ref().map(|e| e.message.clone());
        let settled = self
            .apply_decided(op, move |op| {
                record::settle(op, &settlement);
                true
            })
            .await;
        if settled.is_some() {
            tracing::info!(sigcast.op_id = %op.op_id, ?state, message = message.as_deref().unwrap_or(""), "settled");
        }
    }

    /// Applies `change` to the operation in one transaction, only if it still has the
    /// revision `decided_on` was read at: a decision made on an older record (another replica
    /// changed it meanwhile) is dropped, and the next pass decides again. Returns the updated
    /// operation, or `None` if it moved on, `change` declined, or the store failed.
    async fn apply_decided(
        &self,
        decided_on: &pb::Operation,
        change: impl FnMut(&mut pb::Operation) -> bool + Send + 'static,
    ) -> Option<pb::Operation> {
        let guard = operations::Guard::Revision(decided_on.revision);
        self.apply(&decided_on.op_id, guard, change).await
    }

    /// Applies a fact (what a node answered, a send about to be made of an attempt the signer
    /// just stored) to an operation that is not yet terminal.
    async fn apply_fact(
        &self,
        op_id: &str,
        change: impl FnMut(&mut pb::Operation) -> bool + Send + 'static,
    ) -> Option<pb::Operation> {
        self.apply(op_id, operations::Guard::NotTerminal, change)
            .await
    }

    async fn apply(
        &self,
        op_id: &str,
        guard: operations::Guard,
        mut change: impl FnMut(&mut pb::Operation) -> bool + Send + 'static,
    ) -> Option<pb::Operation> {
        let root = self.store.root().clone();
        let id = op_id.to_owned();
        let now = self.clock.now();
        let result = self
            .store
            .run_grouped(move |tx| operations::update(tx, &root, &id, guard, &mut change, now))
            .await;
        match result {
            Ok(Some((before, op))) => {
                if op.state != before.state {
                    count_transition(&op);
                }
                Some(op)
            }
            Ok(None) => None,
            Err(error) => {
                tracing::warn!(sigcast.op_id = %op_id, %error, "store update failed; the next pass retries");
                None
            }
        }
    }
}

/// The span of one send of an attempt, under the current span.
fn send_span(op: &pb::Operation, attempt: u32) -> tracing::Span {
    tracing::info_span!(
        "send",
        otel.name = "Send",
        otel.kind = "internal",
        sigcast.op_id = %op.op_id,
        sigcast.attempt = attempt,
        sigcast.endpoint = tracing::field::Empty,
        sigcast.outcome = tracing::field::Empty,
    )
}

/// Counts an operation entering its state and, once terminal, how an unknown send outcome
/// (if it had one) was settled.
fn count_transition(op: &pb::Operation) {
    let state = op
        .state()
        .as_str_name()
        .trim_start_matches("OPERATION_STATE_");
    metrics::inc(&metrics::metrics().transitions, &[("state", state)]);
    let terminal = state_from_proto(op.state()).is_some_and(OperationState::is_terminal);
    if terminal
        && op
            .attempts
            .iter()
            .any(|a| a.outcome() == pb::AttemptOutcome::Unknown)
    {
        metrics::inc(
            &metrics::metrics().unknown_resolved,
            &[("chain", op.chain.as_str()), ("resolution", state)],
        );
    }
}
