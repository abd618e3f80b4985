//! The simulated processes. The signer and broadcaster replicas are the product's flows, one
//! step at a time: the broadcaster reads its work from the store, reads evidence with the
//! product's readers from simulated endpoints, calls the product's `decide`, and applies the
//! action with the product's record functions in store transactions guarded as the worker
//! guards them; the signer signs with the product's signing bodies and in-process keys.

use crate::exec::{now_ms, sleep, system_time, yield_now};
use crate::hedged::{self, ProcessReads};
use crate::node::{SimEndpoint, refused};
use crate::world::{Base, Tamper, World};
use alloy_signer_local::PrivateKeySigner;
use rand::Rng;
use rand::rngs::StdRng;
use serde_json::json;
use sigcast_domain::{EvmAddress, EvmContractCall, EvmTransfer, Intent, OpId, Wei};
use sigcast_evm::evidence::{Answer, Outcomes, Shared, SharedOutcomes};
use sigcast_evm::{Address, B256, Fees, TxParams, params_of};
use sigcast_jsonrpc::{Endpoint, PassCache};
use sigcast_proto::{intent_from_proto, new_operation, pb};
use sigcast_protocol::evm::replacement_base_fee;
use sigcast_protocol::record;
use sigcast_protocol::{Action, Evidence, Replacement, Settlement, Why, decide, reasons};
use sigcast_signer::keys::KeyHandle;
use sigcast_signer::{
    EndpointAtStart, InitialEvm, Replacement as SignerReplacement, ReplacementEvm, Signed,
    may_sit_in_a_pool, newest_sent, priced_against, replacement_fees, sign_initial_evm,
    sign_initial_evm_together, sign_replacement_evm,
};
use sigcast_store::blocks::{self, Seen};
use sigcast_store::operations::{self, Guard, SubmitOutcome};
use sigcast_store::work::{PASS_BUDGET, WorkList};
use sigcast_store::{accounts, tuple::Subspace};
use std::rc::Rc;
use std::sync::Arc;

/// What a broadcaster asks of the signer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// The first signature.
    Initial,
    /// A replacement at the same nonce, priced for at least the base fee of the head it was
    /// decided at (as the broadcaster asks).
    Replace(Replacement, Option<u128>),
    /// First signatures of the job's operation and its `others`, all of one account, in one
    /// transaction as the signer's batches commit them (`SignOperations`).
    Together,
}

/// A request to the signer (for `purpose`, over attempt `replaces`) and the slot its answer
/// goes to.
pub(crate) struct SignJob<P> {
    pub(crate) op_id: String,
    /// Operations signed with `op_id` ([`Purpose::Together`]).
    pub(crate) others: Vec<String>,
    pub(crate) purpose: P,
    pub(crate) replaces: u32,
    reply: Arc<std::sync::Mutex<Option<Result<u32, String>>>>,
}

/// Requests waiting for a signer replica.
pub(crate) type SignQueue<P> = std::sync::Mutex<std::collections::VecDeque<SignJob<P>>>;

const CHAIN: &str = "eip155:31337";
const SIGN_TIMEOUT_MS: u64 = 3_000;

/// The client side: submits operations, replays some, conflicts on purpose, cancels some.
pub(crate) async fn gateway(world: Rc<World>, rng: StdRng) {
    if world.settings.backlog > 0 {
        backlog(&world).await;
    }
    let load = Load {
        ops: world.settings.ops,
        accounts: world.accounts.len(),
        submit_spread_ms: world
            .settings
            .burst_ms
            .unwrap_or(world.settings.submit_spread_ms),
        cancel_rate: world.settings.cancel_rate,
    };
    let make = {
        let world = world.clone();
        move |op_id: &str, account: usize, value: u64| transfer(&world, op_id, account, value)
    };
    submit_all(world, load, make, rng).await;
}

/// What the client side submits.
pub(crate) struct Load {
    /// Operations.
    pub(crate) ops: usize,
    /// Accounts they are spread over.
    pub(crate) accounts: usize,
    /// Over this long.
    pub(crate) submit_spread_ms: u64,
    /// Share cancelled.
    pub(crate) cancel_rate: f64,
}

/// Submits `load.ops` operations made by `make(op_id, account, value)`, replays some,
/// conflicts on purpose, cancels some.
pub(crate) async fn submit_all<W: std::ops::Deref<Target = Base> + 'static>(
    world: Rc<W>,
    load: Load,
    make: impl Fn(&str, usize, u64) -> pb::Operation,
    mut rng: StdRng,
) {
    for i in 0..load.ops {
        sleep(rng.gen_range(0..load.submit_spread_ms)).await;
        let account = rng.gen_range(0..load.accounts);
        let op_id = format!("op-{i:03}");
        let new = make(&op_id, account, 1_000 + i as u64);
        let submitted = gateway_submit(&world, &new).await;
        // A commit whose result was unknown runs the submit again, which then finds the
        // operation it created: the client gets it as a replay, with the same intent.
        match submitted {
            Ok(SubmitOutcome::Created(_)) => world.trace(format!("gateway: {op_id} received")),
            Ok(SubmitOutcome::Replayed(ref op)) if op.intent == new.intent => {
                world.trace(format!("gateway: {op_id} received (commit result unknown)"))
            }
            other => world.violation(format!("a new op_id was not created: {other:?}")),
        }
        world.submitted.lock().unwrap().push(op_id.clone());
        // The same submit again: a replay, never a second operation.
        if rng.gen_bool(0.2) {
            let again = gateway_submit(&world, &new).await;
            if !matches!(again, Ok(SubmitOutcome::Replayed(_))) {
                world.violation(format!(
                    "a repeated submit of {op_id} was not a replay: {again:?}"
                ));
            }
        }
        // The same op_id for another payment: refused, nothing overwritten.
        if rng.gen_bool(0.05) {
            let other = make(&op_id, account, 7);
            let conflict = gateway_submit(&world, &other).await;
            if !matches!(conflict, Ok(SubmitOutcome::Conflict(ref op)) if op.intent == new.intent) {
                world.violation(format!(
                    "a conflicting submit of {op_id} was not refused: {conflict:?}"
                ));
            }
        }
        if rng.gen_bool(load.cancel_rate) {
            let delay = rng.gen_range(0..3_000);
            let world = world.clone();
            let op_id = op_id.clone();
            world.clone().spawn(format!("cancel-{op_id}"), async move {
                sleep(delay).await;
                let (root, id, now) = (world.store.root().clone(), op_id.clone(), system_time());
                let outcome = world
                    .store
                    .run_grouped(GATEWAY, move |tx| operations::cancel(tx, &root, &id, now))
                    .await;
                world.trace(format!("gateway: cancel {op_id}: {outcome:?}"));
            });
        }
    }
}

