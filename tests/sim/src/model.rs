//! An exhaustive model check of persist–send–record–check: every interleaving of a small world,
//! where the simulation samples seeds of a large one. One operation at one nonce, already
//! signed; two broadcaster replicas, each taking a snapshot of the record, reading the chain
//! later (a full view, a view whose receipt is not indexed yet, a view that finds nothing at a
//! used nonce, or a view one block behind), deciding with the product's `decide`, and applying
//! the decision later still, guarded by the snapshot's revision as the worker guards it; a
//! signer that appends a replacement only over the newest attempt it has stored; sends that
//! are lost before the node, taken with the reply lost, taken and answered, or refused; a node
//! that mines any transaction of its pool, evicts any, takes another sender's transaction at
//! the nonce, and reorganises its last block once; a caller that asks for a cancel; crashes of
//! either replica at any step; a clock that moves in whole seconds.
//!
//! Every reachable state is visited (breadth first, so a counterexample is a shortest one) and
//! these hold in each: CONFIRMED names an attempt of the operation (not its cancel) on the
//! canonical chain at the block it names; REJECTED only while another sender's transaction or
//! the operation's gap fill holds the nonce there; CANCELLED only while its cancel holds it, or
//! when nothing of the operation ever reached the node.
//!
//! Not modelled: several nonces or accounts, fee levels, the signer's fee cap, durable
//! nonces, Solana, the store's transaction semantics (each step is atomic here; the simulation
//! runs the store) and liveness (every state may still wait: progress is the simulation's).

use crate::world::Tamper;
use prost::Message;
use sigcast_domain::{AttemptReason, OperationState};
use sigcast_proto::pb;
use sigcast_protocol::record::{self, SendOutcome};
use sigcast_protocol::{
    Action, BlockRef, Evidence, EvmLanded, EvmView, Replacement, Rules, Settlement, decide,
};
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, SystemTime};

const ENDPOINT: &str = "http://node:8545";

/// The size of the world: each configuration is checked exhaustively.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Broadcaster replicas (1 or 2).
    pub replicas: usize,
    /// Seconds the clock moves at most.
    pub ticks: u8,
    /// Blocks mined at most (after genesis).
    pub blocks: usize,
    /// Reorganisations of the last block at most.
    pub reorgs: u8,
    /// Another holder of the key may send at the nonce.
    pub foreign: bool,
    /// The caller may ask for a cancel.
    pub cancel: bool,
    /// The node may drop transactions from its pool.
    pub evict: bool,
}

impl Bounds {
    /// The configurations the test suite checks, each exhausted: two replicas racing over a
    /// fee bump; one replica against another sender, a cancel, evictions and a reorg; two
    /// replicas racing over a cancel under a reorg.
    pub const SUITE: [Bounds; 3] = [
        Bounds {
            replicas: 2,
            ticks: 2,
            blocks: 2,
            reorgs: 0,
            foreign: false,
            cancel: false,
            evict: false,
        },
        Bounds {
            replicas: 1,
            ticks: 2,
            blocks: 3,
            reorgs: 1,
            foreign: true,
            cancel: true,
            evict: true,
        },
        Bounds {
            replicas: 2,
            ticks: 1,
            blocks: 2,
            reorgs: 1,
            foreign: false,
            cancel: true,
            evict: false,
        },
    ];
}

/// A transaction at the operation's nonce: one of its attempts, or another sender's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Tx {
    Attempt(u32),
    Foreign,
}

impl Tx {
    fn hash(self) -> String {
        match self {
            Tx::Attempt(n) => format!("0x{n:064x}"),
            Tx::Foreign => format!("0x{:064x}", 0xf0f0),
        }
    }
}

/// What a decision will do when applied (the product's action, encoded to be hashed).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Decided {
    Send(u32),
    Replace(Replacement),
    /// State, and the encoded result, error and evidence.
    Settle(OperationState, Vec<u8>, Vec<u8>, Vec<u8>),
}

