//! The endpoint pool's reads as the product makes them (in seeds with `Settings::hedged_reads`).
//! Each signer or broadcaster process ranks the endpoints by what its own requests saw
//! (`sigcast_jsonrpc::hedge::Ranking`, every request recorded through [`RankedEndpoint`]). A
//! signer reads fees, and at depth 1 an account's count, hedged across them
//! (`sigcast_jsonrpc::hedge::HedgedRead`, driven here with simulated endpoints and time as the
//! pool drives it with real ones: [`read`]), and deeper counts from the ranked endpoints one at
//! a time; a broadcaster reads each check's evidence from them in that order ([`order`]). And
//! the guarantee hedged reads keep (DESIGN G6, "slow endpoints are demoted"): a process does not
//! keep starting its reads at an endpoint that keeps losing them to another's answer.

use crate::exec::{now_ms, take_time};
use crate::node::{HEALTHY_MS, SimEndpoint};
use crate::world::{Tamper, World};
use serde_json::Value;
use sigcast_jsonrpc::hedge::{AfterFailure, HedgedRead, Ranking, answered};
use sigcast_jsonrpc::{Endpoint, RpcError};
use std::sync::Mutex;
use std::time::Duration;

/// Reads in a row that one process may start at an endpoint and lose, each, to the answer of
/// an endpoint it had measured before the read and only ever seen answer, within
/// [`HEALTHY_MS`] (a healthy simulated endpoint: its average is within that, and never having
/// failed, it is not demoted). The first endpoint ranked no slower, so its average was within
/// that too; the read it lost kept its request waiting the smallest hedge delay (20 ms) at
/// least, which takes its average to 4 ms and more; a second loss, over 7 ms: behind every
/// such endpoint. Its average falls meanwhile only by its own answers, which end the count. A
/// third such read in a row is an endpoint whose lost requests do not count.
pub(crate) const OUTRUN_IN_A_ROW: u32 = 3;

/// One process's reads of the endpoints: its ranking of them, which of them it has seen only
/// healthy, and how its last hedged reads went.
#[derive(Debug)]
pub(crate) struct ProcessReads {
    ranking: Ranking,
    /// Of each endpoint asked: whether every request of it was answered within
    /// [`HEALTHY_MS`] (or dropped unanswered before, when another's answer settled a read).
    healthy: Vec<Option<bool>>,
    /// The endpoint the last hedged reads started at, and how many of them in a row it lost
    /// to the answer of an endpoint seen only answering, within [`HEALTHY_MS`], since it last
    /// answered.
    outrun: Option<(usize, u32)>,
}

impl ProcessReads {
    /// A process's reads at its start: nothing measured.
    pub(crate) fn new(endpoints: usize) -> Self {
        Self {
            ranking: Ranking::new(endpoints),
            healthy: vec![None; endpoints],
            outrun: None,
        }
    }

    /// A request of `endpoint` ended after `elapsed`, answered or not: recorded as the pool
    /// records it.
    fn record(&mut self, endpoint: usize, elapsed: Duration, answered: bool) {
        self.ranking.record(endpoint, elapsed, answered, now());
        if answered && self.outrun.is_some_and(|(counted, _)| counted == endpoint) {
            // Its average may be back under the others': losing again is no defect.
            self.outrun = None;
        }
        self.saw(
            endpoint,
            answered && elapsed <= Duration::from_millis(HEALTHY_MS),
        );
    }

    fn saw(&mut self, endpoint: usize, healthy: bool) {
        let seen = &mut self.healthy[endpoint];
        *seen = Some(seen.unwrap_or(true) && healthy);
    }

    /// A read that started at `first` was settled by `winner`'s answer, with `first`'s still
    /// owed (`outrun`) or not; `healthy_winner`: the winner was measured before the read and
    /// only ever seen answering within [`HEALTHY_MS`], this answer included.
    /// [`OUTRUN_IN_A_ROW`] such reads in a row break G6.
    fn note(
        &mut self,
        world: &World,
        process: &str,
        (first, winner): (usize, usize),
        outrun: bool,
        healthy_winner: bool,
    ) {
        if !(outrun && healthy_winner) {
            self.outrun = None;
            return;
        }
        let in_a_row = match self.outrun {
            Some((endpoint, n)) if endpoint == first => n + 1,
            _ => 1,
        };
        self.outrun = Some((first, in_a_row));
        if in_a_row == OUTRUN_IN_A_ROW {
            world.violation(format!(
                "G6: {process} started {in_a_row} reads in a row at {}, each settled first by \
                 an endpoint seen only answering, within {HEALTHY_MS} ms (the last by {}): a \
                 slow endpoint is not demoted",
                world.endpoints[first].label(),
                world.endpoints[winner].label(),
            ));
        }
    }
}

fn now() -> Duration {
    Duration::from_millis(now_ms())
}

/// A request of `world`'s endpoint `index`, recorded in `reads`' ranking as the pool records
/// each of its requests.
pub(crate) struct RankedEndpoint<'a> {
    endpoint: &'a SimEndpoint,
    index: usize,
    reads: &'a Mutex<ProcessReads>,
}