/// The gateway's process name: its writes go through its own group commit.
const GATEWAY: &str = "gateway";

/// A submit as the gateway writes it (`grpc.rs`): the time read first, the body through the
/// gateway's group commit on the embedded store.
async fn gateway_submit(world: &Base, new: &pb::Operation) -> sigcast_store::Result<SubmitOutcome> {
    let (root, new, now) = (world.store.root().clone(), new.clone(), system_time());
    world
        .store
        .run_grouped(GATEWAY, move |tx| {
            operations::submit(tx, &root, new.clone(), now)
        })
        .await
}

/// Operation `op_id` of `account`, worth `value` wei: a transfer, or (in a seed with large
/// calls, a third of them) a contract call with 100–120 kB of calldata.
fn transfer(world: &World, op_id: &str, account: usize, value: u64) -> pb::Operation {
    let from = EvmAddress::from(world.accounts[account].0.0);
    let intent = if world.settings.large_calls && value.is_multiple_of(3) {
        let len = 100_001 + (value % 5) as usize * 5_000;
        Intent::EvmContractCall(EvmContractCall {
            chain_id: 31337,
            from,
            to: EvmAddress::from([0xca; 20]),
            data: vec![(value % 251) as u8; len],
            value: Wei::zero(),
            gas_limit: Some(21_000 + 16 * len as u64),
        })
    } else {
        Intent::EvmTransfer(EvmTransfer {
            chain_id: 31337,
            from,
            to: EvmAddress::from([0xbe; 20]),
            value: Wei::parse(&value.to_string()).expect("a decimal amount"),
        })
    };
    new_operation(&OpId::parse(op_id).expect("a valid op_id"), &intent)
}

/// Another holder of the keys, sending at the accounts' next nonces straight to the pool.
pub(crate) async fn outside_sender(world: Rc<World>, mut rng: StdRng) {
    loop {
        sleep(rng.gen_range(2_000..10_000)).await;
        if !world.faulty() {
            return;
        }
        let account = rng.gen_range(0..world.accounts.len());
        let key = &world.keys[account];
        let raw = {
            let chain = world.chain.lock().unwrap();
            let nonce = chain.nonce(&world.accounts[account]);
            sign(key, nonce, 50_000_000_000, 10_000_000_000)
        };
        let sent = world.chain.lock().unwrap().submit(&raw);
        if let Ok(hash) = sent {
            world.trace(format!("outside: {hash} from account {account}"));
            world.foreign.lock().unwrap().insert(hash);
        }
    }
}

/// A transfer signed by `key` outside sigcast.
fn sign(key: &PrivateKeySigner, nonce: u64, max_fee: u128, tip: u128) -> Vec<u8> {
    use alloy_signer::SignerSync;
    let intent = Intent::EvmTransfer(EvmTransfer {
        chain_id: 31337,
        from: EvmAddress::from(key.address().0.0),
        to: EvmAddress::from([0x0f; 20]),
        value: Wei::parse("1").expect("one wei"),
    });
    let params = TxParams {
        nonce,
        gas_limit: 21_000,
        fees: Fees::Eip1559 {
            max_fee_per_gas: max_fee,
            max_priority_fee_per_gas: tip,
        },
    };
    let unsigned = sigcast_evm::build_transaction(&intent, params).expect("a transfer");
    let signature = key
        .sign_hash_sync(&unsigned.signature_hash())
        .expect("signing");
    unsigned.into_signed(signature).raw
}

/// The signer's answer to a replacement the fee cap leaves no room for.
const AT_FEE_CAP: &str = "FEE_CAP";

/// The simulated chain's id.
const CHAIN_ID: u64 = 31337;
/// A second chain every simulated signer is configured for, whose one endpoint never answers
/// (`check_chains` must start the signer all the same).
const UNANSWERED_CHAIN_ID: u64 = 1;
/// That chain's endpoint.
const UNANSWERED_ENDPOINT: &str = "http://chain-1-node:8545";
/// How long the orchestrator waits before it starts again a signer that exited.
const RESTART_AFTER_MS: u64 = 2_000;

/// One signer replica: starts as the signer starts (`Signer::check_chains`), restarted by its
/// orchestrator after a while each time it refuses to; then takes jobs from the shared queue,
/// one at a time.
pub(crate) async fn signer(world: Rc<World>, name: String, mut rng: StdRng) {
    let mut verified = loop {
        match check_chains(&world) {
            Ok(verified) => break verified,
            Err(refusal) => {
                world.trace(format!("{name}: exits at start: {refusal}"));
                sleep(RESTART_AFTER_MS).await;
            }
        }
    };
    // What this process has seen of each endpoint: gone with the process.
    let reads = std::sync::Mutex::new(ProcessReads::new(world.endpoints.len()));
    serve_signs(&world, &world.sign_jobs, &name, async |job| {
        if !verified {
            // As `Signer::ensure_verified`: a chain no endpoint answered for at start is
            // asked again before its first signature.
            verify_chain(&world)?;
            verified = true;
        }
        sign_one(&world, &name, job, &reads, &mut rng).await
    })
    .await;
}