/// Where a broadcaster replica is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Phase {
    Idle,
    /// Holds a snapshot of the record.
    Read(Vec<u8>),
    /// Decided from the snapshot.
    Decided(Vec<u8>, Decided),
    /// Recorded as sending this attempt; the send has not gone out.
    Sending(u32),
    /// The node answered (or not).
    Answered(u32, Answer),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Answer {
    Accepted,
    Unknown,
    /// The nonce is used: "nonce too low", which proves nothing of these bytes.
    NonceTooLow,
    /// Refused at a free nonce for something other than its fees (the balance, say).
    Refused,
}

/// How a replica's read of the chain turns out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Read {
    /// Head, nonce, the transaction at the nonce with its receipt.
    Full,
    /// The transaction found in its block, its receipt not indexed yet.
    NoReceipt,
    /// The nonce shows used and nothing is found (state before receipts, pruned blocks).
    NothingFound,
    /// An endpoint one block behind.
    Behind,
}

/// One state of the world.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct State {
    /// The stored record (encoded `pb::Operation`; its revision inside).
    record: Vec<u8>,
    /// The canonical chain after genesis: each block's transaction at the nonce, and its fork.
    chain: Vec<(Option<Tx>, u8)>,
    /// The node's pool.
    pool: Vec<Tx>,
    foreign_sent: bool,
    /// A transaction of the operation reached the node.
    delivered: bool,
    cancel_asked: bool,
    reorgs: u8,
    ticks: u8,
    replicas: [Phase; 2],
}

/// A step of the world, for counterexamples.
#[derive(Clone, Debug)]
#[allow(dead_code, reason = "read through Debug, in counterexamples")]
enum Step {
    Tick,
    Mine(Option<Tx>),
    Reorg(Option<Tx>, bool),
    Evict(Tx),
    ForeignSend,
    AskCancel,
    Snapshot(usize),
    Decide(usize, String),
    Apply(usize),
    Send(usize, Answer),
    Record(usize),
    Crash(usize),
}

/// The model: its rules and the decision broken on purpose, if any.
pub struct Model {
    rules: Rules,
    tamper: Tamper,
    bounds: Bounds,
}

/// What a check found.
#[derive(Debug)]
pub struct Outcome {
    /// States visited.
    pub states: usize,
    /// The broken invariant and the shortest path to it, if one is reachable.
    pub counterexample: Option<(String, Vec<String>)>,
}

fn epoch() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)
}

fn decode(bytes: &[u8]) -> pb::Operation {
    pb::Operation::decode(bytes).expect("a record the model encoded")
}

fn block_hash(number: usize, fork: u8) -> String {
    format!("0x{:062x}{fork:02x}", number)
}

impl Model {
    /// The model of a world of `bounds` with the product's rules (depth 2 against reorgs of
    /// 1), broken by `tamper`.
    pub fn new(bounds: Bounds, tamper: Tamper) -> Self {
        Self {
            rules: Rules {
                confirmations: if tamper == Tamper::NoDepth { 1 } else { 2 },
                check_after: Duration::ZERO,
                rebroadcast_after: Duration::from_secs(2),
                fee_bump_after: Some(Duration::from_secs(2)),
                max_fee_bumps: 1,
                ..Rules::default()
            },
            tamper,
            bounds,
        }
    }

    fn initial(&self) -> State {
        let op = pb::Operation {
            op_id: "op".into(),
            state: pb::OperationState::Signed.into(),
            chain: "eip155:31337".into(),
            account: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8".into(),
            signing: Some(pb::operation::Signing::Evm(pb::EvmSigning { nonce: 0 })),
            attempts: vec![pb::Attempt {
                number: 1,
                tx_id: Tx::Attempt(1).hash(),
                reason: AttemptReason::Initial.as_str().into(),
                ..Default::default()
            }],
            revision: 1,
            ..Default::default()
        };
        State {
            record: op.encode_to_vec(),
            chain: Vec::new(),
            pool: Vec::new(),
            foreign_sent: false,
            delivered: false,
            cancel_asked: false,
            reorgs: 0,
            ticks: 0,
            replicas: [Phase::Idle, Phase::Idle],
        }
    }

    fn now(state: &State) -> SystemTime {
        epoch() + Duration::from_secs(u64::from(state.ticks))
    }

