//! `sigcast reconcile`: what the chain says of an operation, read directly from the given
//! endpoints (each one's own view), judged by the same decision function the broadcaster
//! runs, and set beside what the store says. It writes nothing: settling the operation stays
//! the broadcaster's job, which it does from the same evidence on its next pass.

use anyhow::{Context, Result, bail};
use sigcast_domain::{Chain, OperationState};
use sigcast_evm::{Address, B256, EvmRpc};
use sigcast_jsonrpc::Endpoint;
use sigcast_proto::{pb, state_from_proto};
use sigcast_protocol::{Action, Evidence, EvmView, Rules, SolanaView, judge};
use sigcast_solana::SolanaRpc;
use std::time::{Duration, SystemTime};

/// The chain's view of an operation.
pub(crate) struct Report {
    /// Chain facts read, per endpoint.
    pub(crate) facts: Vec<(String, String)>,
    /// Each attempt's transaction and what the chain knows of it.
    pub(crate) attempts: Vec<(String, String)>,
    /// What the evidence means for the operation, beside what the store says.
    pub(crate) verdict: String,
}

pub(crate) async fn reconcile(
    op: &pb::Operation,
    urls: &[String],
    confirmations: u64,
    genesis_hash: Option<&str>,
) -> Result<Report> {
    let timeout = Duration::from_secs(10);
    if op.attempts.is_empty() {
        return Ok(Report {
            facts: Vec::new(),
            attempts: Vec::new(),
            verdict: format!(
                "{}: nothing signed yet, nothing on chain to compare",
                state(op)
            ),
        });
    }
    let rules = Rules {
        confirmations,
        ..Rules::default()
    };
    let (evidence, facts, attempts) = match Chain::parse(&op.chain) {
        Ok(Chain::Evm { chain_id }) => {
            evm(op, chain_id, &EvmRpc::new(urls, timeout)?, confirmations).await?
        }
        Ok(Chain::Solana { cluster }) => {
            // As the broadcaster does: only the cluster's own endpoints are evidence. Unlike
            // it, never pinned to what the endpoints given answer: one URL of the wrong
            // cluster would agree with itself.
            let Some(genesis) =
                genesis_hash.or_else(|| sigcast_solana::known_genesis_hash(&cluster))
            else {
                bail!(
                    "cluster {cluster} has no known genesis hash: pass --genesis-hash (the \
                     cluster's getGenesisHash, as the broadcaster's genesis_hash) so that an \
                     endpoint of another cluster is not read as this one's"
                );
            };
            let rpc = SolanaRpc::new(urls, timeout)?.expecting_cluster(&cluster, Some(genesis));
            solana(op, &rpc, genesis).await?
        }
        Err(rule) => bail!("chain {}: {rule}", op.chain),
    };
    let verdict = verdict(op, &judge(op, &evidence, SystemTime::now(), &rules));
    Ok(Report {
        facts,
        attempts,
        verdict,
    })
}

fn state(op: &pb::Operation) -> &'static str {
    crate::output::state(op)
}

type Read = (Evidence, Vec<(String, String)>, Vec<(String, String)>);

