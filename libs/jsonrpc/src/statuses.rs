//! Solana signature statuses asked for at once through one [`crate::PassCache`], read in one
//! request. A pass checks its operations side by side, and each view asks for the statuses of
//! its own signatures: one request per operation, where `getSignatureStatuses` takes up to 256
//! signatures in one. Each view's order of reads holds: its request joins a batch that is read
//! after it joined, and its answer comes back when that read did.

use crate::{Endpoint, RpcError};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The JSON-RPC error a node gives a request it refuses for what it names (a signature it
/// does not parse, more signatures than it takes): asked alone, the others may be answered.
/// Any other error (a rate limit, an internal one) is the batch's, not one view's.
const INVALID_PARAMS: i64 = -32602;

/// The most signatures `getSignatureStatuses` answers in one request.
pub(crate) const MOST_SIGNATURES: usize = 256;

/// The batch views join until it is read, and when the last statuses came back.
#[derive(Debug, Default)]
pub(crate) struct StatusBatches {
    open: Mutex<Option<Arc<Batch>>>,
    /// The cache's events in the order they happen (statuses answered, reads asked for and
    /// sent): a count, not a clock, so no two tie (a simulated clock of milliseconds gives
    /// many the same instant, and a bound sent "at" the instant some statuses came back
    /// may have been sent before them).
    events: AtomicU64,
    /// The event at which the last statuses came back (0: none yet).
    last_answered: AtomicU64,
}

#[derive(Debug)]
struct Batch {
    /// The signatures asked, in the order they joined.
    signatures: Mutex<Vec<Value>>,
    /// The answer to all of them, once read.
    answer: tokio::sync::watch::Sender<Option<Shared>>,
}

/// What a batch's read gave its views.
#[derive(Debug, Clone)]
enum Shared {
    /// The answer to all of them, or the failure of the read.
    Read(Result<Value, RpcError>),
    /// The node refused the request's parameters: each view asks alone, so that one
    /// signature it refuses (or a limit lower than 256) fails only its own view's read.
    EachAlone,
}

/// The statuses `params` asks for, if they are what a view asks (signatures, searching the
/// whole history) and few enough for one request: only those are read together.
pub(crate) fn batchable(params: &Value) -> Option<&Vec<Value>> {
    let signatures = params.get(0)?.as_array()?;
    let whole_history = params.get(1) == Some(&json!({ "searchTransactionHistory": true }));
    let only_those = params.as_array().is_some_and(|p| p.len() == 2);
    (whole_history
        && only_those
        && !signatures.is_empty()
        && signatures.len() <= MOST_SIGNATURES
        && signatures.iter().all(Value::is_string))
    .then_some(signatures)
}

impl StatusBatches {
    /// The next event of the cache.
    pub(crate) fn event(&self) -> u64 {
        self.events.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// The event at which the last statuses read through this cache came back (when its
    /// answer arrived, the same for every view of a batch), if any did.
    pub(crate) fn last_answered(&self) -> Option<u64> {
        Some(self.last_answered.load(Ordering::SeqCst)).filter(|&event| event > 0)
    }

    /// Notes that statuses came back now (never moving the event noted back).
    pub(crate) fn answered(&self) {
        let now = self.event();
        self.last_answered.fetch_max(now, Ordering::SeqCst);
    }

    /// The statuses of `signatures`, read from `endpoint` together with those of every view
    /// that asks while the batch is open; answered as the node would answer them alone.
    pub(crate) async fn read(
        &self,
        endpoint: &impl Endpoint,
        signatures: &[Value],
    ) -> Result<Value, RpcError> {
        let (batch, offset, leads) = self.join(signatures);
        let answer = if leads {
            // Answers the batch whatever becomes of this future: dropped while it waits or
            // reads, its batch is answered with a failure, not left to hang.
            let mut lead = Lead {
                batches: self,
                batch: &batch,
                label: endpoint.label(),
                answered: false,
            };
            // Open while the other views of the pass that are ready to run are polled: they
            // ask in the same round (a timer of even 2 ms made every wave of checks wait for
            // it, and sends waited for the pass).
            tokio::task::yield_now().await;
            self.close(&batch);
            let asked =
                std::mem::take(&mut *batch.signatures.lock().unwrap_or_else(|p| p.into_inner()));
            let count = asked.len();
            let answer = ask(endpoint, &asked)
                .await
                .and_then(|value| whole(endpoint, value, count));
            // Before any view of the batch hears of it: what bounds its history must be read
            // after this.
            self.answered();
            let shared = match answer {
                Err(RpcError::Node {
                    code: INVALID_PARAMS,
                    ..
                }) if count > signatures.len() => Shared::EachAlone,
                answer => Shared::Read(answer),
            };
            batch.answer.send_replace(Some(shared.clone()));
            lead.answered = true;
            shared
        } else {
            let mut answered = batch.answer.subscribe();
            let read = answered.wait_for(Option::is_some).await;
            match read.as_deref() {
                Ok(Some(shared)) => shared.clone(),
                _ => Shared::Read(Err(abandoned(endpoint.label()))),
            }
        };
        match answer {
            Shared::Read(answer) => answer.map(|value| part(&value, offset, signatures.len())),
            Shared::EachAlone => {
                let alone = ask(endpoint, signatures).await;
                self.answered();
                alone
            }
        }
    }

    /// Joins the open batch if it has room, or opens one (and then leads it).
    fn join(&self, signatures: &[Value]) -> (Arc<Batch>, usize, bool) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(batch) = open.as_ref() {
            let mut asked = batch.signatures.lock().unwrap_or_else(|p| p.into_inner());
            if asked.len() + signatures.len() <= MOST_SIGNATURES {
                let offset = asked.len();
                asked.extend_from_slice(signatures);
                return (batch.clone(), offset, false);
            }
        }
        // A full batch is left to its leader, who reads it when its time is up.
        let batch = Arc::new(Batch {
            signatures: Mutex::new(signatures.to_vec()),
            answer: tokio::sync::watch::Sender::new(None),
        });
        *open = Some(batch.clone());
        (batch, 0, true)
    }

    /// No view joins `batch` from now on.
    fn close(&self, batch: &Arc<Batch>) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if open.as_ref().is_some_and(|o| Arc::ptr_eq(o, batch)) {
            *open = None;
        }
    }
}