    /// The transaction at the nonce on the canonical chain, and its block number.
    fn landed(chain: &[(Option<Tx>, u8)]) -> Option<(Tx, usize)> {
        chain
            .iter()
            .enumerate()
            .find_map(|(i, (tx, _))| tx.map(|tx| (tx, i + 1)))
    }

    /// What one read of the chain shows.
    fn view(chain: &[(Option<Tx>, u8)], read: Read) -> EvmView {
        let chain = match read {
            Read::Behind => &chain[..chain.len().saturating_sub(1)],
            _ => chain,
        };
        let head = BlockRef {
            number: chain.len() as u64,
            hash: block_hash(chain.len(), chain.last().map_or(0, |b| b.1)),
        };
        let landed = Self::landed(chain);
        let top = head.clone();
        EvmView {
            endpoint: ENDPOINT.into(),
            head,
            account_nonce: Some(u64::from(landed.is_some())),
            // The model has no fee market: no attempt is priced out.
            base_fee: None,
            landed: match (landed, read) {
                (None, _) | (Some(_), Read::NothingFound) => None,
                (Some((tx, number)), _) => {
                    let hash = block_hash(number, chain[number - 1].1);
                    Some(EvmLanded {
                        tx: tx.hash(),
                        block: BlockRef {
                            number: number as u64,
                            hash: hash.clone(),
                        },
                        canonical_hash: Some(hash),
                        success: (read != Read::NoReceipt).then_some(true),
                        // One chain answers every read: the head descends from the block.
                        descendant: Some(top),
                    })
                }
            },
        }
    }

    /// Every step from `state`, with the state it leads to.
    fn next(&self, state: &State) -> Vec<(Step, State)> {
        let mut out = Vec::new();
        let op = decode(&state.record);
        let now = Self::now(state);
        let nonce_used = Self::landed(&state.chain).is_some();
        if state.ticks < self.bounds.ticks {
            let mut s = state.clone();
            s.ticks += 1;
            out.push((Step::Tick, s));
        }
        if state.chain.len() < self.bounds.blocks {
            let mut choices: Vec<Option<Tx>> = vec![None];
            if !nonce_used {
                choices.extend(state.pool.iter().copied().map(Some));
            }
            for tx in choices {
                let mut s = state.clone();
                s.chain.push((tx, 0));
                if tx.is_some() {
                    s.pool.clear();
                }
                out.push((Step::Mine(tx), s));
            }
        }
        if state.reorgs < self.bounds.reorgs && !state.chain.is_empty() {
            let (removed, _) = state.chain[state.chain.len() - 1];
            let earlier_used = Self::landed(&state.chain[..state.chain.len() - 1]).is_some();
            let mut candidates: Vec<Tx> = state.pool.clone();
            candidates.extend(removed);
            let mut choices: Vec<Option<Tx>> = vec![None];
            if !earlier_used {
                choices.extend(candidates.iter().copied().map(Some));
            }
            for tx in choices {
                // The removed transaction goes back to the pool, or the node drops it.
                for back in [true, false] {
                    let mut s = state.clone();
                    s.reorgs += 1;
                    s.chain.pop();
                    if let (Some(r), true) = (removed, back)
                        && !s.pool.contains(&r)
                    {
                        s.pool.push(r);
                    }
                    if tx.is_some() {
                        s.pool.clear();
                    }
                    s.chain.push((tx, s.reorgs));
                    out.push((Step::Reorg(tx, back), s));
                    if removed.is_none() {
                        break;
                    }
                }
            }
        }
        for (i, tx) in state.pool.iter().enumerate().filter(|_| self.bounds.evict) {
            let mut s = state.clone();
            s.pool.remove(i);
            out.push((Step::Evict(*tx), s));
        }
        if self.bounds.foreign && !state.foreign_sent && !nonce_used {
            let mut s = state.clone();
            s.foreign_sent = true;
            s.pool.push(Tx::Foreign);
            out.push((Step::ForeignSend, s));
        }
        if self.bounds.cancel && !state.cancel_asked && !is_terminal(&op) {
            let mut s = state.clone();
            s.cancel_asked = true;
            let mut changed = op.clone();
            changed.cancel_requested = true;
            changed.revision += 1;
            s.record = changed.encode_to_vec();
            out.push((Step::AskCancel, s));
        }
        for r in 0..self.bounds.replicas {
            self.replica_steps(state, &op, now, r, &mut out);
        }
        // A pool is a set: one state whatever the order its transactions came in.
        for (_, s) in &mut out {
            s.pool.sort();
            s.pool.dedup();
        }
        out
    }

