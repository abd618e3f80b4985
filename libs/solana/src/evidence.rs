//! Reading what one endpoint shows of an operation's signatures, at an explicit commitment:
//! its finalized block height (with its slot) and its durable-nonce account, then the status
//! of every signature with the slot its node had reached (a transaction that landed before
//! those reads shows in this one if that node had reached their slot), then, last,
//! how far back its history reaches (a node only prunes forward: the first slot it keeps after
//! the statuses were read bounds what it had forgotten while reading them).

use base64::Engine;
use serde_json::{Value, json};
use sigcast_jsonrpc::{Endpoint, RpcError};
use sigcast_protocol::{Commitment, SignatureStatus, SolanaView};

/// The commitment every read of a proof is made at: no fork can undo what is finalized.
const PROOF_COMMITMENT: Commitment = Commitment::Finalized;

/// The oldest slot the endpoint's history reaches: the later of `minimumLedgerSlot` and
/// `getFirstAvailableBlock`, whichever it answers.
async fn first_available_slot(endpoint: &impl Endpoint) -> Option<u64> {
    let mut first = None;
    for method in ["minimumLedgerSlot", "getFirstAvailableBlock"] {
        let answer = endpoint.request(method, json!([])).await;
        if let Some(slot) = answer.ok().and_then(|slot| slot.as_u64()) {
            first = Some(first.map_or(slot, |f: u64| f.max(slot)));
        }
    }
    first
}

/// The statuses of `signatures`, searching the whole history; `None` unless exactly one entry
/// per signature came back.
pub fn parse_statuses(value: &Value, asked: usize) -> Option<Vec<Option<SignatureStatus>>> {
    let entries = value.get("value")?.as_array()?;
    if entries.len() != asked {
        return None;
    }
    entries
        .iter()
        .map(|entry| {
            if entry.is_null() {
                return Some(None);
            }
            Some(Some(SignatureStatus {
                slot: entry.get("slot")?.as_u64()?,
                err: entry
                    .get("err")
                    .filter(|e| !e.is_null())
                    .map(ToString::to_string),
                confirmation: Commitment::parse(
                    entry
                        .get("confirmationStatus")
                        .and_then(Value::as_str)
                        .unwrap_or("processed"),
                ),
            }))
        })
        .collect()
}

/// The nonce value (base58) an account holds at the proof commitment (`None` if it is missing
/// or not an initialized nonce account), and the slot it was read at.
async fn nonce_value(
    endpoint: &impl Endpoint,
    account: &[u8; 32],
) -> Result<(Option<String>, u64), RpcError> {
    let params = json!([
        bs58::encode(account).into_string(),
        { "encoding": "base64", "commitment": PROOF_COMMITMENT.as_str() }
    ]);
    let value = endpoint.request("getAccountInfo", params).await?;
    let malformed = || RpcError::Malformed {
        endpoint: endpoint.label().to_owned(),
        message: "unexpected account info".into(),
    };
    let slot = value
        .get("context")
        .and_then(|c| c.get("slot"))
        .and_then(Value::as_u64)
        .ok_or_else(malformed)?;
    let account = value.get("value").ok_or_else(malformed)?;
    if account.is_null() {
        return Ok((None, slot));
    }
    let data = account
        .get("data")
        .and_then(|d| d.get(0))
        .and_then(Value::as_str)
        .and_then(|d| base64::engine::general_purpose::STANDARD.decode(d).ok())
        .ok_or_else(malformed)?;
    let value =
        crate::parse_nonce_account(&data).map(|state| bs58::encode(state.value).into_string());
    Ok((value, slot))
}

/// The most signatures `getSignatureStatuses` takes in one request (Agave's limit).
const MOST_SIGNATURES_PER_READ: usize = 256;