/// Asks `endpoint` for the statuses of `signatures`, searching the whole history: the one
/// question [`batchable`] reads together.
async fn ask(endpoint: &impl Endpoint, signatures: &[Value]) -> Result<Value, RpcError> {
    endpoint
        .request(
            "getSignatureStatuses",
            json!([signatures, { "searchTransactionHistory": true }]),
        )
        .await
}

/// A batch's leader: answers it with a failure, and closes it, if dropped before it read it
/// (left open, views asking later would join a batch already answered, and fail).
struct Lead<'b> {
    batches: &'b StatusBatches,
    batch: &'b Arc<Batch>,
    /// The endpoint's label.
    label: &'b str,
    answered: bool,
}

impl Drop for Lead<'_> {
    fn drop(&mut self) {
        if !self.answered {
            self.batches.close(self.batch);
            self.batch
                .answer
                .send_replace(Some(Shared::Read(Err(abandoned(self.label)))));
        }
    }
}

/// The answer of a batch whose read was dropped before it came back.
fn abandoned(endpoint: &str) -> RpcError {
    RpcError::Transport {
        endpoint: endpoint.to_owned(),
        message: "the statuses read this one joined was abandoned".into(),
        maybe_delivered: true,
    }
}

/// The answer, if it has exactly one entry per signature asked: a list of another length
/// cannot be cut into each view's entries, and one view must never read another's.
fn whole(endpoint: &impl Endpoint, value: Value, count: usize) -> Result<Value, RpcError> {
    match value.get("value").and_then(Value::as_array).map(Vec::len) {
        Some(entries) if entries == count => Ok(value),
        entries => Err(RpcError::Malformed {
            endpoint: endpoint.label().to_owned(),
            message: format!(
                "getSignatureStatuses answered {} entries for {count} signatures",
                entries.map_or("no".to_owned(), |n| n.to_string())
            ),
        }),
    }
}