    fn replica_steps(
        &self,
        state: &State,
        op: &pb::Operation,
        now: SystemTime,
        r: usize,
        out: &mut Vec<(Step, State)>,
    ) {
        let with = |phase: Phase, record: Option<pb::Operation>| {
            let mut s = state.clone();
            s.replicas[r] = phase;
            if let Some(record) = record {
                s.record = record.encode_to_vec();
            }
            s
        };
        if state.replicas[r] != Phase::Idle {
            out.push((Step::Crash(r), with(Phase::Idle, None)));
        }
        match &state.replicas[r] {
            Phase::Idle => {
                if !is_terminal(op) {
                    out.push((
                        Step::Snapshot(r),
                        with(Phase::Read(state.record.clone()), None),
                    ));
                }
            }
            Phase::Read(snapshot) => {
                let snap = decode(snapshot);
                let reads: &[Read] = if Self::landed(&state.chain).is_some() {
                    &[
                        Read::Full,
                        Read::NoReceipt,
                        Read::NothingFound,
                        Read::Behind,
                    ]
                } else if state.chain.is_empty() {
                    &[Read::Full]
                } else {
                    &[Read::Full, Read::Behind]
                };
                for read in reads {
                    let view = Self::view(&state.chain, *read);
                    let action = decide(&snap, &Evidence::Evm(vec![view]), now, &self.rules);
                    let action = self.tampered(&snap, action);
                    let label = format!("{read:?} → {action:?}");
                    let phase = match action {
                        Action::Send(n) => Phase::Decided(snapshot.clone(), Decided::Send(n)),
                        Action::Replace(replacement) => {
                            Phase::Decided(snapshot.clone(), Decided::Replace(replacement))
                        }
                        Action::Settle(s) => Phase::Decided(
                            snapshot.clone(),
                            Decided::Settle(
                                s.state,
                                s.result.map(|m| m.encode_to_vec()).unwrap_or_default(),
                                s.error.map(|m| m.encode_to_vec()).unwrap_or_default(),
                                s.evidence.map(|m| m.encode_to_vec()).unwrap_or_default(),
                            ),
                        ),
                        _ => Phase::Idle,
                    };
                    out.push((Step::Decide(r, label), with(phase, None)));
                }
            }
            Phase::Decided(snapshot, decided) => {
                let snap = decode(snapshot);
                // The worker's guard: a decided change applies to the record it was decided on.
                let guard_holds = match self.tamper {
                    Tamper::IgnoreRevision => !is_terminal(op),
                    _ => op.revision == snap.revision,
                };
                let mut changed = op.clone();
                changed.revision += 1;
                let (phase, record) = match decided {
                    Decided::Send(n) if guard_holds => {
                        record::record_sending(&mut changed, *n, now);
                        (Phase::Sending(*n), Some(changed))
                    }
                    Decided::Settle(to, result, error, evidence) if guard_holds => {
                        let settlement = Settlement {
                            state: *to,
                            result: (!result.is_empty())
                                .then(|| pb::TerminalResult::decode(&result[..]).expect("encoded")),
                            error: (!error.is_empty())
                                .then(|| pb::OperationError::decode(&error[..]).expect("encoded")),
                            evidence: (!evidence.is_empty())
                                .then(|| pb::Evidence::decode(&evidence[..]).expect("encoded")),
                        };
                        record::settle(&mut changed, &settlement);
                        (Phase::Idle, Some(changed))
                    }
                    Decided::Replace(replacement) => {
                        let newest = snap.attempts.last().map_or(0, |a| a.number);
                        match sign_replacement(op, *replacement, newest) {
                            // The signer appended it; the broadcaster records it being sent
                            // (a fact: guarded only against a terminal record).
                            // Not sent if a cancel came since the decision, unless it is
                            // the cancel itself.
                            Some(mut signed) => {
                                let n = signed.attempts.last().map_or(0, |a| a.number);
                                if record::record_sending_new(&mut signed, n, now) {
                                    signed.revision = op.revision + 2;
                                    (Phase::Sending(n), Some(signed))
                                } else {
                                    signed.revision = op.revision + 1;
                                    (Phase::Idle, Some(signed))
                                }
                            }
                            None => (Phase::Idle, None),
                        }
                    }
                    _ => (Phase::Idle, None),
                };
                out.push((Step::Apply(r), with(phase, record)));
            }
            Phase::Sending(n) => {
                let tx = Tx::Attempt(*n);
                if Self::landed(&state.chain).is_some() {
                    out.push((
                        Step::Send(r, Answer::NonceTooLow),
                        with(Phase::Answered(*n, Answer::NonceTooLow), None),
                    ));
                    out.push((
                        Step::Send(r, Answer::Unknown),
                        with(Phase::Answered(*n, Answer::Unknown), None),
                    ));
                } else {
                    // Lost before the node, or refused by it.
                    for answer in [Answer::Unknown, Answer::Refused] {
                        out.push((
                            Step::Send(r, answer),
                            with(Phase::Answered(*n, answer), None),
                        ));
                    }
                    for answer in [Answer::Unknown, Answer::Accepted] {
                        let mut s = with(Phase::Answered(*n, answer), None);
                        s.delivered = true;
                        if !s.pool.contains(&tx) {
                            s.pool.push(tx);
                        }
                        out.push((Step::Send(r, answer), s));
                    }
                }
            }
            Phase::Answered(n, answer) => {
                let outcome = match answer {
                    Answer::Accepted => SendOutcome::Accepted,
                    Answer::Unknown => SendOutcome::Unknown,
                    // As the product classifies these answers (`sigcast_evm::send_outcome`).
                    Answer::NonceTooLow => SendOutcome::Unknown,
                    Answer::Refused => SendOutcome::Refused {
                        underpriced: false,
                        message: "insufficient funds for gas * price + value".into(),
                    },
                };
                let record = (!is_terminal(op)).then(|| {
                    let mut changed = op.clone();
                    record::record_outcome(&mut changed, *n, ENDPOINT, &outcome, now);
                    changed.revision += 1;
                    changed
                });
                out.push((Step::Record(r), with(Phase::Idle, record)));
            }
        }
    }

