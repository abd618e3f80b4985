//! gRPC handlers: protobuf in, domain decisions through the store, protobuf out.

use crate::error::{Error, Result, state_name};
use crate::finished::FinishedOperations;
use crate::identity::MeshConfig;
use sigcast_domain::callers::{CallerRule, Callers};
use sigcast_domain::{Chain, EvmAddress, Intent, IntentRules, OpId, SolanaPubkey};
use sigcast_proto::sigcast::v1::operation_service_server::OperationService;
use sigcast_proto::{FieldViolation, intent_from_proto, parse_op_id, pb};
use sigcast_store::Store;
use sigcast_store::operations::{self, CancelOutcome, ListFilter, SubmitOutcome};
use sigcast_telemetry::metrics;
use sigcast_telemetry::trace::{RpcSide, attach_op, grpc_span, traced};
use std::pin::Pin;
use std::time::{Duration, SystemTime};
use tokio::sync::watch;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

/// Page size when the request leaves it 0.
const DEFAULT_PAGE_SIZE: u32 = 100;
/// Largest page size.
const MAX_PAGE_SIZE: u32 = 1000;

/// The OperationService implementation.
#[derive(Clone)]
pub struct Gateway {
    store: Store,
    rules: IntentRules,
    watch_poll: Duration,
    shutdown: watch::Receiver<bool>,
    policies: std::sync::Arc<Vec<sigcast_domain::policy::KeyPolicy>>,
    callers: std::sync::Arc<Vec<CallerRule>>,
    mesh: Option<std::sync::Arc<MeshConfig>>,
    /// Identities the operator API answers; see `is_operator`.
    operators: std::sync::Arc<Vec<String>>,
    /// Whether its listeners authenticate callers (mTLS or a mesh): then a call without an
    /// identity is refused whatever the tables say.
    authenticated: bool,
    /// Whether callers may be anyone at all (a development gateway on loopback): only then
    /// does an empty `operators` open the operator API.
    open: bool,
    /// Watches open, per caller and in all.
    watches: std::sync::Arc<Watches>,
    /// Largest ListOperations response, in bytes of operations.
    max_list_bytes: usize,
    /// Whether the store takes writes, as health reports it.
    store_health: StoreHealth,
    /// Finished operations read before, answered without the store.
    finished: std::sync::Arc<FinishedOperations>,
}

/// The health service name that tells whether the store takes writes. The gateway's own
/// name stays SERVING meanwhile: reads (Get, Watch, List) go on while the store is full.
pub(crate) const STORE_HEALTH: &str = "sigcast.store";

/// Whether the last write found room in the store, reported as [`STORE_HEALTH`]. The flag
/// and its report change together, under one lock: two writes finishing at once (one full,
/// one not) could otherwise report in the opposite order and leave the health stale.
#[derive(Clone)]
pub(crate) struct StoreHealth {
    reporter: Option<tonic_health::server::HealthReporter>,
    writable: std::sync::Arc<tokio::sync::Mutex<bool>>,
}

impl Default for StoreHealth {
    fn default() -> Self {
        Self {
            reporter: None,
            writable: std::sync::Arc::new(tokio::sync::Mutex::new(true)),
        }
    }
}

impl std::fmt::Debug for StoreHealth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreHealth")
            .field("writable", &self.writable)
            .finish_non_exhaustive()
    }
}

impl StoreHealth {
    /// Notes what a write's `result` says of the store's space; reports only changes.
    async fn observe<T>(&self, result: &Result<T, sigcast_store::Error>) {
        let writable = match result {
            Ok(_) => true,
            Err(error) if error.is_full() => false,
            Err(_) => return,
        };
        let mut current = self.writable.lock().await;
        if *current == writable {
            return;
        }
        *current = writable;
        if writable {
            tracing::info!("the store takes writes again");
        } else {
            tracing::error!(
                "the store is out of space: submits and cancels are refused until space is freed"
            );
        }
        if let Some(reporter) = &self.reporter {
            let status = if writable {
                tonic_health::ServingStatus::Serving
            } else {
                tonic_health::ServingStatus::NotServing
            };
            reporter.set_service_status(STORE_HEALTH, status).await;
        }
    }
}