/// The statuses of `signatures` (each once, in order) and the lowest slot the node had reached
/// for any of them; `None` unless every part was read. Past 256 signatures (an operation
/// re-signed through hours of expiries) one request is refused whole: read 256 at a time,
/// they are still every attempt's, as the proof of expiry needs.
async fn statuses_of(
    endpoint: &impl Endpoint,
    signatures: &[String],
) -> (Option<Vec<Option<SignatureStatus>>>, Option<u64>) {
    let mut statuses = Vec::with_capacity(signatures.len());
    // The lowest of the parts' slots; `None` once a part tells none.
    let mut lowest_slot = Some(u64::MAX);
    for part in signatures.chunks(MOST_SIGNATURES_PER_READ) {
        let Ok(answer) = endpoint
            .request(
                "getSignatureStatuses",
                json!([part, { "searchTransactionHistory": true }]),
            )
            .await
        else {
            return (None, None);
        };
        let Some(read) = parse_statuses(&answer, part.len()) else {
            return (None, None);
        };
        statuses.extend(read);
        let slot = answer
            .get("context")
            .and_then(|c| c.get("slot"))
            .and_then(Value::as_u64);
        lowest_slot = lowest_slot.zip(slot).map(|(lowest, slot)| lowest.min(slot));
    }
    // No signature asked: no part, and no slot.
    (Some(statuses), lowest_slot.filter(|&slot| slot != u64::MAX))
}

