//! Reading what one endpoint shows of an operation's signatures, at an explicit commitment:
//! how far back its history reaches, its finalized block height, its durable-nonce account,
//! and then, last, the status of every signature (so a transaction that landed before the
//! first read shows in the last one).

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

/// The nonce value (base58) an account holds at the proof commitment; `Some(None)` if it is
/// missing or not an initialized nonce account.
async fn nonce_value(
    endpoint: &impl Endpoint,
    account: &[u8; 32],
) -> Result<Option<String>, RpcError> {
    let params = json!([
        bs58::encode(account).into_string(),
        { "encoding": "base64", "commitment": PROOF_COMMITMENT.as_str() }
    ]);
    let value = endpoint.request("getAccountInfo", params).await?;
    let malformed = || RpcError::Malformed {
        endpoint: endpoint.label().to_owned(),
        message: "unexpected account info".into(),
    };
    let account = value.get("value").ok_or_else(malformed)?;
    if account.is_null() {
        return Ok(None);
    }
    let data = account
        .get("data")
        .and_then(|d| d.get(0))
        .and_then(Value::as_str)
        .and_then(|d| base64::engine::general_purpose::STANDARD.decode(d).ok())
        .ok_or_else(malformed)?;
    Ok(crate::parse_nonce_account(&data).map(|state| bs58::encode(state.value).into_string()))
}

/// Reads what `endpoint` shows of an operation's `signatures` (attempt order), with its
/// durable-nonce account if it uses one. Anything unreadable is left `None`.
pub async fn read_view(
    endpoint: &impl Endpoint,
    signatures: &[String],
    nonce_account: Option<&[u8; 32]>,
) -> SolanaView {
    let first_available_slot = first_available_slot(endpoint).await;
    let block_height = endpoint
        .request(
            "getBlockHeight",
            json!([{ "commitment": PROOF_COMMITMENT.as_str() }]),
        )
        .await
        .ok()
        .and_then(|v| v.as_u64());
    let nonce_value = match nonce_account {
        Some(account) => nonce_value(endpoint, account).await.ok(),
        None => None,
    };
    let statuses = endpoint
        .request(
            "getSignatureStatuses",
            json!([signatures, { "searchTransactionHistory": true }]),
        )
        .await
        .ok()
        .and_then(|value| parse_statuses(&value, signatures.len()));
    SolanaView {
        endpoint: endpoint.label().to_owned(),
        commitment: PROOF_COMMITMENT,
        block_height,
        first_available_slot,
        nonce_value,
        statuses,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