/// The signer's start: every configured endpoint asked which chain it serves, each answer
/// taken as the signer takes it ([`EndpointAtStart`]). Whether the simulated chain was seen
/// served, or why the signer exits.
fn check_chains(world: &World) -> Result<bool, String> {
    let mut verified = false;
    let unanswered = Err(refused(UNANSWERED_ENDPOINT).to_string());
    let answers = world
        .endpoints
        .iter()
        .map(|endpoint| (CHAIN_ID, endpoint.label(), chain_id_of(endpoint)))
        .chain([(UNANSWERED_CHAIN_ID, UNANSWERED_ENDPOINT, unanswered)]);
    for (configured, label, answer) in answers {
        let check = EndpointAtStart::of(configured, answer);
        let refuses = match world.settings.tamper {
            Tamper::StartNeedsEveryChain => check != EndpointAtStart::Serves,
            _ => check.refuses_start(),
        };
        if refuses {
            return Err(format!(
                "endpoint {label} {check}, configured for chain {configured}"
            ));
        }
        verified |= check == EndpointAtStart::Serves && configured == CHAIN_ID;
    }
    Ok(verified)
}

/// That the simulated chain is served, asked of its endpoints in turn until one answers.
fn verify_chain(world: &World) -> Result<(), String> {
    for endpoint in &world.endpoints {
        match EndpointAtStart::of(CHAIN_ID, chain_id_of(endpoint)) {
            EndpointAtStart::Serves => return Ok(()),
            EndpointAtStart::ServesAnother(served) => {
                return Err(format!("{} serves chain {served}", endpoint.label()));
            }
            EndpointAtStart::Unanswered(_) => {}
        }
    }
    Err(format!(
        "chain {CHAIN_ID}: no endpoint answered eth_chainId"
    ))
}

/// `eth_chainId` as `endpoint` answers it at once.
fn chain_id_of(endpoint: &SimEndpoint) -> Result<u64, String> {
    let answer = endpoint
        .answer_at_once("eth_chainId")
        .map_err(|e| e.to_string())?;
    sigcast_jsonrpc::quantity(&answer).ok_or_else(|| format!("eth_chainId answered {answer}"))
}

/// A signer replica's loop: takes jobs from `jobs`, one at a time, and answers each with what
/// `sign` made of it.
pub(crate) async fn serve_signs<P: std::fmt::Debug>(
    world: &Base,
    jobs: &SignQueue<P>,
    name: &str,
    mut sign: impl AsyncFnMut(&SignJob<P>) -> Result<u32, String>,
) {
    loop {
        let job = jobs.lock().unwrap().pop_front();
        let Some(job) = job else {
            sleep(5).await;
            continue;
        };
        let answer = sign(&job).await;
        world.trace(format!(
            "{name}: {} {:?} → {answer:?}",
            job.op_id, job.purpose
        ));
        *job.reply.lock().unwrap() = Some(answer);
    }
}

/// Where a signer process reads the chain for one signature.
#[derive(Clone, Copy)]
pub(crate) enum Via<'a> {
    /// One endpoint, drawn for the signature.
    One(usize),
    /// The process's endpoints as it ranks them (`Settings::hedged_reads`).
    Ranked(&'a str, &'a std::sync::Mutex<ProcessReads>),
}

impl<'a> Via<'a> {
    /// Where process `name` reads for its next signature. The endpoint is drawn either way, so
    /// that the seed's other draws stay as they were.
    fn drawn(
        world: &World,
        name: &'a str,
        reads: &'a std::sync::Mutex<ProcessReads>,
        rng: &mut StdRng,
    ) -> Self {
        let endpoint = rng.gen_range(0..world.endpoints.len());
        if world.settings.hedged_reads {
            Via::Ranked(name, reads)
        } else {
            Via::One(endpoint)
        }
    }
}

/// The current fees, from the head, as the signer reads them.
async fn fees(world: &World, via: Via<'_>) -> Result<Fees, String> {
    let method = "eth_getBlockByNumber";
    let params = json!(["latest", false]);
    let latest = match via {
        Via::One(endpoint) => world.endpoints[endpoint]
            .request(method, params)
            .await
            .map_err(|e| e.to_string())?,
        Via::Ranked(process, reads) => {
            hedged::read(world, process, reads, method, params, Some).await?
        }
    };
    let base = sigcast_evm::base_fee(&latest).ok_or("no base fee")?;
    // The simulated nodes suggest a tip of 1 gwei.
    Ok(sigcast_evm::eip1559_fees_from(base, 1_000_000_000))
}

/// What a signature of a recorded operation needs from its record: the record, its intent,
/// its sender, the gas limit and the key.
struct Resolved {
    op: pb::Operation,
    intent: Intent,
    sender: EvmAddress,
    gas_limit: u64,
    key: KeyHandle,
}

fn resolve(world: &World, op_id: &str) -> Result<Resolved, String> {
    let root = world.store.root().clone();
    let op = world
        .store
        .read(|tx| operations::get(tx, &root, op_id))
        .map_err(|e| e.to_string())?
        .ok_or("not recorded")?;
    let rules = world.intent_rules();
    let intent = intent_from_proto("intent", op.intent.as_ref(), Some(&rules))
        .map_err(|v| format!("{v:?}"))?;
    let (sender, gas_limit) = match &intent {
        Intent::EvmTransfer(transfer) => (transfer.from, 21_000),
        Intent::EvmContractCall(call) => (call.from, call.gas_limit.unwrap_or(21_000)),
        _ => return Err("only EVM transfers and calls are simulated".into()),
    };
    let from = Address::from(*sender.as_bytes());
    let index = world
        .accounts
        .iter()
        .position(|a| *a == from)
        .ok_or("no key")?;
    Ok(Resolved {
        op,
        intent,
        sender,
        gas_limit,
        key: world.key(index),
    })
}