    /// The decisions the model must catch when broken on purpose.
    fn tampered(&self, op: &pb::Operation, action: Action) -> Action {
        match (self.tamper, &action) {
            (
                Tamper::NullReceiptRejects,
                Action::ReadMore(sigcast_protocol::Why::NonceUsedUnidentified),
            ) => Action::Settle(Settlement {
                state: OperationState::Rejected,
                result: None,
                error: Some(pb::OperationError {
                    reason: record::reasons::NONCE_CONSUMED_EXTERNALLY.into(),
                    message: format!("{}: nonce past ours, no receipt", op.op_id),
                }),
                evidence: None,
            }),
            _ => action,
        }
    }

    /// The invariants, in one state.
    fn violation(&self, s: &State) -> Option<String> {
        let op = decode(&s.record);
        let landed = Self::landed(&s.chain);
        let ours_landed = match landed {
            Some((Tx::Attempt(n), _)) => op
                .attempts
                .iter()
                .find(|a| a.number == n)
                .map(|a| !record::reason_of(a).takes_the_nonce_instead()),
            _ => None,
        };
        let landed_reason = match landed {
            Some((Tx::Attempt(n), _)) => op
                .attempts
                .iter()
                .find(|a| a.number == n)
                .map(record::reason_of),
            _ => None,
        };
        match op.state() {
            pb::OperationState::Confirmed => {
                let result = op.result.as_ref()?;
                let canonical = landed.is_some_and(|(tx, number)| {
                    ours_landed == Some(true)
                        && tx.hash() == result.tx_id
                        && number as u64 == result.block_number
                        && block_hash(number, s.chain[number - 1].1) == result.block_hash
                });
                (!canonical).then(|| {
                    format!(
                        "CONFIRMED names {} in block {}, not what the canonical chain holds: {:?}",
                        result.tx_id, result.block_number, s.chain
                    )
                })
            }
            // The nonce is taken by another sender or by a self-transfer of the operation (its
            // cancel, or the gap fill after every send was refused) - or, cancelled while
            // SIGNED, nothing of it ever reached the node.
            state @ (pb::OperationState::Rejected | pb::OperationState::Cancelled) => {
                let cancelled = state == pb::OperationState::Cancelled;
                let holds = match (landed, landed_reason) {
                    // Another sender took the nonce: REJECTED.
                    (Some((Tx::Foreign, _)), _) => !cancelled,
                    // Its cancel took it: CANCELLED; its gap fill: REJECTED (never applied).
                    (Some(_), Some(AttemptReason::Cancel)) => cancelled,
                    (Some(_), Some(AttemptReason::GapFill)) => !cancelled,
                    (Some(_), _) => false,
                    // Cancelled while SIGNED: nothing of it ever reached the node.
                    (None, _) => cancelled && !s.delivered,
                };
                (!holds).then(|| {
                    format!(
                        "{} while the nonce holds {landed:?} (ours with effect: {ours_landed:?}; delivered: {})",
                        if state == pb::OperationState::Rejected {
                            "REJECTED"
                        } else {
                            "CANCELLED"
                        },
                        s.delivered
                    )
                })
            }
            _ => None,
        }
    }