/// The watches open, per caller, against their limits.
#[derive(Debug, Default)]
pub(crate) struct Watches {
    open: std::sync::Mutex<std::collections::HashMap<String, usize>>,
    per_caller: usize,
    total: usize,
}

/// One open watch; closing it (dropping) gives its place back.
pub(crate) struct WatchPermit {
    watches: std::sync::Arc<Watches>,
    caller: String,
}

impl Watches {
    fn open(self: &std::sync::Arc<Self>, caller: &str) -> Result<WatchPermit> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let total: usize = open.values().sum();
        let mine = open.get(caller).copied().unwrap_or(0);
        if mine >= self.per_caller || total >= self.total {
            let (count, limit, which) = if mine >= self.per_caller {
                (mine, self.per_caller, "limits.max_watches_per_caller")
            } else {
                (total, self.total, "limits.max_watches")
            };
            return Err(Error::TooManyWatches(format!(
                "{count} watches are open, the most allowed ({which} = {limit}); close one, or \
                 poll GetOperation"
            )));
        }
        *open.entry(caller.to_owned()).or_default() += 1;
        Ok(WatchPermit {
            watches: self.clone(),
            caller: caller.to_owned(),
        })
    }
}

impl Drop for WatchPermit {
    fn drop(&mut self) {
        let mut open = self.watches.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = open.get_mut(&self.caller) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&self.caller);
            }
        }
    }
}

/// What a page token carries of the filter it was issued for: another filter's token would
/// resume a listing at a place that means nothing to it (an authenticated caller's listings
/// all read one index, so the cursor alone does not tell).
fn filter_tag(filter: &ListFilter) -> [u8; 8] {
    use sha2::Digest;
    let text = format!(
        "{}\n{}\n{}\n{}",
        filter.chain.as_deref().unwrap_or_default(),
        filter.account.as_deref().unwrap_or_default(),
        filter.state.map_or(-1, |state| state as i32),
        filter.caller.as_deref().unwrap_or_default(),
    );
    let digest = sha2::Sha256::digest(text.as_bytes());
    let mut tag = [0; 8];
    tag.copy_from_slice(&digest[..8]);
    tag
}

impl Gateway {
    /// The store it answers from.
    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    /// A gateway over `store`, accepting intents within `rules`. Watch streams re-read their
    /// operation every `watch_poll` and end when `shutdown` turns true.
    pub fn new(
        store: Store,
        rules: IntentRules,
        watch_poll: Duration,
        shutdown: watch::Receiver<bool>,
    ) -> Self {
        Self {
            store,
            rules,
            watch_poll,
            shutdown,
            policies: Default::default(),
            callers: Default::default(),
            mesh: None,
            operators: Default::default(),
            authenticated: false,
            open: true,
            watches: std::sync::Arc::new(Watches {
                per_caller: usize::MAX,
                total: usize::MAX,
                ..Default::default()
            }),
            max_list_bytes: usize::MAX,
            store_health: StoreHealth::default(),
            finished: std::sync::Arc::new(FinishedOperations::new(
                crate::config::LimitsConfig::default().finished_operations_bytes,
            )),
        }
    }

    /// Reports through `reporter` whether the store takes writes ([`STORE_HEALTH`]).
    pub fn with_store_health(mut self, reporter: tonic_health::server::HealthReporter) -> Self {
        self.store_health = StoreHealth {
            reporter: Some(reporter),
            ..StoreHealth::default()
        };
        self
    }

    /// Bounds the watches open per caller and in all, and the bytes of a list response.
    pub fn with_limits(mut self, limits: &crate::config::LimitsConfig) -> Self {
        self.watches = std::sync::Arc::new(Watches {
            per_caller: limits.max_watches_per_caller,
            total: limits.max_watches,
            ..Default::default()
        });
        self.max_list_bytes = limits.max_list_response_bytes;
        self.finished =
            std::sync::Arc::new(FinishedOperations::new(limits.finished_operations_bytes));
        self
    }