/// The signer's reads before a first signature, from one endpoint: the account's count at
/// the broadcaster's confirmation depth (the signer's own read), and the fees.
async fn initial_reads(
    world: &World,
    via: Via<'_>,
    from: Address,
) -> Result<(sigcast_evm::evidence::AccountNonces, Fees), String> {
    let depth = world.signer_depth();
    let chain_nonce = match via {
        Via::One(endpoint) => {
            sigcast_evm::evidence::account_nonces(&world.endpoints[endpoint], from, depth)
                .await
                .map_err(|e| format!("nonce unreadable: {e}"))?
        }
        Via::Ranked(process, reads) if depth <= 1 => {
            // As the signer at depth 1: the count at the head, hedged.
            let params = json!([from.to_string(), "latest"]);
            let count = hedged::read(
                world,
                process,
                reads,
                "eth_getTransactionCount",
                params,
                |v| sigcast_jsonrpc::quantity(&v),
            )
            .await
            .map_err(|e| format!("nonce unreadable: {e}"))?;
            sigcast_evm::evidence::AccountNonces {
                head: count,
                settled: count,
            }
        }
        Via::Ranked(_, reads) => {
            // As the signer deeper: one endpoint answers the head and both counts under it.
            let endpoints = hedged::ranked(world, reads);
            sigcast_evm::evidence::account_nonces_from_first(endpoints, from, depth)
                .await
                .map_err(|errors| {
                    let errors: Vec<String> = errors.iter().map(ToString::to_string).collect();
                    format!("nonce unreadable: {}", errors.join("; "))
                })?
        }
    };
    let fees = fees(world, via).await?.capped(world.fee_cap());
    Ok((chain_nonce, fees))
}

/// The first signature's request of `resolved`, with the chain as the signer read it.
fn initial_request(
    world: &World,
    resolved: Resolved,
    (chain_nonce, fees): (sigcast_evm::evidence::AccountNonces, Fees),
) -> InitialEvm {
    InitialEvm {
        root: world.store.root().clone(),
        op_id: resolved.op.op_id,
        caller: "sim".into(),
        now: system_time(),
        intent: resolved.intent,
        policy: None,
        value: sigcast_evm::U256::from(1_000u64),
        chain_nonce,
        gas_limit: resolved.gas_limit,
        fees,
        key: resolved.key,
    }
}

/// First signatures of one account's operations as the signer's batch signs them: those of
/// keys in this process in one transaction, or, when it cannot commit, each alone in order;
/// those of a token each alone. Answers how many were signed.
async fn sign_together(
    world: &World,
    name: &str,
    job: &SignJob<Purpose>,
    signer_reads: &std::sync::Mutex<ProcessReads>,
    rng: &mut StdRng,
) -> Result<u32, String> {
    let via = Via::drawn(world, name, signer_reads, rng);
    let mut reads = None;
    let (mut together, mut alone) = (Vec::new(), Vec::new());
    for op_id in std::iter::once(&job.op_id).chain(&job.others) {
        // As the signer prepares a batch: an operation signed already is answered with its
        // signature, one no longer RECEIVED (cancelled) is refused alone; neither enters the
        // transaction.
        let Ok(resolved) = resolve(world, op_id) else {
            continue;
        };
        if resolved.op.state() != pb::OperationState::Received {
            continue;
        }
        let read = match reads {
            Some(read) => read,
            None => {
                let from = Address::from(*resolved.sender.as_bytes());
                *reads.insert(initial_reads(world, via, from).await?)
            }
        };
        let request = Arc::new(initial_request(world, resolved, read));
        match request.key.signs_in_process() {
            true => together.push(request),
            false => alone.push(request),
        }
    }
    let signed = sign_each_alone(world, name, &alone).await;
    if together.is_empty() {
        return Ok(signed);
    }
    let requests = together.clone();
    match world
        .commit_signing(name, true, move |tx| {
            sign_initial_evm_together(tx, &requests)
        })
        .await
    {
        Ok(Ok(all)) => Ok(signed + all.len() as u32),
        _ => Ok(signed + sign_each_alone(world, name, &together).await),
    }
}

/// First signatures of `requests`, each in its own transaction, in order; how many were signed.
async fn sign_each_alone(world: &World, name: &str, requests: &[Arc<InitialEvm>]) -> u32 {
    let mut signed = 0;
    for request in requests {
        let request = request.clone();
        let in_process = request.key.signs_in_process();
        let one = world
            .commit_signing(name, in_process, move |tx| sign_initial_evm(tx, &request))
            .await;
        signed += u32::from(attempt_signed(one).is_ok());
    }
    signed
}

