//! What the CLI prints: aligned tables for people, or protobuf's JSON mapping for scripts (the
//! messages are transcoded from `proto/` descriptors, never re-declared here).

use anyhow::{Context, Result};
use prost::Message;
use prost_reflect::{DescriptorPool, DynamicMessage};
use sigcast_proto::pb;
use sigcast_proto::sigcast::signer::v1 as signer;
use std::time::Duration;

/// The output mode and the descriptors JSON is made from.
pub(crate) struct Output {
    json: bool,
    pool: DescriptorPool,
}

/// A state's short name: `SENT` for OPERATION_STATE_SENT.
pub(crate) fn state(op: &pb::Operation) -> &'static str {
    op.state()
        .as_str_name()
        .trim_start_matches("OPERATION_STATE_")
}

/// Whether the operation can no longer change.
pub(crate) fn is_terminal(op: &pb::Operation) -> bool {
    matches!(
        op.state(),
        pb::OperationState::Confirmed
            | pb::OperationState::Rejected
            | pb::OperationState::Cancelled
    )
}

/// RFC 3339 in whole seconds (tables are read by people; `--json` keeps the nanoseconds).
fn time(t: Option<&prost_types::Timestamp>) -> String {
    t.map_or_else(String::new, |t| {
        prost_types::Timestamp {
            seconds: t.seconds,
            nanos: 0,
        }
        .to_string()
    })
}

/// An amount of wei per gas (a decimal string) in gwei, as operators compare it with a base
/// fee: "3 gwei", "1.25 gwei"; empty where none was recorded (Solana, older attempts).
fn gwei(wei: &str) -> String {
    let Ok(wei) = wei.parse::<u128>() else {
        return String::new();
    };
    let (whole, fraction) = (wei / 1_000_000_000, wei % 1_000_000_000);
    if fraction == 0 {
        format!("{whole} gwei")
    } else {
        let fraction = format!("{fraction:09}");
        format!("{whole}.{} gwei", fraction.trim_end_matches('0'))
    }
}

fn table(header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let text: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        outln!("{}", text.join("  ").trim_end());
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}

impl Output {
    pub(crate) fn new(json: bool) -> Result<Self> {
        let pool = DescriptorPool::decode(sigcast_proto::FILE_DESCRIPTOR_SET)
            .context("decoding the built-in proto descriptors")?;
        Ok(Self { json, pool })
    }

    fn to_json<M: Message>(&self, message: &M, name: &str) -> Result<serde_json::Value> {
        let descriptor = self
            .pool
            .get_message_by_name(name)
            .with_context(|| format!("no message {name} in proto/"))?;
        let dynamic = DynamicMessage::decode(descriptor, message.encode_to_vec().as_slice())?;
        Ok(serde_json::to_value(&dynamic)?)
    }

    fn print_json(&self, value: &serde_json::Value) -> Result<()> {
        outln!("{}", serde_json::to_string_pretty(value)?);
        Ok(())
    }

    pub(crate) fn operation(&self, op: &pb::Operation) -> Result<()> {
        if self.json {
            return self.print_json(&self.to_json(op, "sigcast.v1.Operation")?);
        }
        let mut rows = vec![
            ("op_id", op.op_id.clone()),
            ("state", state(op).to_owned()),
            ("chain", op.chain.clone()),
            ("account", op.account.clone()),
            ("created", time(op.create_time.as_ref())),
            ("updated", time(op.update_time.as_ref())),
            ("attempts", op.attempts.len().to_string()),
        ];
        match &op.signing {
            Some(pb::operation::Signing::Evm(evm)) => rows.push(("nonce", evm.nonce.to_string())),
            Some(pb::operation::Signing::Solana(s)) if !s.nonce_account.is_empty() => {
                rows.push(("nonce account", s.nonce_account.clone()));
            }
            Some(pb::operation::Signing::Solana(s)) => {
                rows.push(("valid until height", s.last_valid_block_height.to_string()));
            }
            None => {}
        }
        if op.cancel_requested {
            rows.push(("cancel", "requested".into()));
        }
        if let Some(result) = &op.result {
            rows.push(("tx", result.tx_id.clone()));
            rows.push(("block", result.block_number.to_string()));
            rows.push((
                "execution",
                result
                    .execution_status()
                    .as_str_name()
                    .trim_start_matches("EXECUTION_STATUS_")
                    .to_owned(),
            ));
        }
        if let Some(error) = &op.error {
            rows.push(("reason", error.reason.clone()));
            rows.push(("detail", error.message.clone()));
        }
        let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
        for (key, value) in rows {
            outln!("{key:<width$}  {value}");
        }
        Ok(())
    }

