//! The Solana invariants, checked against the cluster's fork and the store: at most one of an
//! operation's transactions ever lands; CONFIRMED names the one that landed, in its slot;
//! CANCELLED (or REJECTED) has nothing of it landed that moved lamports, and none of its
//! transactions can still land; nothing accepted is missing; once the faults stop, every
//! operation is terminal within the bound.

use super::{SolWorld, endpoint::decode};
use sigcast_proto::pb;
use sigcast_store::{accounts, operations};

pub(crate) fn check(world: &SolWorld, end: bool) {
    let root = world.store.root().clone();
    let ids = world.submitted.lock().unwrap().clone();
    let Ok(ops) = world.store.read(|tx| {
        let mut ops = Vec::new();
        for id in &ids {
            let op = operations::get(tx, &root, id)?;
            let payloads = match &op {
                Some(op) => op
                    .attempts
                    .iter()
                    .map(|a| accounts::payload(tx, &root, id, a.number))
                    .collect::<Result<Vec<_>, _>>()?,
                None => Vec::new(),
            };
            ops.push((id.clone(), op, payloads));
        }
        Ok(ops)
    }) else {
        return;
    };
    let cluster = world.cluster.lock().unwrap();
    let mut unfinished = Vec::new();
    for (id, op, payloads) in ops {
        let Some(op) = op else {
            world.violation(format!("{id} was accepted and is missing from the store"));
            continue;
        };
        let landed: Vec<(&pb::Attempt, u64, Option<String>)> = op
            .attempts
            .iter()
            .filter_map(|a| cluster.landed(&a.tx_id).map(|(slot, err)| (a, slot, err)))
            .collect();
        if landed.len() > 1 {
            let list: Vec<String> = landed
                .iter()
                .map(|(a, slot, _)| format!("attempt {} in slot {slot}", a.number))
                .collect();
            world.violation(format!(
                "{id} has {} transactions on chain: {}",
                landed.len(),
                list.join(", ")
            ));
        }
        match op.state() {
            pb::OperationState::Confirmed => {
                let Some(result) = &op.result else {
                    world.violation(format!("CONFIRMED {id} names no transaction"));
                    continue;
                };
                let named = op.attempts.iter().find(|a| a.tx_id == result.tx_id);
                if named.is_none_or(|a| {
                    sigcast_protocol::record::reason_of(a) == sigcast_domain::AttemptReason::Cancel
                }) {
                    world.violation(format!(
                        "CONFIRMED {id} names {}, not one of its transfers",
                        result.tx_id
                    ));
                }
                match cluster.landed(&result.tx_id) {
                    Some((slot, _)) if slot == result.block_number => {}
                    other => world.violation(format!(
                        "CONFIRMED {id} names {} in slot {}, but the cluster shows {other:?}",
                        result.tx_id, result.block_number
                    )),
                }
            }
            pb::OperationState::Cancelled | pb::OperationState::Rejected => {
                let state = op.state().as_str_name();
                for (attempt, slot, _) in &landed {
                    // A transfer that landed and failed still landed: nothing else of it may.
                    let Some(tx) = decode_payload(&payloads, attempt.number) else {
                        world.violation(format!(
                            "{state} {id}: attempt {} landed and its payload is not stored",
                            attempt.number
                        ));
                        continue;
                    };
                    if tx.transfers {
                        world.violation(format!(
                            "{state} {id} has attempt {} on chain (slot {})",
                            attempt.number, slot
                        ));
                    }
                }
                // Bytes that never left the store cannot land.
                for attempt in op.attempts.iter().filter(|a| world.was_sent(&id, a.number)) {
                    if let Some(tx) = decode_payload(&payloads, attempt.number)
                        && tx.transfers
                        && cluster.could_land(&tx)
                    {
                        world.violation(format!(
                            "{state} {id}: attempt {} can still land",
                            attempt.number
                        ));
                    }
                }
            }
            state => unfinished.push(format!(
                "{id} {state:?} ({} attempts, {})",
                op.attempts.len(),
                sigcast_protocol::solana::signing_of(&op).map_or(String::new(), |s| {
                    if s.nonce_account.is_empty() {
                        format!("last valid height {}", s.last_valid_block_height)
                    } else {
                        format!("nonce account {}", s.nonce_account)
                    }
                })
            )),
        }
    }
    if end && !world.faulty() && !unfinished.is_empty() {
        world.violation(format!(
            "not terminal {} ms after the faults ended (tip height {}): {}",
            world.settings.settle_ms,
            cluster.tip().height,
            unfinished.join("; ")
        ));
    }
}

fn decode_payload(payloads: &[Option<Vec<u8>>], number: u32) -> Option<super::cluster::SolTx> {
    payloads
        .get(usize::try_from(number).ok()?.checked_sub(1)?)?
        .as_deref()
        .and_then(|wire| decode(wire, false))
}