async fn sign_one(
    world: &World,
    name: &str,
    job: &SignJob<Purpose>,
    reads: &std::sync::Mutex<ProcessReads>,
    rng: &mut StdRng,
) -> Result<u32, String> {
    if job.purpose == Purpose::Together {
        return sign_together(world, name, job, reads, rng).await;
    }
    let root = world.store.root().clone();
    let resolved = resolve(world, &job.op_id)?;
    let via = Via::drawn(world, name, reads, rng);
    match job.purpose {
        Purpose::Initial => {
            let from = Address::from(*resolved.sender.as_bytes());
            let read = initial_reads(world, via, from).await?;
            let request = initial_request(world, resolved, read);
            let in_process = request.key.signs_in_process();
            attempt_signed(
                world
                    .commit_signing(name, in_process, move |tx| sign_initial_evm(tx, &request))
                    .await,
            )
        }
        Purpose::Together => unreachable!("signed by sign_together"),
        Purpose::Replace(replacement, min_base_fee) => {
            let Resolved {
                op,
                intent,
                sender,
                key,
                ..
            } = resolved;
            let kind = match replacement {
                Replacement::FeeBump => SignerReplacement::FeeBump,
                Replacement::Cancel => SignerReplacement::Cancel,
                Replacement::GapFill => SignerReplacement::GapFill,
            };
            if !matches!(
                op.state(),
                pb::OperationState::Signed | pb::OperationState::Sent
            ) {
                return Err(format!("{:?}: not replaced", op.state()));
            }
            let last = op.attempts.last().ok_or("no attempt")?;
            let cancel_replacing = (kind == SignerReplacement::Cancel).then_some(job.replaces);
            if let Some(existing) = record::final_self_transfer(&op, cancel_replacing) {
                return Ok(existing.number);
            }
            if last.number != job.replaces {
                return Ok(last.number);
            }
            if kind == SignerReplacement::FeeBump && op.cancel_requested {
                return Err("a cancel was asked for: no fee bump".into());
            }
            let priced = priced_against(&op).map_or(last.number, |a| a.number);
            let outbids = newest_sent(&op).map_or(0, |a| a.number);
            let previous = world
                .store
                .read(|tx| accounts::payload(tx, &root, &job.op_id, priced))
                .map_err(|e| e.to_string())?
                .and_then(|raw| params_of(&raw))
                .ok_or("previous payload unreadable")?;
            let current = fees(world, via).await?;
            let in_a_pool = may_sit_in_a_pool(&op);
            let limits = sigcast_evm::FeeLimits::per_gas(world.fee_cap());
            let fees = replacement_fees(
                kind,
                previous.fees,
                current,
                min_base_fee,
                limits,
                in_a_pool,
            )
            .ok_or(AT_FEE_CAP)?;
            let (intent, gas_limit) = match kind {
                SignerReplacement::FeeBump => (intent.clone(), previous.gas_limit),
                SignerReplacement::Cancel | SignerReplacement::GapFill => (
                    Intent::EvmTransfer(EvmTransfer {
                        chain_id: 31337,
                        from: sender,
                        to: sender,
                        value: Wei::zero(),
                    }),
                    21_000,
                ),
            };
            let request = ReplacementEvm {
                root,
                op_id: job.op_id.clone(),
                caller: "sim".into(),
                now: system_time(),
                kind,
                replaces_attempt: job.replaces,
                outbids,
                intent,
                params: TxParams {
                    nonce: previous.nonce,
                    gas_limit,
                    fees,
                },
                key,
            };
            let in_process = request.key.signs_in_process();
            attempt_signed(
                world
                    .commit_signing(name, in_process, move |tx| {
                        sign_replacement_evm(tx, &request)
                    })
                    .await,
            )
        }
    }
}

/// Asks a signer replica through `jobs`, waiting at most [`SIGN_TIMEOUT_MS`] (a crashed
/// replica never answers).
pub(crate) async fn ask_signer<P>(
    jobs: &SignQueue<P>,
    op_id: &str,
    purpose: P,
    replaces: u32,
) -> Result<u32, String> {
    ask(jobs, op_id, Vec::new(), purpose, replaces).await
}

/// Asks a signer replica for the first signatures of `op_ids`, all of one account, together.
async fn ask_signer_together(jobs: &SignQueue<Purpose>, op_ids: &[String]) -> Result<u32, String> {
    let (first, others) = op_ids.split_first().ok_or("nothing to sign")?;
    ask(jobs, first, others.to_vec(), Purpose::Together, 0).await
}

async fn ask<P>(
    jobs: &SignQueue<P>,
    op_id: &str,
    others: Vec<String>,
    purpose: P,
    replaces: u32,
) -> Result<u32, String> {
    let reply = Arc::new(std::sync::Mutex::new(None));
    jobs.lock().unwrap().push_back(SignJob {
        op_id: op_id.to_owned(),
        others,
        purpose,
        replaces,
        reply: reply.clone(),
    });
    let deadline = now_ms() + SIGN_TIMEOUT_MS;
    loop {
        if let Some(answer) = reply.lock().unwrap().take() {
            return answer;
        }
        if now_ms() >= deadline {
            return Err("signer timed out".into());
        }
        sleep(10).await;
    }
}

/// One broadcaster replica: the worker's passes, one operation at a time.
pub(crate) async fn broadcaster(world: Rc<World>, name: String, mut rng: StdRng) {
    let work = WorkList::default();
    // This start of the process, among the replicas: as the worker draws one at each start,
    // a claim left by an earlier start (killed while it read a list) is another's.
    let replica = {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::hash::DefaultHasher::new();
        (&name, now_ms()).hash(&mut hasher);
        hasher.finish()
    };
    let lists = world.settings.shared_lists.then(|| {
        sigcast_evm::evidence::RecentReceipts::shared_by(Arc::new(SimOutcomes {
            store: world.store.clone(),
            chain: CHAIN.to_owned(),
            replica,
        }))
    });
    // What this process has seen of each endpoint: gone with the process.
    let reads = std::sync::Mutex::new(ProcessReads::new(world.endpoints.len()));
    loop {
        sleep(world.settings.poll_ms).await;
        for state in [
            pb::OperationState::Received,
            pb::OperationState::Signed,
            pb::OperationState::Sent,
        ] {
            // Each endpoint read through one cache for the stage, as the worker's checks read
            // them.
            let caches: Vec<_> = (0..world.endpoints.len())
                .map(|index| {
                    PassCache::with_clock(
                        hedged::RankedEndpoint::new(&world, index, &reads),
                        crate::exec::instant,
                    )
                })
                .collect();
            let mut ops = list_work(&world, &work, CHAIN, state, world.settings.tamper);
            if state == pb::OperationState::Signed {
                ops.sort_by_key(|op| (op.account.clone(), sigcast_protocol::evm::nonce_of(op)));
            }
            yield_now().await;
            if state == pb::OperationState::Received && world.settings.batch_signing {
                ops = sign_by_account(&world, &name, ops).await;
            }
            for op in ops {
                work_on(&world, &name, op, lists.as_ref(), &reads, &caches, &mut rng).await;
            }
        }
    }
}