    /// The operator API answers `operators`. `authenticated`: the listeners identify every
    /// caller (mTLS, or a mesh's sidecar). `open`: they may be called by anyone (plaintext on
    /// loopback); only then does an empty `operators` answer everyone.
    pub fn with_operators(
        mut self,
        operators: Vec<String>,
        authenticated: bool,
        open: bool,
    ) -> Self {
        self.operators = std::sync::Arc::new(operators);
        self.authenticated = authenticated;
        self.open = open;
        self
    }

    /// May `caller` use the operator API?
    pub(crate) fn is_operator(&self, caller: &str) -> bool {
        if self.operators.is_empty() {
            return self.open;
        }
        self.listed_operator(caller)
    }

    /// Whether `operators` names `caller` (an empty list names nobody).
    fn listed_operator(&self, caller: &str) -> bool {
        !caller.is_empty() && self.operators.iter().any(|o| o == caller)
    }

    /// Whether `caller` may read its operations: an identified caller the table allows.
    fn may_read(&self, caller: &str) -> Result<()> {
        self.identified(caller)?;
        Callers(&self.callers)
            .may_read(caller)
            .map_err(|v| Error::CallerDenied { rule: v.0 })
    }

    /// On a listener that authenticates callers, a call without an identity (a certificate
    /// that names none; a request that did not come through the mesh's sidecar) is refused.
    pub(crate) fn identified(&self, caller: &str) -> Result<()> {
        if self.authenticated && caller.is_empty() {
            return Err(Error::Unidentified);
        }
        Ok(())
    }

    /// Authorizes callers by `callers` (empty: everyone may do everything), identified by their
    /// client certificate, or by `mesh`'s forwarded header from its sidecars.
    pub fn with_callers(mut self, callers: Vec<CallerRule>, mesh: Option<MeshConfig>) -> Self {
        self.callers = std::sync::Arc::new(callers);
        self.mesh = mesh.map(std::sync::Arc::new);
        self
    }

    /// Who sent `request` (empty: nobody authenticated).
    pub(crate) fn caller_of<T>(&self, request: &Request<T>) -> String {
        crate::identity::caller(request, self.mesh.as_deref())
    }

    /// Refuses at submit what these key policies forbid (the signer enforces them too).
    pub fn with_policies(mut self, policies: Vec<sigcast_domain::policy::KeyPolicy>) -> Self {
        self.policies = std::sync::Arc::new(policies);
        self
    }

    /// Whether this gateway may create `intent` for `caller`: a chain and sizes it serves
    /// (`unserved`: what its rules refused of the request), what the callers table allows
    /// `caller`, what the key's policy allows.
    fn may_create(
        &self,
        caller: &str,
        op_id: &OpId,
        intent: &Intent,
        unserved: Option<Vec<FieldViolation>>,
    ) -> Result<()> {
        if let Some(violations) = unserved {
            return Err(Error::InvalidArgument(violations));
        }
        if let Intent::SolanaInstructions(list) = intent {
            sigcast_proto::fits_a_packet("intent.solana_instructions.instructions", list)
                .map_err(|violation| Error::InvalidArgument(vec![violation]))?;
        }
        if let Err(violation) = Callers(&self.callers).may_submit(caller, intent) {
            tracing::info!(sigcast.op_id = %op_id, ?caller, rule = %violation.0, "refused: caller not allowed");
            return Err(Error::CallerDenied { rule: violation.0 });
        }
        if let Err(violation) = sigcast_domain::policy::check_intent(&self.policies, intent) {
            let account = intent.account();
            tracing::info!(sigcast.op_id = %op_id, %account, rule = %violation.0, "refused by key policy");
            return Err(Error::PolicyDenied {
                account,
                rule: violation.0,
            });
        }
        Ok(())
    }

