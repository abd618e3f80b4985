//! `sigcast reconcile`: what the chain says of an operation, read directly from the given
//! endpoints and set beside what the store says. It writes nothing: settling the operation
//! stays the broadcaster's job, which it does from the same evidence on its next pass.

use anyhow::{Context, Result, bail};
use sigcast_evm::{Address, B256, EvmRpc};
use sigcast_proto::pb;
use sigcast_solana::SolanaRpc;
use std::time::Duration;

/// The chain's view of an operation.
pub(crate) struct Report {
    /// Chain facts read (nonce, block height, nonce account value…).
    pub(crate) facts: Vec<(String, String)>,
    /// Each attempt's transaction and what the chain knows of it.
    pub(crate) attempts: Vec<(String, String)>,
    /// What the evidence means for the operation.
    pub(crate) verdict: String,
}

pub(crate) async fn reconcile(op: &pb::Operation, urls: &[String]) -> Result<Report> {
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
    if op.chain.starts_with("eip155:") {
        evm(op, &EvmRpc::new(urls, timeout)?).await
    } else if op.chain.starts_with("solana:") {
        solana(op, &SolanaRpc::new(urls, timeout)?).await
    } else {
        bail!("chain {} is neither eip155 nor solana", op.chain)
    }
}

fn state(op: &pb::Operation) -> &'static str {
    crate::output::state(op)
}

async fn evm(op: &pb::Operation, rpc: &EvmRpc) -> Result<Report> {
    let account: Address = op.account.parse().context("the operation's account")?;
    let chain_nonce = rpc.nonce(account).await?;
    let mut facts = vec![("account nonce".to_owned(), chain_nonce.to_string())];
    let nonce = match &op.signing {
        Some(pb::operation::Signing::Evm(evm)) => evm.nonce,
        _ => bail!("an EVM operation without its nonce"),
    };
    facts.push(("operation nonce".into(), nonce.to_string()));
    let mut attempts = Vec::new();
    let mut included = None;
    for attempt in &op.attempts {
        let hash: B256 = attempt.tx_id.parse().context("an attempt's hash")?;
        let seen = match rpc.receipt(hash).await? {
            Some(r) => {
                included = Some((attempt.clone(), r.block_number, r.success));
                format!(
                    "included in block {} ({})",
                    r.block_number,
                    if r.success { "success" } else { "reverted" }
                )
            }
            None => "no receipt".into(),
        };
        attempts.push((attempt.tx_id.clone(), seen));
    }
    let verdict = match (included, state(op)) {
        (Some((a, block, _)), "CONFIRMED")
            if op.result.as_ref().is_some_and(|r| r.tx_id == a.tx_id) =>
        {
            format!("agrees: attempt {} confirmed in block {block}", a.number)
        }
        (Some((a, block, _)), "CANCELLED") if a.reason == "cancel" => {
            format!(
                "agrees: the cancel (attempt {}) took the nonce in block {block}",
                a.number
            )
        }
        (Some((a, block, _)), s) => format!(
            "attempt {} is included in block {block} while the store says {s}: the broadcaster settles it on its next pass (if it does not, it cannot read this endpoint)",
            a.number
        ),
        (None, s @ ("SENT" | "SIGNED")) if chain_nonce > nonce => format!(
            "{s}: nonce {nonce} is consumed and no attempt has a receipt here: the broadcaster will prove it REJECTED (or wait for a reorg to settle)"
        ),
        (None, s @ ("SENT" | "SIGNED")) => {
            format!(
                "{s}: in flight, nonce {nonce} not yet used on chain; the same bytes are resent until it is"
            )
        }
        (None, "REJECTED") if chain_nonce > nonce => {
            "agrees: the nonce is used by another transaction, none of this operation's landed"
                .into()
        }
        (None, s) => format!("{s}, and no attempt is on chain here"),
    };
    Ok(Report {
        facts,
        attempts,
        verdict,
    })
}

async fn solana(op: &pb::Operation, rpc: &SolanaRpc) -> Result<Report> {
    let signatures: Vec<String> = op.attempts.iter().map(|a| a.tx_id.clone()).collect();
    let statuses = rpc.statuses(&signatures).await?;
    let height = rpc.block_height().await?;
    let mut facts = vec![("block height".to_owned(), height.to_string())];
    let mut expired = false;
    let mut nonce_moved = false;
    match &op.signing {
        Some(pb::operation::Signing::Solana(s)) if !s.nonce_account.is_empty() => {
            let account: [u8; 32] = bs58_decode(&s.nonce_account)?;
            let now = rpc
                .nonce(&account)
                .await?
                .map(|n| sigcast_solana_b58(&n.value));
            facts.push(("nonce account".into(), s.nonce_account.clone()));
            facts.push((
                "nonce value now".into(),
                now.clone()
                    .unwrap_or_else(|| "(not a nonce account)".into()),
            ));
            facts.push(("nonce value signed".into(), s.blockhash.clone()));
            nonce_moved = now.is_some_and(|v| v != s.blockhash);
        }
        Some(pb::operation::Signing::Solana(s)) => {
            facts.push((
                "last valid height".into(),
                s.last_valid_block_height.to_string(),
            ));
            expired = height > s.last_valid_block_height;
        }
        _ => bail!("a Solana operation without its signing data"),
    }
    let mut landed = None;
    let attempts = op
        .attempts
        .iter()
        .zip(&statuses)
        .map(|(a, status)| {
            let seen = match status {
                Some(s) => {
                    landed.get_or_insert((a.number, s.slot));
                    format!(
                        "landed in slot {} ({}{})",
                        s.slot,
                        s.confirmation,
                        s.err
                            .as_ref()
                            .map_or(String::new(), |e| format!(", failed: {e}"))
                    )
                }
                None => "unknown to this endpoint".into(),
            };
            (a.tx_id.clone(), seen)
        })
        .collect();
    let s = state(op);
    let verdict = match landed {
        Some((n, slot)) if matches!(s, "CONFIRMED" | "CANCELLED") => {
            format!("agrees: attempt {n} landed in slot {slot}")
        }
        Some((n, slot)) => format!(
            "attempt {n} landed in slot {slot} while the store says {s}: the broadcaster settles it at the configured commitment"
        ),
        None if expired || nonce_moved => format!(
            "{s}: no attempt landed and none can any more: the broadcaster re-signs (or cancels) once one endpoint proves it"
        ),
        None => format!("{s}: in flight; the same bytes are resent while they can land"),
    };
    Ok(Report {
        facts,
        attempts,
        verdict,
    })
}

fn bs58_decode(text: &str) -> Result<[u8; 32]> {
    sigcast_domain::SolanaPubkey::parse(text)
        .map(|k| *k.as_bytes())
        .map_err(anyhow::Error::msg)
}

fn sigcast_solana_b58(bytes: &[u8; 32]) -> String {
    sigcast_domain::SolanaPubkey::from(*bytes).to_string()
}