/// Asks for the first signatures of `ops` account by account, at most 256 in one call, as the
/// worker asks for them (`SignOperations`); returns the operations decided otherwise.
async fn sign_by_account(world: &World, name: &str, ops: Vec<pb::Operation>) -> Vec<pb::Operation> {
    let mut rest = Vec::new();
    let mut batches: Vec<(String, Vec<String>)> = Vec::new();
    for op in ops {
        if decide(&op, &Evidence::None, system_time(), &world.rules) != Action::Sign {
            rest.push(op);
            continue;
        }
        match batches.last_mut() {
            Some((account, ids)) if *account == op.account && ids.len() < 256 => ids.push(op.op_id),
            _ => batches.push((op.account, vec![op.op_id])),
        }
    }
    for (_, ids) in batches {
        let answer = ask_signer_together(&world.sign_jobs, &ids).await;
        world.trace(format!("{name}: {ids:?} signed together: {answer:?}"));
    }
    rest
}

/// The work of one state on `chain`, listed by the worker's own listing: account by account,
/// fairly. Broken on purpose (`--tamper list-by-op-id`), as the worker once listed it: the first
/// 1,000 operations of the state by op_id, those of other chains dropped afterwards.
pub(crate) fn list_work(
    world: &Base,
    work: &WorkList,
    chain: &str,
    state: pb::OperationState,
    tamper: Tamper,
) -> Vec<pb::Operation> {
    let root = world.store.root().clone();
    if tamper == Tamper::ListByOpId {
        let filter = operations::ListFilter {
            state: Some(state),
            ..Default::default()
        };
        return world
            .store
            .read(|tx| operations::list(tx, &root, &filter, None, 1_000))
            .ok()
            .and_then(Result::ok)
            .map(|page| page.operations)
            .unwrap_or_default()
            .into_iter()
            .filter(|op| op.chain == chain)
            .collect();
    }
    let listing = work.listing(state, vec![chain.to_owned()], PASS_BUDGET);
    match world.store.read(|tx| listing.read(tx, &root)) {
        Ok(taken) => work.advance(taken),
        Err(_) => Vec::new(),
    }
}

/// Operations of a chain no simulated process serves, their op_ids sorted before every other:
/// a backlog that must keep no operation of this chain waiting.
async fn backlog(world: &World) {
    let root = world.store.root().clone();
    let at = system_time();
    let stored = world
        .store
        .run(|tx| {
            for i in 0..world.settings.backlog {
                let mut op = pb::Operation {
                    op_id: format!("a-{i:04}"),
                    state: pb::OperationState::Received.into(),
                    chain: "solana:localnet".into(),
                    account: "Stuck11111111111111111111111111111111111111".into(),
                    ..Default::default()
                };
                operations::put(tx, &root, None, &mut op, at)?;
            }
            Ok(())
        })
        .await;
    match stored {
        Ok(()) => world.trace(format!(
            "gateway: a backlog of {} operations of another chain",
            world.settings.backlog
        )),
        Err(error) => world.violation(format!("the backlog was not stored: {error}")),
    }
}

/// Blocks' outcomes shared through the simulated store, as the worker shares them through its
/// store (`services/broadcaster/src/outcomes.rs`): the same store bodies, the simulated clock
/// for the pause between looks.
struct SimOutcomes {
    store: crate::kv::SimStore,
    chain: String,
    replica: u64,
}

impl std::fmt::Debug for SimOutcomes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimOutcomes")
            .field("replica", &self.replica)
            .finish_non_exhaustive()
    }
}

impl SimOutcomes {
    /// This chain's block `number` with `hash`, as the store names it.
    fn block<'a>(&'a self, number: u64, hash: &'a str) -> blocks::Block<'a> {
        blocks::Block {
            chain: &self.chain,
            number,
            hash,
        }
    }

    /// Runs `body` on the block in a store transaction (what fails only costs the others a
    /// read of the list).
    async fn write(
        &self,
        number: u64,
        hash: B256,
        body: impl Fn(
            &mut dyn sigcast_store::KvTransaction,
            &Subspace,
            blocks::Block<'_>,
        ) -> sigcast_store::Result<()>,
    ) {
        let root = self.store.root().clone();
        let hash = hash.to_string();
        let block = self.block(number, &hash);
        let _ = self.store.run(|tx| body(tx, &root, block)).await;
    }
}