    async fn submit(
        &self,
        caller: String,
        request: pb::SubmitOperationRequest,
    ) -> Result<pb::SubmitOperationResponse> {
        // The intent's shape first: a retry is matched against its operation as it was
        // accepted, under the rules of its time. This gateway's rules (chains and sizes
        // served, the callers table, key policies) may have changed since, on this replica or
        // another; they bound what it creates. A retry refused by them, with "nothing was
        // recorded", would have its caller pay another way while the operation lands.
        // Read once under this gateway's rules; only an intent they refuse is read again for
        // its shape alone, which a retry is matched by (`unserved`: the refusal, for a create).
        let op_id = parse_op_id("op_id", &request.op_id);
        let (shape, unserved) =
            match intent_from_proto("intent", request.intent.as_ref(), Some(&self.rules)) {
                Ok(intent) => (Ok(intent), None),
                Err(refused) => match intent_from_proto("intent", request.intent.as_ref(), None) {
                    Ok(intent) => (Ok(intent), Some(refused)),
                    Err(_) => (Err(refused), None),
                },
            };
        let (op_id, intent) = match (op_id, shape) {
            (Ok(op_id), Ok(intent)) => (op_id, intent),
            (op_id, shape) => {
                let mut violations: Vec<FieldViolation> = op_id.err().into_iter().collect();
                violations.extend(shape.err().or(unserved).unwrap_or_default());
                return Err(Error::InvalidArgument(violations));
            }
        };
        // A caller without an identity reads nothing from the store. One the callers table no
        // longer names still has its own retries answered (below): refused, with "nothing was
        // recorded", it might pay another way while its operation lands.
        self.identified(&caller)?;
        let fingerprint = intent.fingerprint().to_string();

        // A replay is answered from one snapshot read, without taking the write lock; a
        // replay of the caller's own finished operation, read before, from memory.
        let op_id_text = op_id.to_string();
        let existing = match self.finished.get(&op_id_text, &caller) {
            Some(finished) => {
                read_from(READ_FROM[0]);
                Some(finished)
            }
            None => self.stored(&op_id_text).await?,
        };
        let outcome = match existing {
            Some(stored) if stored.caller == caller => {
                operations::classify_submit(stored, &fingerprint)
            }
            // Another caller's op_id is said to be taken only for an intent this caller may
            // submit: its refusal tells nothing of whether the op_id exists.
            existing => {
                self.may_create(&caller, &op_id, &intent, unserved)?;
                if existing.is_some() {
                    return Err(Error::OpIdTaken(op_id.to_string()));
                }
                let mut new = sigcast_proto::new_operation(&op_id, &intent);
                new.caller = caller.clone();
                let now = SystemTime::now();
                let root = self.store.root().clone();
                let written = self
                    .store
                    .run_grouped(move |tx| operations::submit(tx, &root, new.clone(), now))
                    .await;
                self.store_health.observe(&written).await;
                written?
            }
        };
        // Another caller's op_id: refused without a word about its operation.
        if let SubmitOutcome::Replayed(stored) | SubmitOutcome::Conflict(stored) = &outcome
            && stored.caller != caller
        {
            return Err(Error::OpIdTaken(op_id.to_string()));
        }
        match outcome {
            SubmitOutcome::Created(operation) => {
                tracing::info!(sigcast.op_id = %op_id, chain = %operation.chain, account = %operation.account, "operation received");
                Ok(pb::SubmitOperationResponse {
                    operation: Some(operation),
                    replayed: false,
                })
            }
            SubmitOutcome::Replayed(operation) => {
                tracing::debug!(sigcast.op_id = %op_id, "replayed submit");
                Ok(pb::SubmitOperationResponse {
                    operation: Some(operation),
                    replayed: true,
                })
            }
            SubmitOutcome::Conflict(stored) => {
                tracing::info!(sigcast.op_id = %op_id, "op_id conflict refused");
                Err(Error::OpIdConflict {
                    op_id: op_id.to_string(),
                    stored: stored.intent_fingerprint,
                    submitted: fingerprint,
                })
            }
        }
    }