async fn evm(op: &pb::Operation, chain_id: u64, rpc: &EvmRpc, confirmations: u64) -> Result<Read> {
    let account: Address = op.account.parse().context("the operation's account")?;
    let nonce =
        sigcast_protocol::evm::nonce_of(op).context("an EVM operation without its nonce")?;
    let hashes: Vec<B256> = op
        .attempts
        .iter()
        .map(|a| a.tx_id.parse().context("an attempt's hash"))
        .collect::<Result<_>>()?;
    let mut facts = vec![("operation nonce".to_owned(), nonce.to_string())];
    let mut views: Vec<EvmView> = Vec::new();
    for endpoint in rpc.ranked_endpoints() {
        // An endpoint of another chain shows another account history: never evidence.
        let served = endpoint
            .request("eth_chainId", serde_json::json!([]))
            .await
            .map(|value| sigcast_jsonrpc::quantity(&value));
        match served {
            Ok(Some(served)) if served == chain_id => {}
            Ok(served) => {
                facts.push((
                    format!("{} serves", endpoint.label()),
                    format!("chain {served:?}, not {chain_id}: not read"),
                ));
                continue;
            }
            Err(error) => {
                facts.push(("unreadable".into(), error.to_string()));
                continue;
            }
        }
        match sigcast_evm::evidence::read_view(
            &endpoint,
            account,
            nonce,
            &hashes,
            None,
            confirmations,
        )
        .await
        {
            Ok(view) => views.push(view),
            Err(error) => facts.push(("unreadable".into(), error.to_string())),
        }
    }
    for view in &views {
        let e = &view.endpoint;
        facts.push((
            format!("{e} head"),
            format!("{} ({})", view.head.number, view.head.hash),
        ));
        facts.push((
            format!("{e} account nonce"),
            view.account_nonce
                .map_or("unreadable".into(), |n| n.to_string()),
        ));
        if let Some(landed) = &view.landed {
            let canonical = landed.is_canonical();
            facts.push((
                format!("{e} nonce used by"),
                format!(
                    "{} in block {} ({}), {} deep{}",
                    landed.tx,
                    landed.block.number,
                    landed.block.hash,
                    (view.head.number + 1).saturating_sub(landed.block.number),
                    if canonical {
                        ""
                    } else {
                        ", NOT on its canonical chain"
                    }
                ),
            ));
        }
    }
    let attempts = op
        .attempts
        .iter()
        .map(|attempt| {
            let seen = views
                .iter()
                .find_map(|v| {
                    v.landed
                        .as_ref()
                        .filter(|l| l.tx.eq_ignore_ascii_case(&attempt.tx_id))
                        .map(|l| {
                            format!(
                                "included in block {} ({}) on {}",
                                l.block.number,
                                match l.success {
                                    Some(true) => "success",
                                    Some(false) => "reverted",
                                    None => "receipt not readable",
                                },
                                v.endpoint
                            )
                        })
                })
                .unwrap_or_else(|| "not seen at the nonce".into());
            (attempt.tx_id.clone(), seen)
        })
        .collect();
    Ok((Evidence::Evm(views), facts, attempts))
}

async fn solana(op: &pb::Operation, rpc: &SolanaRpc, genesis: &str) -> Result<Read> {
    let signing = sigcast_protocol::solana::signing_of(op)
        .context("a Solana operation without its signing data")?;
    let signatures: Vec<String> = op.attempts.iter().map(|a| a.tx_id.clone()).collect();
    let nonce_account = if sigcast_protocol::solana::uses_durable_nonce(signing) {
        Some(
            *sigcast_domain::SolanaPubkey::parse(&signing.nonce_account)
                .map_err(anyhow::Error::msg)?
                .as_bytes(),
        )
    } else {
        None
    };
    let mut facts = vec![
        ("signing slot".to_owned(), signing.signing_slot.to_string()),
        if nonce_account.is_some() {
            (
                "nonce value signed".to_owned(),
                format!("{} (account {})", signing.blockhash, signing.nonce_account),
            )
        } else {
            (
                "last valid height".to_owned(),
                signing.last_valid_block_height.to_string(),
            )
        },
    ];
    let mut views: Vec<SolanaView> = Vec::new();
    for endpoint in rpc.ranked_endpoints() {
        // Another cluster knows none of our signatures and may be past their blockhash:
        // read as ours, that would say "expired, nothing landed".
        if !rpc.serves_cluster(&endpoint).await {
            facts.push((
                format!("{} serves", endpoint.label()),
                format!("another cluster than genesis {genesis}, or no answer: not read"),
            ));
            continue;
        }
        let view =
            sigcast_solana::evidence::read_view(&endpoint, &signatures, nonce_account.as_ref())
                .await;
        let e = &view.endpoint;
        let shown = |v: Option<u64>| v.map_or("unreadable".to_owned(), |v| v.to_string());
        facts.push((
            format!("{e} {} block height", view.commitment),
            shown(view.block_height),
        ));
        facts.push((
            format!("{e} history from slot"),
            shown(view.first_available_slot),
        ));
        if nonce_account.is_some() {
            facts.push((
                format!("{e} nonce value now"),
                match &view.nonce_value {
                    Some(Some(value)) => match view.nonce_slot {
                        Some(slot) => format!("{value} (read at slot {slot})"),
                        None => value.clone(),
                    },
                    Some(None) => "(not a nonce account)".into(),
                    None => "unreadable".into(),
                },
            ));
        }
        views.push(view);
    }
    let attempts = op
        .attempts
        .iter()
        .enumerate()
        .map(|(i, attempt)| {
            let seen = views
                .iter()
                .find_map(|v| {
                    v.statuses
                        .as_ref()
                        .and_then(|s| s.get(i).cloned().flatten())
                        .map(|s| {
                            format!(
                                "landed in slot {} ({}{}) on {}",
                                s.slot,
                                s.confirmation,
                                s.err
                                    .as_ref()
                                    .map_or(String::new(), |e| format!(", failed: {e}")),
                                v.endpoint
                            )
                        })
                })
                .unwrap_or_else(|| "unknown to every endpoint read".into());
            (attempt.tx_id.clone(), seen)
        })
        .collect();
    Ok((Evidence::Solana(views), facts, attempts))
}