impl SharedOutcomes for SimOutcomes {
    fn claim(&self, number: u64, hash: B256) -> Answer<'_, Shared> {
        Box::pin(async move {
            let root = self.store.root().clone();
            let hash = hash.to_string();
            let block = self.block(number, &hash);
            let seen = match self.store.read(|tx| blocks::seen(tx, &root, block)) {
                Ok(Some(Seen::Reading(id))) if id == self.replica => Ok(None),
                Ok(None) => {
                    self.store
                        .run(|tx| blocks::claim(tx, &root, block, self.replica))
                        .await
                }
                seen => seen,
            };
            match seen {
                Ok(None) | Err(_) => Shared::Claimed,
                Ok(Some(Seen::Reading(_))) => Shared::Elsewhere,
                Ok(Some(Seen::Outcomes(digest, success))) => Shared::Known(Outcomes {
                    transactions: B256::from(digest),
                    success,
                }),
            }
        })
    }

    fn publish(&self, number: u64, hash: B256, outcomes: Outcomes) -> Answer<'_, ()> {
        Box::pin(self.write(number, hash, move |tx, root, block| {
            let digest = &outcomes.transactions.0;
            blocks::publish(tx, root, block, self.replica, digest, &outcomes.success)
        }))
    }

    fn give_up(&self, number: u64, hash: B256) -> Answer<'_, ()> {
        Box::pin(self.write(number, hash, move |tx, root, block| {
            blocks::give_up(tx, root, block, self.replica)
        }))
    }

    fn pause(&self) -> Answer<'_, ()> {
        Box::pin(sleep(50))
    }
}

async fn work_on(
    world: &Rc<World>,
    name: &str,
    op: pb::Operation,
    shared_lists: Option<&sigcast_evm::evidence::RecentReceipts>,
    reads: &std::sync::Mutex<ProcessReads>,
    caches: &[PassCache<hedged::RankedEndpoint<'_>>],
    rng: &mut StdRng,
) {
    let mut evidence = Evidence::None;
    let mut action = decide(&op, &evidence, system_time(), &world.rules);
    if matches!(action, Action::ReadMore(_)) {
        let account: Address = op.account.parse().expect("an EVM account");
        let Some(nonce) = sigcast_protocol::evm::nonce_of(&op) else {
            return;
        };
        let hashes: Vec<B256> = op
            .attempts
            .iter()
            .filter_map(|a| a.tx_id.parse().ok())
            .collect();
        let mut order: Vec<usize> = (0..world.endpoints.len()).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, rng.gen_range(0..=i));
        }
        if world.settings.hedged_reads {
            // As the worker reads them: in the order of its ranking (the order drawn above
            // only keeps the seed's other draws as they were).
            order = hedged::order(reads);
        }
        for index in order {
            if !matches!(action, Action::ReadMore(_)) {
                break;
            }
            // Each request recorded in the process's ranking, as the pool records it.
            let endpoint = &caches[index];
            // Half the reads as under load, from whole blocks' receipt lists (kept for this
            // read only: their reuse across passes is by block hash; or, sharing, the
            // process's). Chosen without drawing from the seed's stream, so the regression
            // seeds keep their runs.
            let lists = sigcast_evm::evidence::RecentReceipts::default();
            let recent = (nonce + index as u64)
                .is_multiple_of(2)
                .then_some(shared_lists.unwrap_or(&lists));
            let Ok(mut view) = sigcast_evm::evidence::read_view(
                endpoint,
                account,
                nonce,
                &hashes,
                recent,
                world.rules.confirmations,
            )
            .await
            else {
                continue;
            };
            if world.settings.tamper == Tamper::IgnoreDepthLink
                && let Some(landed) = view.landed.as_mut()
            {
                landed.descendant = Some(view.head.clone());
            }
            let views = match &mut evidence {
                Evidence::Evm(views) => views,
                _ => {
                    evidence = Evidence::Evm(Vec::new());
                    match &mut evidence {
                        Evidence::Evm(views) => views,
                        _ => unreachable!("just set"),
                    }
                }
            };
            views.push(view);
            action = decide(&op, &evidence, system_time(), &world.rules);
        }
    }
    action = tamper(world, &op, action);
    match &action {
        Action::Wait(_) | Action::ReadMore(_) => return,
        _ => world.trace(format!(
            "{name}: {} rev {} {:?} → {}",
            op.op_id,
            op.revision,
            op.state(),
            describe(&action)
        )),
    }
    match action {
        Action::Wait(_) | Action::ReadMore(_) | Action::Resign(_) => {}
        Action::Sign => {
            let answer = ask_signer(&world.sign_jobs, &op.op_id, Purpose::Initial, 0).await;
            world.trace(format!("{name}: {} signed: {answer:?}", op.op_id));
        }
        Action::Send(attempt) => send_again(world, name, &op, attempt, rng).await,
        Action::Replace(replacement) => {
            let newest = op.attempts.last().map_or(0, |a| a.number);
            match ask_signer(
                &world.sign_jobs,
                &op.op_id,
                Purpose::Replace(replacement, replacement_base_fee(&evidence)),
                newest,
            )
            .await
            {
                Ok(attempt) if attempt != newest => {
                    let at = system_time();
                    let sending = apply(world, name, &op.op_id, Guard::NotTerminal, move |o| {
                        record::record_sending_new(o, attempt, at)
                    })
                    .await;
                    if let Some(recorded) = sending {
                        first_sent_after_a_cancel(world, &recorded, attempt);
                        send(world, name, &op.op_id, attempt, rng).await;
                    }
                }
                Err(refusal) if refusal == AT_FEE_CAP => {
                    world.trace(format!("{name}: {} replacement at the fee cap", op.op_id));
                    let at = system_time();
                    let held = apply(world, name, &op.op_id, world.decided_guard(&op), move |o| {
                        record::record_held_at_fee_cap(o, newest, at)
                    })
                    .await;
                    if let Some(op) = held
                        && let Action::Send(attempt) =
                            sigcast_protocol::evm::at_fee_cap(&op, at, &world.rules)
                    {
                        send_again(world, name, &op, attempt, rng).await;
                    }
                }
                other => world.trace(format!("{name}: {} replacement: {other:?}", op.op_id)),
            }
        }
        Action::Settle(settlement) => {
            settle(world, name, &op, world.decided_guard(&op), settlement).await;
        }
    }
}