    /// `caller`'s operation `op_id`, to read: any operation for an operator (who inspects
    /// what callers report, and told "not found" might have the payment submitted again);
    /// another caller's is NOT_FOUND, as if it did not exist.
    async fn get(&self, caller: &str, op_id: &str) -> Result<pb::Operation> {
        // Listed by identity only: on an open development gateway every caller is the
        // operator, and one sharing the store with an authenticating gateway would show
        // anyone its callers' operations.
        self.read(caller, op_id, self.listed_operator(caller)).await
    }

    /// `caller`'s own operation `op_id`, to change; another caller's is NOT_FOUND.
    async fn get_own(&self, caller: &str, op_id: &str) -> Result<pb::Operation> {
        self.read(caller, op_id, false).await
    }

    async fn read(&self, caller: &str, op_id: &str, any_caller: bool) -> Result<pb::Operation> {
        let op_id = parse_op_id("op_id", op_id)
            .map_err(Error::invalid)?
            .to_string();
        if !any_caller {
            self.may_read(caller)?;
        }
        self.stored(&op_id)
            .await?
            .filter(|op| any_caller || op.caller == caller)
            .ok_or(Error::NotFound(op_id))
    }

    /// The operation `op_id` as stored; a finished one is kept in memory for its replays.
    /// Whose it is, the caller checks.
    async fn stored(&self, op_id: &str) -> Result<Option<pb::Operation>> {
        let root = self.store.root().clone();
        let id = op_id.to_owned();
        let stored = self
            .store
            .read_point(move |tx| operations::get(tx, &root, &id))
            .await?;
        read_from(READ_FROM[1]);
        if let Some(op) = &stored {
            self.finished.keep(op);
        }
        Ok(stored)
    }

    async fn list(
        &self,
        caller: String,
        request: pb::ListOperationsRequest,
    ) -> Result<pb::ListOperationsResponse> {
        let mut violations = Vec::new();
        let mut violation = |field: &str, rule: String| {
            violations.push(FieldViolation {
                field: field.into(),
                rule: sigcast_domain::Rule(rule),
            })
        };
        let chain = match request.chain.as_str() {
            "" => None,
            text => Chain::parse(text)
                .map_err(|rule| violation("chain", rule.0))
                .ok(),
        };
        let account = match (request.account.as_str(), &chain) {
            ("", _) => None,
            (_, None) if request.chain.is_empty() => {
                violation("account", "requires chain to be set".into());
                None
            }
            (_, None) => None,
            (text, Some(Chain::Evm { .. })) => EvmAddress::parse(text)
                .map(|a| a.to_string())
                .map_err(|rule| violation("account", rule.0))
                .ok(),
            (text, Some(Chain::Solana { .. })) => SolanaPubkey::parse(text)
                .map(|a| a.to_string())
                .map_err(|rule| violation("account", rule.0))
                .ok(),
        };
        let state = match pb::OperationState::try_from(request.state) {
            Ok(pb::OperationState::Unspecified) => None,
            Ok(state) => Some(state),
            Err(_) => {
                violation("state", format!("unknown state {}", request.state));
                None
            }
        };
        let page_size = match request.page_size {
            0 => DEFAULT_PAGE_SIZE,
            n if n <= MAX_PAGE_SIZE => n,
            n => {
                violation(
                    "page_size",
                    format!("must be at most {MAX_PAGE_SIZE} (got {n})"),
                );
                0
            }
        };
        let token = match request.page_token.as_str() {
            "" => None,
            token => hex::decode(token)
                .map_err(|_| violation("page_token", "is not a token this service issued".into()))
                .ok(),
        };
        if !violations.is_empty() {
            return Err(Error::InvalidArgument(violations));
        }
        self.may_read(&caller)?;
        let filter = ListFilter {
            chain: chain.map(|c| c.to_string()),
            account,
            state,
            caller: Some(caller),
        };
        let tag = filter_tag(&filter);
        let cursor = match token {
            None => None,
            Some(token) => match token.strip_prefix(tag.as_slice()) {
                Some(cursor) => Some(cursor.to_vec()),
                None => {
                    return Err(Error::invalid(FieldViolation {
                        field: "page_token".into(),
                        rule: sigcast_domain::Rule(
                            "was issued for another filter (or is not a token this service \
                             issued): list again from the first page"
                                .into(),
                        ),
                    }));
                }
            },
        };
        let root = self.store.root().clone();
        let max_bytes = self.max_list_bytes;
        let page = self
            .store
            .read_async(move |tx| {
                operations::list_within(
                    tx,
                    &root,
                    &filter,
                    cursor.as_deref(),
                    page_size as usize,
                    max_bytes,
                )
            })
            .await?
            .map_err(|bad| {
                Error::invalid(FieldViolation {
                    field: "page_token".into(),
                    rule: sigcast_domain::Rule(bad.to_string()),
                })
            })?;
        Ok(pb::ListOperationsResponse {
            operations: page.operations,
            next_page_token: page
                .next_cursor
                .map(|cursor| hex::encode([tag.as_slice(), &cursor].concat()))
                .unwrap_or_default(),
        })
    }

