//! The rules of hedged reads as plain state: which endpoint a read asks first, when it asks the
//! next, and what each answer — or each request dropped unanswered — says of an endpoint. No
//! clock is read and no request made here: the pool drives these with real requests and
//! timers, the simulation with simulated ones, so both run the same rules.
//!
//! Times are durations since an origin the driver picks (the pool's creation, the start of a
//! simulated run).

use crate::RpcError;
use std::time::Duration;

/// Consecutive failures after which an endpoint is demoted.
const DEMOTE_AFTER: u32 = 3;
/// How long a demoted endpoint stays at the back of the line.
const DEMOTION: Duration = Duration::from_secs(10);
/// Hedge delay bounds.
const MIN_HEDGE: Duration = Duration::from_millis(20);
const MAX_HEDGE: Duration = Duration::from_millis(1_000);
/// Hedge delay (and rank) of an endpoint with no latency measured yet.
const FIRST_HEDGE: Duration = Duration::from_millis(150);
/// Blocks an endpoint's head may be behind the highest of its chain's before it is ranked
/// after every endpoint that is not: nodes a block or two apart are normal.
const BEHIND_BLOCKS: u64 = 4;

#[derive(Debug, Clone, Default)]
struct Health {
    latency_ewma: Option<Duration>,
    consecutive_failures: u32,
    demoted_until: Option<Duration>,
    /// Its head, last read, was more than [`BEHIND_BLOCKS`] behind the highest.
    behind: bool,
}

impl Health {
    fn add_latency(&mut self, elapsed: Duration) {
        self.latency_ewma = Some(match self.latency_ewma {
            Some(avg) => (avg * 4 + elapsed) / 5,
            None => elapsed,
        });
    }
}

/// What is known of each endpoint of one chain (by index, in configuration order): how fast
/// it answers lately, and whether it is demoted for failing.
#[derive(Debug, Clone)]
pub struct Ranking {
    health: Vec<Health>,
}

impl Ranking {
    /// `endpoints` endpoints, none measured yet.
    pub fn new(endpoints: usize) -> Self {
        Self {
            health: vec![Health::default(); endpoints],
        }
    }

    /// Every endpoint's index, best first: healthy before demoted, current before behind,
    /// then faster first (an endpoint not measured yet counts as [`FIRST_HEDGE`]), ties in
    /// configuration order.
    pub fn ranked(&self, now: Duration) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.health.len()).collect();
        order.sort_by_key(|&i| {
            let h = &self.health[i];
            (
                h.demoted_until.is_some_and(|until| until > now),
                h.behind,
                h.latency_ewma.unwrap_or(FIRST_HEDGE),
            )
        });
        order
    }

    /// Each endpoint's head as just read (by index; `None`: it did not answer, which its
    /// failures count). One far behind the highest goes after the others: a node that froze
    /// still answers fast, and a pass that read it first would wait on its old chain (a
    /// landing never deep enough, a nonce never used) while the others show the outcome.
    pub fn record_heads(&mut self, heads: &[Option<u64>]) {
        let Some(highest) = heads.iter().flatten().max().copied() else {
            return;
        };
        for (health, head) in self.health.iter_mut().zip(heads) {
            if let Some(head) = head {
                health.behind = highest - head > BEHIND_BLOCKS;
            }
        }
    }

    /// A request to `endpoint` ended after `elapsed`: `answered` (a result, or a node's own
    /// error) or not (no answer, or one that is not what was asked).
    pub fn record(&mut self, endpoint: usize, elapsed: Duration, answered: bool, now: Duration) {
        let h = &mut self.health[endpoint];
        if answered {
            h.consecutive_failures = 0;
            h.demoted_until = None;
            h.add_latency(elapsed);
        } else {
            h.consecutive_failures += 1;
            if h.consecutive_failures >= DEMOTE_AFTER {
                h.demoted_until = Some(now + DEMOTION);
            }
        }
    }

    /// A request to `endpoint` still outstanding after `elapsed` when another endpoint settled
    /// the read: the endpoint is at least that slow. Without this, an endpoint that turned slow
    /// would keep its old, fast average — every read would start there and wait for the hedge
    /// — because its slow answers are never seen.
    fn record_abandoned(&mut self, endpoint: usize, elapsed: Duration) {
        let h = &mut self.health[endpoint];
        if h.latency_ewma.is_none_or(|avg| elapsed > avg) {
            h.add_latency(elapsed);
        }
    }

    /// How long a read waits for `endpoint` before asking the next one as well: twice its
    /// average, within bounds.
    pub fn hedge_delay(&self, endpoint: usize) -> Duration {
        self.health[endpoint]
            .latency_ewma
            .map_or(FIRST_HEDGE, |avg| (avg * 2).clamp(MIN_HEDGE, MAX_HEDGE))
    }
}

/// Whether a request's result says its endpoint answered: a result, or the node's own error
/// (the node is up and speaking JSON-RPC). No answer, or one that is not what was asked,
/// counts against the endpoint.
pub fn answered<T>(result: &Result<T, RpcError>) -> bool {
    matches!(result, Ok(_) | Err(RpcError::Node { .. }))
}