/// Reads what `endpoint` shows of an operation's `signatures` (attempt order), with its
/// durable-nonce account if it uses one. Anything unreadable is left `None`.
pub async fn read_view(
    endpoint: &impl Endpoint,
    signatures: &[String],
    nonce_account: Option<&[u8; 32]>,
) -> SolanaView {
    // The height with its slot: the statuses must be of a node that had reached it.
    let epoch = endpoint
        .request(
            "getEpochInfo",
            json!([{ "commitment": PROOF_COMMITMENT.as_str() }]),
        )
        .await
        .ok();
    let field = |name: &str| {
        epoch
            .as_ref()
            .and_then(|e| e.get(name))
            .and_then(Value::as_u64)
    };
    let (block_height, height_slot) = (field("blockHeight"), field("absoluteSlot"));
    let (nonce_value, nonce_slot) = match nonce_account {
        Some(account) => match nonce_value(endpoint, account).await {
            Ok((value, slot)) => (Some(value), Some(slot)),
            Err(_) => (None, None),
        },
        None => (None, None),
    };
    let (statuses, statuses_slot) = statuses_of(endpoint, signatures).await;
    // Read last: read first, it would say nothing of what was pruned during the status read
    // (found by the simulation: a landed transfer's status gone, the operation CANCELLED).
    let first_available_slot = first_available_slot(endpoint).await;
    SolanaView {
        endpoint: endpoint.label().to_owned(),
        commitment: PROOF_COMMITMENT,
        block_height,
        height_slot,
        first_available_slot,
        nonce_value,
        nonce_slot,
        statuses,
        statuses_slot,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// An endpoint that prunes its history up to slot 20 while it reads statuses: a transaction
    /// of slot 9 shows no status then, and the first slot kept is 0 before, 20 after.
    #[derive(Default)]
    struct Pruning {
        asked: Mutex<Vec<String>>,
    }

    impl Endpoint for Pruning {
        fn label(&self) -> &str {
            "http://pruning:8899"
        }

        async fn request(&self, method: &str, _params: Value) -> Result<Value, RpcError> {
            let mut asked = self.asked.lock().unwrap();
            asked.push(method.to_owned());
            let pruned = asked.iter().any(|m| m == "getSignatureStatuses");
            Ok(match method {
                "minimumLedgerSlot" | "getFirstAvailableBlock" => {
                    json!(if pruned { 20 } else { 0 })
                }
                "getBlockHeight" => json!(500),
                "getSignatureStatuses" => json!({ "value": [null] }),
                _ => Value::Null,
            })
        }
    }

    /// A node that takes at most 256 signatures a request, as Agave does: each answered
    /// unknown but "Landed", at a slot that grows with each request.
    #[derive(Default)]
    struct TakesAtMost256 {
        requests: Mutex<u64>,
    }

    impl Endpoint for TakesAtMost256 {
        fn label(&self) -> &str {
            "http://node:8899"
        }

        async fn request(&self, method: &str, params: Value) -> Result<Value, RpcError> {
            Ok(match method {
                "getSignatureStatuses" => {
                    let asked = params[0].as_array().unwrap();
                    if asked.len() > 256 {
                        return Err(RpcError::Node {
                            endpoint: self.label().into(),
                            code: -32602,
                            message: "Too many inputs provided; max 256".into(),
                        });
                    }
                    let mut requests = self.requests.lock().unwrap();
                    *requests += 1;
                    let value: Vec<Value> = asked
                        .iter()
                        .map(|s| match s.as_str() {
                            Some("Landed") => {
                                json!({ "slot": 7, "confirmationStatus": "finalized", "err": null })
                            }
                            _ => Value::Null,
                        })
                        .collect();
                    json!({ "context": { "slot": 1000 - *requests }, "value": value })
                }
                _ => Value::Null,
            })
        }
    }

    #[test]
    fn more_than_256_signatures_are_read_256_at_a_time() {
        // An operation re-signed through hours of expiries: one request of all its signatures
        // was refused, no view had statuses, and the operation waited for ever (review,
        // sixteenth session).
        let mut signatures: Vec<String> = (0..300).map(|n| format!("sig{n}")).collect();
        signatures[280] = "Landed".into();
        let endpoint = TakesAtMost256::default();
        let view = ready(read_view(&endpoint, &signatures, None));
        let statuses = view.statuses.expect("every signature read");
        assert_eq!(statuses.len(), 300);
        assert_eq!(
            statuses.iter().position(Option::is_some),
            Some(280),
            "in order"
        );
        assert_eq!(*endpoint.requests.lock().unwrap(), 2);
        // The lowest slot of the two reads: the node had reached it for every signature.
        assert_eq!(view.statuses_slot, Some(998));
    }

    fn ready<T>(future: impl Future<Output = T>) -> T {
        let mut future = std::pin::pin!(future);
        match future
            .as_mut()
            .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
        {
            std::task::Poll::Ready(value) => value,
            std::task::Poll::Pending => panic!("the fake endpoint answers at once"),
        }
    }

    #[test]
    fn a_history_pruned_during_the_read_is_not_taken_for_whole() {
        // Read before the statuses, the first slot kept (0) says nothing of what was pruned
        // while they were read: the landed transfer's status was gone, and the view would
        // prove it never landed.
        let endpoint = Pruning::default();
        let view = ready(read_view(&endpoint, &["Sig1".to_owned()], None));
        assert_eq!(
            view.first_available_slot,
            Some(20),
            "the first slot kept, read after the statuses, shows the pruning ({:?})",
            endpoint.asked.lock().unwrap()
        );
    }

    /// An endpoint that prunes its history up to slot 20 when asked for the status of
    /// `Landed` (a transfer of slot 9, whose status goes with it): the first slot kept is 0
    /// before, 20 after.
    #[derive(Default)]
    struct PrunesAtLanded {
        pruned: Mutex<bool>,
    }

    impl Endpoint for PrunesAtLanded {
        fn label(&self) -> &str {
            "http://pruning:8899"
        }

        async fn request(&self, method: &str, params: Value) -> Result<Value, RpcError> {
            let mut pruned = self.pruned.lock().unwrap();
            Ok(match method {
                "minimumLedgerSlot" | "getFirstAvailableBlock" => {
                    json!(if *pruned { 20 } else { 0 })
                }
                "getBlockHeight" => json!(500),
                "getSignatureStatuses" => {
                    *pruned |= params[0][0] == "Landed";
                    json!({ "value": [null] })
                }
                _ => Value::Null,
            })
        }
    }

    #[tokio::test]
    async fn a_history_pruned_after_another_view_of_the_pass_is_not_taken_for_whole() {
        // The broadcaster reads a pass's views through one cache per endpoint. The first slot
        // kept, read for the first view before the node pruned, must not be the second's: its
        // statuses were read after the pruning, and the landed transfer's was gone.
        // Also on a clock that gives every read the same instant, as a simulated clock of
        // milliseconds does: the order of reads, not their times, decides.
        fn frozen() -> std::time::Instant {
            static AT: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
            *AT.get_or_init(std::time::Instant::now)
        }
        for clock in [std::time::Instant::now, frozen] {
            let endpoint = sigcast_jsonrpc::PassCache::with_clock(PrunesAtLanded::default(), clock);
            let first = read_view(&endpoint, &["Other".to_owned()], None).await;
            assert_eq!(first.first_available_slot, Some(0));
            let second = read_view(&endpoint, &["Landed".to_owned()], None).await;
            assert_eq!(
                second.first_available_slot,
                Some(20),
                "the first slot kept, as the node answered after this view's statuses"
            );
        }
    }

    /// One URL in front of two nodes (a load balancer): the height and the history bound
    /// from a node at slot 520, past the transaction's last valid height; the statuses from a
    /// node that had reached the slot it says.
    struct Balanced(u64);

    impl Endpoint for Balanced {
        fn label(&self) -> &str {
            "http://balanced:8899"
        }

        async fn request(&self, method: &str, _params: Value) -> Result<Value, RpcError> {
            Ok(match method {
                "minimumLedgerSlot" | "getFirstAvailableBlock" => json!(0),
                "getBlockHeight" => json!(500),
                "getEpochInfo" => json!({ "absoluteSlot": 520, "blockHeight": 500 }),
                "getSignatureStatuses" => {
                    json!({ "context": { "slot": self.0 }, "value": [null] })
                }
                _ => Value::Null,
            })
        }
    }

    #[test]
    fn statuses_of_a_node_behind_the_expiry_prove_nothing() {
        // Signed at slot 90, valid through height 150, landed at slot 140 on the node ahead.
        use sigcast_proto::pb;
        let op = pb::Operation {
            chain: "solana:localnet".into(),
            signing: Some(pb::operation::Signing::Solana(pb::SolanaSigning {
                blockhash: "Hash1".into(),
                last_valid_block_height: 150,
                nonce_account: String::new(),
                signing_slot: 90,
            })),
            attempts: vec![pb::Attempt {
                number: 1,
                tx_id: "Sig1".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        use sigcast_protocol::solana::{Lifetime, lifetime};
        let now = std::time::SystemTime::now();
        // Still at slot 100, before the landing.
        let view = ready(read_view(&Balanced(100), &["Sig1".to_owned()], None));
        assert_eq!(
            lifetime(&op, &view, now),
            Lifetime::Unknown(sigcast_protocol::Why::StatusesBehind),
            "{view:?}"
        );
        // At the height's slot: its empty status is the proof.
        let view = ready(read_view(&Balanced(520), &["Sig1".to_owned()], None));
        assert!(
            matches!(lifetime(&op, &view, now), Lifetime::Over(_)),
            "{view:?}"
        );
    }

    #[test]
    fn statuses_count_must_match_the_signatures_asked() {
        let answer = json!({ "context": { "slot": 9 }, "value": [null, {
            "slot": 7, "err": null, "confirmationStatus": "finalized"
        }] });
        let parsed = parse_statuses(&answer, 2).unwrap();
        assert_eq!(parsed[0], None);
        assert_eq!(
            parsed[1],
            Some(SignatureStatus {
                slot: 7,
                err: None,
                confirmation: Commitment::Finalized
            })
        );
        assert_eq!(parse_statuses(&answer, 3), None, "an entry missing");
        assert_eq!(parse_statuses(&answer, 1), None, "an entry too many");
        assert_eq!(parse_statuses(&json!({ "value": null }), 0), None);
    }
}