impl Endpoint for RankedEndpoint<'_> {
    fn label(&self) -> &str {
        self.endpoint.label()
    }

    async fn request(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        let asked = now();
        let result = self.endpoint.request(method, params).await;
        self.reads
            .lock()
            .unwrap()
            .record(self.index, now() - asked, answered(&result));
        result
    }
}

impl<'a> RankedEndpoint<'a> {
    /// `world`'s endpoint `index`, its requests recorded in `reads`.
    pub(crate) fn new(world: &'a World, index: usize, reads: &'a Mutex<ProcessReads>) -> Self {
        Self {
            endpoint: &world.endpoints[index],
            index,
            reads,
        }
    }
}

/// The endpoints' indexes as the process ranks them now, best first.
pub(crate) fn order(reads: &Mutex<ProcessReads>) -> Vec<usize> {
    reads.lock().unwrap().ranking.ranked(now())
}

/// The endpoints as the process ranks them now, best first.
pub(crate) fn ranked<'a>(
    world: &'a World,
    reads: &'a Mutex<ProcessReads>,
) -> Vec<RankedEndpoint<'a>> {
    order(reads)
        .into_iter()
        .map(|index| RankedEndpoint::new(world, index, reads))
        .collect()
}

/// A request asked of an endpoint, until it answers.
struct Owed {
    endpoint: usize,
    asked: Duration,
    answers_at: u64,
}

/// A hedged read of `method` by process `process`, its answer taken by `parse` (one it
/// refuses counts against its endpoint, as no answer does): the first endpoint's answer, and
/// the next endpoint asked whenever the last one asked has had its hedge delay, or failed.
pub(crate) async fn read<T>(
    world: &World,
    process: &str,
    reads: &Mutex<ProcessReads>,
    method: &str,
    params: Value,
    parse: impl Fn(Value) -> Option<T>,
) -> Result<T, String> {
    let ask = |endpoint: usize| Owed {
        endpoint,
        asked: now(),
        answers_at: now_ms() + world.endpoints[endpoint].answer_delay(),
    };
    let started = now();
    let (mut read, first, healthy_at_start) = {
        let seen = reads.lock().unwrap();
        let (read, first) = HedgedRead::start(&seen.ranking, started);
        (read, first, seen.healthy.clone())
    };
    let mut owed = vec![ask(first)];
    let mut errors = Vec::new();
    loop {
        // In whole simulated milliseconds, never before the rule's time.
        let hedge_at = read
            .hedge_at(&reads.lock().unwrap().ranking)
            .map(|at| at.as_nanos().div_ceil(1_000_000) as u64);
        let next = (0..owed.len()).min_by_key(|&i| owed[i].answers_at);
        // An answer due at the hedge's moment is taken first (the pool's `select!` takes
        // either).
        if let Some(at) = hedge_at.filter(|&at| next.is_none_or(|i| at < owed[i].answers_at)) {
            take_time(at.saturating_sub(now_ms())).await;
            if let Some(endpoint) = read.hedge(now()) {
                owed.push(ask(endpoint));
            }
            continue;
        }
        let i = next.expect("a read with no hedge left owes an answer");
        take_time(owed[i].answers_at.saturating_sub(now_ms())).await;
        let Owed {
            endpoint, asked, ..
        } = owed.remove(i);
        let label = world.endpoints[endpoint].label();
        let result = world.endpoints[endpoint]
            .answer(method, &params)
            .and_then(|value| {
                parse(value.clone()).ok_or_else(|| RpcError::Malformed {
                    endpoint: label.to_owned(),
                    message: format!("{method} answered {value}"),
                })
            });
        let mut seen = reads.lock().unwrap();
        seen.record(endpoint, now() - asked, answered(&result));
        match result {
            Ok(value) => {
                let first_outrun = owed.iter().any(|o| o.endpoint == first);
                if first_outrun {
                    world.trace(format!(
                        "{process}: {method} asked of {} first, answered by {label} {} ms in",
                        world.endpoints[first].label(),
                        (now() - started).as_millis(),
                    ));
                }
                match world.settings.tamper {
                    // The defect: requests dropped unanswered are not counted.
                    Tamper::AbandonedUnrecorded => {
                        read.won(endpoint, now(), &mut seen.ranking.clone());
                    }
                    _ => {
                        read.won(endpoint, now(), &mut seen.ranking);
                    }
                }
                for dropped in &owed {
                    let waited = now() - dropped.asked;
                    seen.saw(
                        dropped.endpoint,
                        waited <= Duration::from_millis(HEALTHY_MS),
                    );
                }
                // Measured when the read began (so ranked by it), and healthy since.
                let healthy_winner = healthy_at_start[endpoint] == Some(true)
                    && seen.healthy[endpoint] == Some(true);
                seen.note(
                    world,
                    process,
                    (first, endpoint),
                    first_outrun,
                    healthy_winner,
                );
                return Ok(value);
            }
            Err(error) => {
                errors.push(error.to_string());
                match read.failed(endpoint, now()) {
                    AfterFailure::Ask(next) => owed.push(ask(next)),
                    AfterFailure::Wait => {}
                    AfterFailure::Failed => {
                        seen.outrun = None;
                        return Err(format!(
                            "{method}: every endpoint failed: {}",
                            errors.join("; ")
                        ));
                    }
                }
            }
        }
    }
}