/// Applies a settlement decided on `op` under `guard`, and asks for the invariants to be
/// checked once it is stored.
pub(crate) async fn settle(
    world: &Base,
    name: &str,
    op: &pb::Operation,
    guard: Guard,
    settlement: Settlement,
) {
    let settled = apply(world, name, &op.op_id, guard, move |o| {
        record::settle(o, &settlement);
        true
    })
    .await;
    if let Some(op) = settled {
        world.trace(format!(
            "{name}: {} settled {:?} {:?}",
            op.op_id,
            op.state(),
            op.error.as_ref().map(|e| e.reason.as_str())
        ));
        world.check_now();
    }
}

/// The attempt a signing transaction stored, or why there is none.
fn attempt_signed(
    committed: sigcast_store::Result<Result<Signed, sigcast_signer::Error>>,
) -> Result<u32, String> {
    match committed {
        Ok(Ok(signed)) => Ok(signed.attempt),
        Ok(Err(refusal)) => Err(refusal.to_string()),
        Err(error) => Err(error.to_string()),
    }
}

/// Records attempt `attempt` as being sent on the record decided on, then sends it.
async fn send_again(
    world: &Rc<World>,
    name: &str,
    op: &pb::Operation,
    attempt: u32,
    rng: &mut StdRng,
) {
    let at = system_time();
    let sending = apply(world, name, &op.op_id, world.decided_guard(op), move |o| {
        record::record_sending(o, attempt, at)
    })
    .await;
    if let Some(recorded) = sending {
        first_sent_after_a_cancel(world, &recorded, attempt);
        send(world, name, &op.op_id, attempt, rng).await;
    }
}

/// A violation if `attempt`'s first send was recorded on a record whose cancel was asked for
/// and it carries the operation's effect (not a cancel or gap fill): a transaction that could
/// land after the caller was told the operation would be cancelled, and one a cancel priced
/// under it cannot replace.
fn first_sent_after_a_cancel(world: &Base, recorded: &pb::Operation, attempt: u32) {
    let Some(sent) = recorded.attempts.iter().find(|a| a.number == attempt) else {
        return;
    };
    if recorded.cancel_requested
        && sent.sends == 1
        && !record::reason_of(sent).takes_the_nonce_instead()
    {
        world.violation(format!(
            "{} attempt {attempt} ({}) was sent for the first time after its cancel was recorded",
            recorded.op_id,
            record::reason_of(sent)
        ));
    }
}

/// The broken decisions the simulation must catch (never used by the product).
fn tamper(world: &World, op: &pb::Operation, action: Action) -> Action {
    match (world.settings.tamper, &action) {
        (Tamper::NullReceiptRejects, Action::ReadMore(Why::NonceUsedUnidentified)) => {
            Action::Settle(Settlement {
                state: sigcast_domain::OperationState::Rejected,
                result: None,
                error: Some(pb::OperationError {
                    reason: reasons::NONCE_CONSUMED_EXTERNALLY.into(),
                    message: format!("{}: nonce past ours, no receipt", op.op_id),
                }),
                evidence: None,
            })
        }
        _ => action,
    }
}

fn describe(action: &Action) -> String {
    match action {
        Action::Settle(s) => format!(
            "settle {:?} {}",
            s.state,
            s.evidence.as_ref().map_or(String::new(), |e| format!(
                "{} in block {}",
                e.tx_id, e.block_number
            ))
        ),
        Action::Replace(r) => format!("replace {r:?}"),
        Action::Send(n) => format!("send attempt {n}"),
        other => other.name().to_owned(),
    }
}

/// Applies a change in one store transaction, as the worker of broadcaster replica `process`
/// does (`Worker::apply`): the time read once, before the body, and the body committed on the
/// embedded store through the process's own group commit (whose thread has a simulated clock
/// of its own), on FoundationDB semantics as a plain transaction.
pub(crate) async fn apply(
    world: &Base,
    process: &str,
    op_id: &str,
    guard: Guard,
    mut change: impl FnMut(&mut pb::Operation) -> bool + Send + 'static,
) -> Option<pb::Operation> {
    let (root, id, now) = (world.store.root().clone(), op_id.to_owned(), system_time());
    let updated = world
        .store
        .run_grouped(process, move |tx| {
            operations::update(tx, &root, &id, guard, &mut change, now)
        })
        .await;
    match updated {
        Ok(Some((_, updated))) => Some(updated),
        Ok(None) => None,
        Err(error) => {
            world.trace(format!("store: {op_id} {error}"));
            None
        }
    }
}

/// Sends an attempt's stored bytes to one endpoint and records what it answered.
async fn send(world: &Rc<World>, name: &str, op_id: &str, attempt: u32, rng: &mut StdRng) {
    let root = world.store.root().clone();
    let Ok(Some(raw)) = world
        .store
        .read(|tx| accounts::payload(tx, &root, op_id, attempt))
    else {
        world.violation(format!(
            "{op_id} attempt {attempt}: no stored payload to send"
        ));
        return;
    };
    world.record_sent(op_id, attempt, &raw);
    let endpoint = &world.endpoints[rng.gen_range(0..world.endpoints.len())];
    let answer = endpoint
        .request(
            "eth_sendRawTransaction",
            json!([sigcast_evm::hex::encode_prefixed(&raw)]),
        )
        .await;
    let outcome = sigcast_evm::send_outcome(&answer);
    world.trace(format!(
        "{name}: {op_id} attempt {attempt} sent to {} → {outcome:?}",
        endpoint.label()
    ));
    let at = system_time();
    let label = endpoint.label().to_owned();
    apply(world, name, op_id, Guard::NotTerminal, move |o| {
        record::record_outcome(o, attempt, &label, &outcome, at);
        true
    })
    .await;
}