    /// `caller`'s cancel of `op_id`: the operation, and whether this call changed it.
    async fn cancel(&self, caller: &str, op_id: &str) -> Result<(pb::Operation, bool)> {
        let op_id = parse_op_id("op_id", op_id)
            .map_err(Error::invalid)?
            .to_string();
        // Only its own operation (another caller's is not found, an operator's reading aside),
        // and only if it may cancel.
        let read = self.get_own(caller, &op_id).await?;
        Callers(&self.callers)
            .may_cancel(caller)
            .map_err(|v| Error::CallerDenied { rule: v.0 })?;
        let root = self.store.root().clone();
        // One with nothing to write (terminal, or its cancel already asked for) is answered
        // from the read: it does not queue for the store's write lock.
        let outcome = match operations::cancel_written_nothing(&root, &read)? {
            Some(answered) => answered,
            None => {
                let id = op_id.clone();
                let now = SystemTime::now();
                let written = self
                    .store
                    .run_grouped(move |tx| operations::cancel(tx, &root, &id, now))
                    .await;
                self.store_health.observe(&written).await;
                written?
            }
        };
        // A retry, or an operation cancelled on chain since, is answered as it stands; only
        // a change this call made (the record's revision moved) is logged and counted.
        match outcome {
            CancelOutcome::NotFound => Err(Error::NotFound(op_id)),
            CancelOutcome::Cancelled(op) => {
                let changed = op.revision != read.revision;
                if changed {
                    tracing::info!(sigcast.op_id = %op_id, "operation cancelled before signing");
                }
                Ok((op, changed))
            }
            CancelOutcome::Requested(op) => {
                let changed = op.revision != read.revision;
                if changed {
                    tracing::info!(sigcast.op_id = %op_id, "on-chain cancel requested");
                }
                Ok((op, changed))
            }
            CancelOutcome::Terminal(op) => Err(Error::FailedPrecondition {
                state: state_name(&op),
                op_id,
                why: "it is terminal; only operations not yet confirmed or rejected can be cancelled",
            }),
        }
    }
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<pb::WatchOperationResponse, Status>> + Send>>;

/// Every `result` a submit is counted under (`submits_total{result}`).
pub(crate) const SUBMIT_RESULTS: [&str; 6] = [
    "created", "replayed", "conflict", "invalid", "denied", "failed",
];

/// Where a read of one operation is answered (`operation_reads_total{from}`): the gateway's
/// memory of finished operations (a replay's only), or the store.
pub(crate) const READ_FROM: [&str; 2] = ["finished", "store"];

fn read_from(from: &'static str) {
    metrics::inc(&metrics::metrics().operation_reads, &[("from", from)]);
}

#[tonic::async_trait]
impl OperationService for Gateway {
    async fn submit_operation(
        &self,
        request: Request<pb::SubmitOperationRequest>,
    ) -> Result<Response<pb::SubmitOperationResponse>, Status> {
        let op_id = request.get_ref().op_id.clone();
        let span = operation_span("SubmitOperation", &op_id);
        traced(span, RpcSide::Server, async {
            let caller = self.caller_of(&request);
            let result = self.submit(caller, request.into_inner()).await;
            let outcome = match &result {
                Ok(response) if response.replayed => "replayed",
                Ok(_) => "created",
                Err(Error::OpIdConflict { .. }) => "conflict",
                Err(Error::InvalidArgument(_)) => "invalid",
                Err(
                    Error::PolicyDenied { .. } | Error::CallerDenied { .. } | Error::Unidentified,
                ) => "denied",
                Err(Error::OpIdTaken(_)) => "conflict",
                Err(_) => "failed",
            };
            metrics::inc(&metrics::metrics().submits, &[("result", outcome)]);
            if outcome == "created" {
                metrics::inc(&metrics::metrics().transitions, &[("state", "RECEIVED")]);
            }
            Ok(Response::new(result.map_err(|e| e.status_for(&op_id))?))
        })
        .await
    }