    pub(crate) fn operations(&self, ops: &[pb::Operation]) -> Result<()> {
        if self.json {
            let values = ops
                .iter()
                .map(|op| self.to_json(op, "sigcast.v1.Operation"))
                .collect::<Result<Vec<_>>>()?;
            return self.print_json(&serde_json::Value::Array(values));
        }
        let rows: Vec<Vec<String>> = ops
            .iter()
            .map(|op| {
                vec![
                    op.op_id.clone(),
                    state(op).to_owned(),
                    op.chain.clone(),
                    op.account.clone(),
                    op.attempts.len().to_string(),
                    time(op.update_time.as_ref()),
                ]
            })
            .collect();
        table(
            &["OP_ID", "STATE", "CHAIN", "ACCOUNT", "ATTEMPTS", "UPDATED"],
            &rows,
        );
        Ok(())
    }

    pub(crate) fn attempts(&self, op: &pb::Operation) -> Result<()> {
        if self.json {
            let values = op
                .attempts
                .iter()
                .map(|a| self.to_json(a, "sigcast.v1.Attempt"))
                .collect::<Result<Vec<_>>>()?;
            return self.print_json(&serde_json::Value::Array(values));
        }
        let rows: Vec<Vec<String>> = op
            .attempts
            .iter()
            .map(|a| {
                vec![
                    a.number.to_string(),
                    a.tx_id.clone(),
                    if a.reason.is_empty() {
                        "initial".into()
                    } else {
                        a.reason.clone()
                    },
                    a.outcome()
                        .as_str_name()
                        .trim_start_matches("ATTEMPT_OUTCOME_")
                        .to_owned(),
                    a.endpoint.clone(),
                    time(a.send_time.as_ref()),
                    gwei(&a.max_fee_per_gas),
                ]
            })
            .collect();
        table(
            &[
                "#",
                "TX",
                "WHY",
                "OUTCOME",
                "ENDPOINT",
                "SENT",
                "MAX FEE/GAS",
            ],
            &rows,
        );
        Ok(())
    }

    pub(crate) fn audit(&self, records: &[signer::AuditRecord]) -> Result<()> {
        if self.json {
            let values = records
                .iter()
                .map(|r| self.to_json(r, "sigcast.signer.v1.AuditRecord"))
                .collect::<Result<Vec<_>>>()?;
            return self.print_json(&serde_json::Value::Array(values));
        }
        let rows: Vec<Vec<String>> = records
            .iter()
            .map(|r| {
                let at = prost_types::Timestamp {
                    seconds: r.time_unix_ms.div_euclid(1000),
                    nanos: 0,
                };
                vec![
                    r.attempt.to_string(),
                    r.purpose()
                        .as_str_name()
                        .trim_start_matches("SIGN_PURPOSE_")
                        .to_owned(),
                    r.key_id.clone(),
                    r.nonce.to_string(),
                    r.tx_id.clone(),
                    r.digest.clone(),
                    r.caller.clone(),
                    time(Some(&at)),
                ]
            })
            .collect();
        table(
            &[
                "#", "PURPOSE", "KEY", "NONCE", "TX", "DIGEST", "CALLER", "SIGNED",
            ],
            &rows,
        );
        Ok(())
    }