/// A view's own entries of a whole answer, as the node answers them alone.
fn part(value: &Value, offset: usize, count: usize) -> Value {
    let entries = value["value"].as_array().map_or(&[][..], Vec::as_slice);
    json!({
        "context": value.get("context").cloned().unwrap_or(Value::Null),
        "value": entries.get(offset..offset + count).unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use crate::{Endpoint, PassCache, RpcError};
    use serde_json::{Value, json};
    use std::sync::Mutex;

    /// A node that answers each signature `S<n>` with a status at slot n, recording the
    /// signatures of each request; `Short` answers one entry too few, `Down` fails.
    #[derive(Default)]
    struct Node {
        asked: Mutex<Vec<Vec<String>>>,
        answers: Answers,
    }

    #[derive(Default, PartialEq)]
    enum Answers {
        #[default]
        Whole,
        Short,
        Down,
        /// Refuses (invalid params) any request naming `S0`.
        RefusesS0,
        /// Answers every request with a rate limit's error.
        RateLimited,
    }

    impl Endpoint for Node {
        fn label(&self) -> &str {
            "http://node:8899"
        }

        async fn request(&self, method: &str, params: Value) -> Result<Value, RpcError> {
            assert_eq!(method, "getSignatureStatuses");
            let signatures: Vec<String> = params[0]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_str().unwrap().to_owned())
                .collect();
            self.asked.lock().unwrap().push(signatures.clone());
            if self.answers == Answers::Down {
                return Err(RpcError::Http {
                    endpoint: self.label().into(),
                    status: 503,
                });
            }
            let mut entries: Vec<Value> = signatures
                .iter()
                .map(|s| json!({ "slot": s[1..].parse::<u64>().unwrap() }))
                .collect();
            if self.answers == Answers::Short {
                entries.pop();
            }
            if self.answers == Answers::RateLimited {
                return Err(RpcError::Node {
                    endpoint: self.label().into(),
                    code: -32005,
                    message: "rate limited".into(),
                });
            }
            if self.answers == Answers::RefusesS0 && signatures.iter().any(|s| s == "S0") {
                return Err(RpcError::Node {
                    endpoint: self.label().into(),
                    code: -32602,
                    message: "Invalid param: S0".into(),
                });
            }
            Ok(json!({ "context": { "slot": 99 }, "value": entries }))
        }
    }

    fn asking(signatures: &[&str]) -> Value {
        json!([signatures, { "searchTransactionHistory": true }])
    }

    /// The views asking for `asked` at once, each answered.
    async fn at_once(cache: &PassCache<Node>, asked: &[&[&str]]) -> Vec<Result<Value, RpcError>> {
        futures::future::join_all(
            asked
                .iter()
                .map(|s| cache.request("getSignatureStatuses", asking(s))),
        )
        .await
    }

    fn slots(answer: &Value) -> Vec<u64> {
        answer["value"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["slot"].as_u64().unwrap())
            .collect()
    }

    #[tokio::test]
    async fn views_asking_at_once_are_read_in_one_request_each_answered_its_own() {
        let cache = PassCache::new(Node::default());
        let answers = at_once(&cache, &[&["S1"], &["S2", "S3"], &["S4"]]).await;
        let answers: Vec<Value> = answers.into_iter().map(Result::unwrap).collect();
        assert_eq!(
            answers.iter().map(slots).collect::<Vec<_>>(),
            [vec![1], vec![2, 3], vec![4]]
        );
        assert_eq!(answers[1]["context"], json!({ "slot": 99 }));
        assert_eq!(
            *cache.inner().asked.lock().unwrap(),
            [["S1", "S2", "S3", "S4"]]
        );
        // Asked after that read: a read of its own.
        let later = cache
            .request("getSignatureStatuses", asking(&["S5"]))
            .await
            .unwrap();
        assert_eq!(slots(&later), [5]);
        assert_eq!(cache.inner().asked.lock().unwrap().len(), 2);
    }

    #[tokio::test]
    async fn no_request_asks_for_more_than_a_node_answers_at_once() {
        let cache = PassCache::new(Node::default());
        let names: Vec<String> = (0..300).map(|n| format!("S{n}")).collect();
        let answers = futures::future::join_all(
            names
                .iter()
                .map(|name| cache.request("getSignatureStatuses", asking(&[name.as_str()]))),
        )
        .await;
        for (n, answer) in answers.into_iter().enumerate() {
            assert_eq!(slots(&answer.unwrap()), [n as u64]);
        }
        let mut sizes: Vec<usize> = cache
            .inner()
            .asked
            .lock()
            .unwrap()
            .iter()
            .map(Vec::len)
            .collect();
        sizes.sort();
        assert_eq!(
            sizes,
            [300 - super::MOST_SIGNATURES, super::MOST_SIGNATURES]
        );
    }

    #[tokio::test]
    async fn an_answer_that_cannot_be_cut_per_view_or_a_failure_answers_every_view_with_an_error() {
        // (A rate limit is the batch's: its views are not asked again one by one.)
        for answers in [Answers::Short, Answers::Down, Answers::RateLimited] {
            let cache = PassCache::new(Node {
                answers,
                ..Default::default()
            });
            // Three entries for four signatures: one of two views would read the other's.
            let read = futures::future::join(
                cache.request("getSignatureStatuses", asking(&["S1", "S2"])),
                cache.request("getSignatureStatuses", asking(&["S3", "S4"])),
            )
            .await;
            assert!(read.0.is_err() && read.1.is_err(), "{:?}", (read.0, read.1));
            assert_eq!(cache.inner().asked.lock().unwrap().len(), 1);
        }
    }

    #[tokio::test]
    async fn a_signature_the_node_refuses_fails_only_its_own_view() {
        let cache = PassCache::new(Node {
            answers: Answers::RefusesS0,
            ..Default::default()
        });
        let answers = at_once(&cache, &[&["S1"], &["S0", "S2"], &["S3"]]).await;
        assert_eq!(slots(answers[0].as_ref().unwrap()), [1]);
        assert!(
            matches!(answers[1], Err(RpcError::Node { .. })),
            "{answers:?}"
        );
        assert_eq!(slots(answers[2].as_ref().unwrap()), [3]);
        assert_eq!(
            cache.inner().asked.lock().unwrap().len(),
            4,
            "the batch, then each view alone"
        );
    }

    #[tokio::test]
    async fn a_view_whose_batch_s_read_is_dropped_is_answered_not_left_waiting() {
        let cache = PassCache::new(Node::default());
        use std::future::Future;
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        let mut leader = Box::pin(cache.request("getSignatureStatuses", asking(&["S1"])));
        assert!(
            leader.as_mut().poll(&mut context).is_pending(),
            "the batch is open"
        );
        let mut joined = Box::pin(cache.request("getSignatureStatuses", asking(&["S2"])));
        assert!(joined.as_mut().poll(&mut context).is_pending());
        drop(leader);
        let answer = tokio::time::timeout(std::time::Duration::from_secs(5), joined)
            .await
            .expect("answered");
        assert!(answer.is_err(), "{answer:?}");
        assert!(cache.inner().asked.lock().unwrap().is_empty());
        // A view asking after that reads, rather than joining the abandoned batch.
        let later = cache
            .request("getSignatureStatuses", asking(&["S3"]))
            .await
            .unwrap();
        assert_eq!(slots(&later), [3]);
    }

    #[tokio::test]
    async fn other_questions_are_asked_as_they_are() {
        let cache = PassCache::new(Node::default());
        for params in [
            json!([["S1"]]),
            json!([["S1"], { "searchTransactionHistory": false }]),
            json!([[], { "searchTransactionHistory": true }]),
            json!([[7], { "searchTransactionHistory": true }]),
        ] {
            assert!(super::batchable(&params).is_none(), "{params}");
        }
        assert!(super::batchable(&asking(&["S1"])).is_some());
        let alone = cache
            .request("getSignatureStatuses", json!([["S7"]]))
            .await
            .unwrap();
        assert_eq!(slots(&alone), [7]);
    }
}