    async fn get_operation(
        &self,
        request: Request<pb::GetOperationRequest>,
    ) -> Result<Response<pb::GetOperationResponse>, Status> {
        let span = operation_span("GetOperation", &request.get_ref().op_id);
        traced(span, RpcSide::Server, async {
            let caller = self.caller_of(&request);
            let op_id = &request.get_ref().op_id;
            let operation = self
                .get(&caller, op_id)
                .await
                .map_err(|e| e.status_for(op_id))?;
            Ok(Response::new(pb::GetOperationResponse {
                operation: Some(operation),
            }))
        })
        .await
    }

    type WatchOperationStream = WatchStream;

    async fn watch_operation(
        &self,
        request: Request<pb::WatchOperationRequest>,
    ) -> Result<Response<Self::WatchOperationStream>, Status> {
        // The span covers opening the watch; the stream that follows is not one call's work.
        let span = operation_span("WatchOperation", &request.get_ref().op_id);
        traced(span, RpcSide::Server, async {
            let caller = self.caller_of(&request);
            let op_id = &request.get_ref().op_id;
            let first = self
                .get(&caller, op_id)
                .await
                .map_err(|e| e.status_for(op_id))?;
            let permit = self.watches.open(&caller)?;
            let (sender, receiver) = tokio::sync::mpsc::channel(4);
            let gateway = self.clone();
            tokio::spawn(async move {
                gateway.follow(caller, first, sender).await;
                drop(permit);
            });
            Ok(Response::new(
                Box::pin(tokio_stream::wrappers::ReceiverStream::new(receiver))
                    as Self::WatchOperationStream,
            ))
        })
        .await
    }

    async fn list_operations(
        &self,
        request: Request<pb::ListOperationsRequest>,
    ) -> Result<Response<pb::ListOperationsResponse>, Status> {
        let caller = self.caller_of(&request);
        Ok(Response::new(
            self.list(caller, request.into_inner()).await?,
        ))
    }