/// What the chain's judgement means beside the stored state.
fn verdict(op: &pb::Operation, action: &Action) -> String {
    let stored = state_from_proto(op.state());
    let s = state(op);
    match action {
        Action::Settle(settlement) => {
            let evidence = settlement.evidence.as_ref();
            let what = match (&settlement.result, evidence) {
                (Some(result), _) => {
                    let n = op
                        .attempts
                        .iter()
                        .find(|a| a.tx_id.eq_ignore_ascii_case(&result.tx_id))
                        .map_or(0, |a| a.number);
                    format!(
                        "attempt {n} {} in block {} ({})",
                        match settlement.state {
                            OperationState::Cancelled => "cancelled it",
                            OperationState::Rejected => "took the nonce instead",
                            _ => "confirmed",
                        },
                        result.block_number,
                        result.block_hash
                    )
                }
                (None, Some(e)) if !e.tx_id.is_empty() => format!(
                    "transaction {} of another sender used the nonce in block {}",
                    e.tx_id, e.block_number
                ),
                _ => settlement
                    .error
                    .as_ref()
                    .map_or_else(String::new, |e| e.message.clone()),
            };
            let on = evidence.map_or(String::new(), |e| format!(", read on {}", e.endpoint));
            if stored == Some(settlement.state) {
                format!("agrees: {what}{on}")
            } else if stored.is_some_and(OperationState::is_terminal) {
                format!(
                    "DISAGREES: the store says {s}, the chain shows {:?}: {what}{on}",
                    settlement.state
                )
            } else {
                format!(
                    "{s}: the chain shows {:?} ({what}{on}); the broadcaster settles it on its next pass",
                    settlement.state
                )
            }
        }
        Action::Resign(proof) => match stored {
            // Nothing landed, where the store says something did.
            Some(OperationState::Confirmed) => format!(
                "DISAGREES: the store says {s}, the chain shows no attempt landed or can \
                 (shown by {})",
                proof.endpoint
            ),
            // Cancelled before it could land, or rejected on this proof.
            Some(state) if state.is_terminal() => format!(
                "agrees: no attempt landed or can (shown by {})",
                proof.endpoint
            ),
            _ => format!(
                "{s}: no attempt can land (shown by {}): the broadcaster re-signs it, or \
                 cancels it if asked",
                proof.endpoint
            ),
        },
        Action::Wait(why) | Action::ReadMore(why) => format!("{s}: nothing settled: {why}"),
        Action::Send(n) => {
            format!("{s}: in flight; attempt {n}'s same bytes are sent again until it lands")
        }
        Action::Replace(replacement) => {
            format!("{s}: in flight; the broadcaster signs a {replacement:?} at the same nonce")
        }
        Action::Sign => format!("{s}: not signed yet"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Proof that no attempt can land says opposite things beside each stored state.
    #[test]
    fn a_proof_that_nothing_can_land_is_read_against_the_stored_state() {
        let proof = Action::Resign(pb::Evidence {
            endpoint: "http://node".into(),
            ..Default::default()
        });
        let verdict = |state: pb::OperationState| {
            let mut op = pb::Operation::default();
            op.set_state(state);
            verdict(&op, &proof)
        };
        assert_eq!(
            verdict(pb::OperationState::Confirmed),
            "DISAGREES: the store says CONFIRMED, the chain shows no attempt landed or can \
             (shown by http://node)"
        );
        for state in [pb::OperationState::Cancelled, pb::OperationState::Rejected] {
            assert_eq!(
                verdict(state),
                "agrees: no attempt landed or can (shown by http://node)"
            );
        }
        assert!(verdict(pb::OperationState::Sent).starts_with("SENT: no attempt can land"));
    }
}