    /// Visits every reachable state (at most `limit`), breadth first.
    pub fn check(&self, limit: usize) -> Outcome {
        let initial = self.initial();
        // Each state's predecessor and the step from it: the path to a counterexample.
        let mut seen: HashMap<State, Option<(State, Step)>> = HashMap::new();
        seen.insert(initial.clone(), None);
        let mut queue = VecDeque::from([initial]);
        while let Some(state) = queue.pop_front() {
            if let Some(violation) = self.violation(&state) {
                return Outcome {
                    states: seen.len(),
                    counterexample: Some((violation, path(&seen, &state))),
                };
            }
            if seen.len() >= limit {
                continue;
            }
            for (step, next) in self.next(&state) {
                if !seen.contains_key(&next) {
                    seen.insert(next.clone(), Some((state.clone(), step)));
                    queue.push_back(next);
                }
            }
        }
        Outcome {
            states: seen.len(),
            counterexample: None,
        }
    }
}

fn is_terminal(op: &pb::Operation) -> bool {
    matches!(
        op.state(),
        pb::OperationState::Confirmed
            | pb::OperationState::Rejected
            | pb::OperationState::Cancelled
    )
}

/// The signer's replacement, as `sign_replacement_evm` decides it against the stored record:
/// only over the newest attempt the broadcaster saw, never a second self-transfer, never for a
/// record past SENT, no fee bump once a cancel was asked for. `None` when nothing new is
/// signed. The model has no fees: the refusal of a replacement priced before a later attempt
/// was sent is not in it.
fn sign_replacement(
    op: &pb::Operation,
    replacement: Replacement,
    replaces: u32,
) -> Option<pb::Operation> {
    if !matches!(
        op.state(),
        pb::OperationState::Signed | pb::OperationState::Sent
    ) || record::has_self_transfer(op)
        || (replacement == Replacement::FeeBump && op.cancel_requested)
    {
        return None;
    }
    let newest = op.attempts.last()?.number;
    if newest != replaces {
        return None;
    }
    let mut signed = op.clone();
    signed.attempts.push(pb::Attempt {
        number: newest + 1,
        tx_id: Tx::Attempt(newest + 1).hash(),
        reason: replacement.reason().as_str().into(),
        ..Default::default()
    });
    Some(signed)
}

fn path(seen: &HashMap<State, Option<(State, Step)>>, last: &State) -> Vec<String> {
    let mut steps = Vec::new();
    let mut at = last.clone();
    while let Some(Some((previous, step))) = seen.get(&at) {
        steps.push(format!("{step:?}"));
        at = previous.clone();
    }
    steps.reverse();
    steps.push(format!("final: {:?}", decode(&last.record)));
    steps
}