    async fn cancel_operation(
        &self,
        request: Request<pb::CancelOperationRequest>,
    ) -> Result<Response<pb::CancelOperationResponse>, Status> {
        let span = operation_span("CancelOperation", &request.get_ref().op_id);
        traced(span, RpcSide::Server, async {
            let caller = self.caller_of(&request);
            let op_id = &request.get_ref().op_id;
            let (operation, changed) = self
                .cancel(&caller, op_id)
                .await
                .map_err(|e| e.status_for(op_id))?;
            if changed && operation.state() == pb::OperationState::Cancelled {
                metrics::inc(&metrics::metrics().transitions, &[("state", "CANCELLED")]);
            }
            Ok(Response::new(pb::CancelOperationResponse {
                operation: Some(operation),
            }))
        })
        .await
    }
}

/// The server span of a call of `service` about `op_id`, in the operation's trace.
pub(crate) fn server_span(
    service: &'static str,
    method: &'static str,
    op_id: &str,
) -> tracing::Span {
    // The span is made before the request is checked: an op_id that is not one (a megabyte
    // of it, say) names no trace and is not recorded, or it would sit in every span exported.
    let valid = sigcast_domain::OpId::parse(op_id).is_ok();
    let named = if valid { op_id } else { INVALID_OP_ID };
    let span = grpc_span(RpcSide::Server, service, method, named, None);
    if valid {
        attach_op(&span, op_id);
    }
    span
}

/// What a span records for an op_id that is not one.
const INVALID_OP_ID: &str = "(invalid)";

/// The server span of an OperationService call about `op_id`.
fn operation_span(method: &'static str, op_id: &str) -> tracing::Span {
    server_span(
        sigcast_proto::sigcast::v1::operation_service_server::SERVICE_NAME,
        method,
        op_id,
    )
}

impl Gateway {
    /// Sends `op` and every later revision of it until it is terminal, the caller goes away
    /// or the server shuts down. Polls the store: the signer and broadcaster, which change
    /// operations, may be other processes.
    async fn follow(
        self,
        caller: String,
        mut op: pb::Operation,
        sender: tokio::sync::mpsc::Sender<Result<pb::WatchOperationResponse, Status>>,
    ) {
        let mut shutdown = self.shutdown.clone();
        loop {
            let terminal =
                sigcast_proto::state_from_proto(op.state()).is_none_or(|s| s.is_terminal());
            let revision = op.revision;
            if sender
                .send(Ok(pb::WatchOperationResponse {
                    operation: Some(op.clone()),
                }))
                .await
                .is_err()
                || terminal
            {
                return;
            }
            loop {
                let stopping = tokio::select! {
                    _ = tokio::time::sleep(self.watch_poll) => false,
                    _ = sender.closed() => return,
                    stop = shutdown.wait_for(|stop| *stop) => stop.is_ok(),
                };
                if stopping {
                    let _ = sender
                        .send(Err(Status::unavailable(
                            "the gateway is shutting down; watch again",
                        )))
                        .await;
                    return;
                }
                match self.get(&caller, &op.op_id).await {
                    Ok(latest) if latest.revision != revision => {
                        op = latest;
                        break;
                    }
                    Ok(_) => {}
                    Err(error) => {
                        let _ = sender.send(Err(error.status_for(&op.op_id))).await;
                        return;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// Records every span's `sigcast.op_id` as it is made.
    #[derive(Clone, Default)]
    struct OpIds(Arc<Mutex<Vec<String>>>);

    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for OpIds {
        fn on_new_span(
            &self,
            attrs: &tracing::span::Attributes<'_>,
            _: &tracing::span::Id,
            _: tracing_subscriber::layer::Context<'_, S>,
        ) {
            struct Visit<'a>(&'a Mutex<Vec<String>>);
            impl tracing::field::Visit for Visit<'_> {
                fn record_debug(
                    &mut self,
                    field: &tracing::field::Field,
                    value: &dyn std::fmt::Debug,
                ) {
                    if field.name() == "sigcast.op_id" {
                        self.0.lock().unwrap().push(format!("{value:?}"));
                    }
                }
            }
            attrs.record(&mut Visit(&self.0));
        }
    }

    #[test]
    fn a_span_records_an_op_id_only_when_it_is_one() {
        use tracing_subscriber::layer::SubscriberExt;
        let recorded = OpIds::default();
        let subscriber = tracing_subscriber::registry().with(recorded.clone());
        tracing::subscriber::with_default(subscriber, || {
            operation_span("GetOperation", "pay-42");
            operation_span("GetOperation", &"x".repeat(1 << 20));
            operation_span("GetOperation", "two\nlines");
        });
        assert_eq!(
            *recorded.0.lock().unwrap(),
            ["pay-42", INVALID_OP_ID, INVALID_OP_ID]
        );
    }
}