/// One hedged read in progress: the endpoints in the order it asks them, and of those asked,
/// when, whether as a hedge, and whether the answer is still owed.
#[derive(Debug)]
pub struct HedgedRead {
    order: Vec<usize>,
    asked: Vec<Asked>,
}

#[derive(Debug)]
struct Asked {
    at: Duration,
    hedge: bool,
    owed: bool,
}

/// What a read does after a request failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterFailure {
    /// Ask this endpoint now.
    Ask(usize),
    /// Wait for an answer still owed.
    Wait,
    /// Every endpoint was asked and none answered: the read failed.
    Failed,
}

impl HedgedRead {
    /// A read that starts now, in `ranking`'s order; answers the endpoint to ask first.
    ///
    /// # Panics
    /// If `ranking` has no endpoint (a pool is never made without one).
    pub fn start(ranking: &Ranking, now: Duration) -> (Self, usize) {
        let mut read = Self {
            order: ranking.ranked(now),
            asked: Vec::new(),
        };
        let first = read.ask(now, false).expect("a pool has an endpoint");
        (read, first)
    }

    fn ask(&mut self, now: Duration, hedge: bool) -> Option<usize> {
        let endpoint = *self.order.get(self.asked.len())?;
        self.asked.push(Asked {
            at: now,
            hedge,
            owed: true,
        });
        Some(endpoint)
    }

    fn position(&self, endpoint: usize) -> usize {
        self.order
            .iter()
            .position(|&e| e == endpoint)
            .expect("an endpoint of this read")
    }

    /// When the next endpoint is asked if no answer comes first: once the last one asked has
    /// had its hedge delay. `None` once every endpoint was asked.
    pub fn hedge_at(&self, ranking: &Ranking) -> Option<Duration> {
        if self.asked.len() == self.order.len() {
            return None;
        }
        let last = self.asked.last()?;
        Some(last.at + ranking.hedge_delay(self.order[self.asked.len() - 1]))
    }

    /// The hedge delay passed with no answer: the endpoint to ask now, if one is left.
    pub fn hedge(&mut self, now: Duration) -> Option<usize> {
        self.ask(now, true)
    }

    /// `endpoint` answered and its answer is taken: the read is settled. Each request still
    /// owed an answer is dropped, and counts against its endpoint for the time it has taken.
    /// Answers whether the winner was asked as a hedge.
    pub fn won(&mut self, endpoint: usize, now: Duration, ranking: &mut Ranking) -> bool {
        let winner = self.position(endpoint);
        self.asked[winner].owed = false;
        for (n, asked) in self.asked.iter_mut().enumerate() {
            if asked.owed {
                asked.owed = false;
                ranking.record_abandoned(self.order[n], now.saturating_sub(asked.at));
            }
        }
        self.asked[winner].hedge
    }