    pub(crate) fn keys(&self, keys: &[signer::SignerKey]) -> Result<()> {
        if self.json {
            let values = keys
                .iter()
                .map(|k| self.to_json(k, "sigcast.signer.v1.SignerKey"))
                .collect::<Result<Vec<_>>>()?;
            return self.print_json(&serde_json::Value::Array(values));
        }
        let rows: Vec<Vec<String>> = keys
            .iter()
            .map(|k| vec![k.address.clone(), k.algorithm.clone(), k.backend.clone()])
            .collect();
        table(&["ACCOUNT", "ALGORITHM", "BACKEND"], &rows);
        Ok(())
    }

    pub(crate) fn watch_line(&self, op: &pb::Operation, elapsed: Duration) -> Result<()> {
        if self.json {
            outln!(
                "{}",
                serde_json::to_string(&self.to_json(op, "sigcast.v1.Operation")?)?
            );
            return Ok(());
        }
        let mut line = format!("{:>6.1}s  {:<9}", elapsed.as_secs_f64(), state(op));
        if let Some(last) = op.attempts.last() {
            line.push_str(&format!(
                "  attempt {} {} {}",
                last.number,
                last.tx_id,
                last.outcome()
                    .as_str_name()
                    .trim_start_matches("ATTEMPT_OUTCOME_")
            ));
        }
        if let Some(result) = &op.result {
            line.push_str(&format!("  block {}", result.block_number));
        }
        if let Some(error) = &op.error {
            line.push_str(&format!("  {}: {}", error.reason, error.message));
        }
        outln!("{line}");
        Ok(())
    }

    pub(crate) fn reconcile(
        &self,
        op: &pb::Operation,
        report: &crate::reconcile::Report,
    ) -> Result<()> {
        if self.json {
            return self.print_json(&serde_json::json!({
                "opId": op.op_id,
                "storeState": state(op),
                "chain": report.facts.iter().map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone()))).collect::<serde_json::Map<_, _>>(),
                "attempts": report.attempts.iter().map(|(tx, seen)| serde_json::json!({"txId": tx, "onChain": seen})).collect::<Vec<_>>(),
                "verdict": report.verdict,
            }));
        }
        outln!("store     {} ({} attempts)", state(op), op.attempts.len());
        for (key, value) in &report.facts {
            outln!("chain     {key}: {value}");
        }
        let rows: Vec<Vec<String>> = report
            .attempts
            .iter()
            .map(|(tx, seen)| vec![tx.clone(), seen.clone()])
            .collect();
        table(&["TX", "ON CHAIN"], &rows);
        outln!("verdict   {}", report.verdict);
        Ok(())
    }
}

#[cfg(test)]
mod time_tests {
    use super::time;

    #[test]
    fn times_print_as_rfc3339_in_whole_seconds() {
        let at = |seconds, nanos| time(Some(&prost_types::Timestamp { seconds, nanos }));
        assert_eq!(at(0, 0), "1970-01-01T00:00:00Z");
        assert_eq!(at(951_782_400, 999_999_999), "2000-02-29T00:00:00Z");
        assert_eq!(at(1_764_654_599, 1), "2025-12-02T05:49:59Z");
        assert_eq!(time(None), "");
    }
}

#[cfg(test)]
mod gwei_tests {
    use super::gwei;

    #[test]
    fn fees_per_gas_print_in_gwei_without_trailing_zeros() {
        assert_eq!(gwei("3000000000"), "3 gwei");
        assert_eq!(gwei("1250000000"), "1.25 gwei");
        assert_eq!(gwei("7"), "0.000000007 gwei");
        assert_eq!(gwei("0"), "0 gwei");
        assert_eq!(gwei(""), "", "none recorded");
        assert_eq!(gwei("not a number"), "");
    }
}