    /// `endpoint` failed (no answer, or one not taken): ask the next endpoint if one is left,
    /// else wait for those still owing, else the read failed.
    pub fn failed(&mut self, endpoint: usize, now: Duration) -> AfterFailure {
        let n = self.position(endpoint);
        self.asked[n].owed = false;
        match self.ask(now, false) {
            Some(next) => AfterFailure::Ask(next),
            None if self.asked.iter().any(|a| a.owed) => AfterFailure::Wait,
            None => AfterFailure::Failed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn an_endpoint_far_behind_is_read_after_the_others_until_it_catches_up() {
        // The fastest endpoint froze: it still answers at once, from an old chain.
        let mut ranking = Ranking::new(2);
        let now = Duration::from_secs(1);
        ranking.record(0, Duration::from_millis(5), true, now);
        ranking.record(1, Duration::from_millis(50), true, now);
        assert_eq!(ranking.ranked(now), [0, 1]);
        ranking.record_heads(&[Some(100), Some(101)]);
        assert_eq!(ranking.ranked(now), [0, 1], "a block apart is normal");
        ranking.record_heads(&[Some(100), Some(100 + BEHIND_BLOCKS + 1)]);
        assert_eq!(ranking.ranked(now), [1, 0]);
        ranking.record_heads(&[None, Some(200)]);
        assert_eq!(ranking.ranked(now), [1, 0], "no head read: as it was");
        ranking.record_heads(&[Some(200), None]);
        assert_eq!(ranking.ranked(now), [0, 1], "caught up");
        ranking.record_heads(&[None, None]);
        assert_eq!(ranking.ranked(now), [0, 1]);
    }

    #[test]
    fn unmeasured_endpoints_rank_in_configuration_order_and_measured_ones_by_latency() {
        let mut ranking = Ranking::new(3);
        assert_eq!(ranking.ranked(ms(0)), [0, 1, 2]);
        ranking.record(2, ms(5), true, ms(0));
        ranking.record(0, ms(200), true, ms(0));
        assert_eq!(
            ranking.ranked(ms(0)),
            [2, 1, 0],
            "150 ms unmeasured between 5 and 200"
        );
    }

    #[test]
    fn three_failures_in_a_row_demote_for_ten_seconds_and_an_answer_lifts_it() {
        let mut ranking = Ranking::new(2);
        ranking.record(0, ms(10), true, ms(0));
        ranking.record(1, ms(50), true, ms(0));
        for _ in 0..2 {
            ranking.record(0, ms(1), false, ms(100));
        }
        assert_eq!(ranking.ranked(ms(100))[0], 0, "two failures do not demote");
        ranking.record(0, ms(1), false, ms(100));
        assert_eq!(ranking.ranked(ms(100))[0], 1);
        assert_eq!(ranking.ranked(ms(10_099))[0], 1);
        assert_eq!(ranking.ranked(ms(10_100))[0], 0, "the demotion ends");
        ranking.record(0, ms(1), false, ms(10_200));
        assert_eq!(
            ranking.ranked(ms(10_200))[0],
            1,
            "a fourth failure demotes again"
        );
        ranking.record(0, ms(1), true, ms(10_300));
        assert_eq!(
            ranking.ranked(ms(10_300))[0],
            0,
            "an answer lifts the demotion"
        );
    }

    #[test]
    fn the_hedge_delay_is_twice_the_average_within_bounds() {
        let mut ranking = Ranking::new(3);
        assert_eq!(ranking.hedge_delay(0), FIRST_HEDGE);
        ranking.record(0, ms(2), true, ms(0));
        ranking.record(1, ms(100), true, ms(0));
        ranking.record(2, ms(900), true, ms(0));
        assert_eq!(
            [0, 1, 2].map(|i| ranking.hedge_delay(i)),
            [MIN_HEDGE, ms(200), MAX_HEDGE]
        );
    }

    #[test]
    fn the_next_endpoint_is_asked_after_the_last_one_s_hedge_delay() {
        let mut ranking = Ranking::new(3);
        for (i, latency) in [(0, 10), (1, 30), (2, 50)] {
            ranking.record(i, ms(latency), true, ms(0));
        }
        let (mut read, first) = HedgedRead::start(&ranking, ms(1_000));
        assert_eq!(first, 0);
        assert_eq!(read.hedge_at(&ranking), Some(ms(1_020)));
        assert_eq!(read.hedge(ms(1_020)), Some(1));
        assert_eq!(
            read.hedge_at(&ranking),
            Some(ms(1_080)),
            "endpoint 1's delay"
        );
        assert_eq!(read.hedge(ms(1_080)), Some(2));
        assert_eq!(read.hedge_at(&ranking), None, "every endpoint asked");
        assert!(read.won(2, ms(1_090), &mut ranking), "won by a hedge");
    }

    #[test]
    fn a_failure_asks_the_next_at_once_and_the_read_fails_only_when_none_is_owed() {
        let ranking = Ranking::new(2);
        let (mut read, first) = HedgedRead::start(&ranking, ms(0));
        assert_eq!(read.failed(first, ms(5)), AfterFailure::Ask(1));
        assert_eq!(read.hedge_at(&ranking), None);
        assert_eq!(read.failed(1, ms(9)), AfterFailure::Failed);

        let (mut read, first) = HedgedRead::start(&ranking, ms(0));
        assert_eq!(read.hedge(ms(150)), Some(1));
        assert_eq!(read.failed(first, ms(160)), AfterFailure::Wait);
        assert_eq!(read.failed(1, ms(170)), AfterFailure::Failed);
    }

    #[test]
    fn a_request_dropped_unanswered_counts_against_its_endpoint_for_the_time_it_took() {
        let mut ranking = Ranking::new(2);
        for _ in 0..5 {
            ranking.record(0, ms(2), true, ms(0));
            ranking.record(1, ms(4), true, ms(0));
        }
        // Endpoint 0, first and fast so far, does not answer; 1 is asked after 0's hedge
        // delay and answers 4 ms later: 0 has taken 24 ms at least.
        let (mut read, first) = HedgedRead::start(&ranking, ms(0));
        assert_eq!(first, 0);
        let at = read.hedge_at(&ranking).unwrap();
        assert_eq!(read.hedge(at), Some(1));
        ranking.record(1, ms(4), true, at + ms(4));
        read.won(1, at + ms(4), &mut ranking);
        assert_eq!(
            ranking.ranked(at + ms(4))[0],
            1,
            "the endpoint outrun by a hedge still ranks first"
        );
    }

    #[test]
    fn an_abandoned_request_quicker_than_the_average_changes_nothing() {
        let mut ranking = Ranking::new(2);
        ranking.record(0, ms(300), true, ms(0));
        let (mut read, first) = HedgedRead::start(&Ranking::new(2), ms(0));
        assert_eq!(first, 0);
        read.hedge(ms(150));
        read.won(1, ms(160), &mut ranking);
        assert_eq!(
            ranking.hedge_delay(0),
            ms(600),
            "160 ms under a 300 ms average"
        );
    }
}
