//! The invariants, checked from outside the processes against the chain and the store, after
//! every change of the chain, every settlement, and every few hundred steps:
//!
//! - every transaction of a signer key on the canonical chain (other than the outside
//!   sender's) is a recorded attempt of the operation that owns its nonce;
//! - at most one transaction carrying an operation's effect is on the canonical chain;
//! - CONFIRMED names a transaction of the operation in the canonical block it names;
//! - REJECTED and CANCELLED operations have none of their effect on chain, and their nonce is
//!   used on chain (so none ever can land);
//! - a nonce belongs to the operation that signed at it (none is orphaned);
//! - no operation has more fee bumps than allowed;
//! - at the end, every operation is terminal.

use crate::world::World;
use sigcast_domain::EvmAddress;
use sigcast_evm::Address;
use sigcast_proto::pb;
use sigcast_protocol::evm::nonce_of;
use sigcast_protocol::record::{self, reasons};
use sigcast_store::{accounts, operations};
use std::collections::HashMap;

const CHAIN: &str = "eip155:31337";

/// Checks every invariant; `end` adds the check that every operation is terminal.
pub(crate) fn check(world: &World, end: bool) {
    let ids = world.submitted.lock().unwrap().clone();
    let root = world.store.root().clone();
    let ops: HashMap<String, pb::Operation> = match world.store.read(|tx| {
        let mut ops = HashMap::new();
        for id in &ids {
            if let Some(op) = operations::get(tx, &root, id)? {
                ops.insert(id.clone(), op);
            }
        }
        Ok(ops)
    }) {
        Ok(ops) => ops,
        Err(error) => return world.violation(format!("the store cannot be read: {error}")),
    };
    if ops.len() != ids.len() {
        world.violation(format!(
            "{} operations accepted, {} in the store: one was lost",
            ids.len(),
            ops.len()
        ));
    }
    let foreign = world.foreign.lock().unwrap().clone();
    let mut effects: HashMap<String, Vec<String>> = HashMap::new();
    let mut used: HashMap<(Address, u64), String> = HashMap::new();
    // An address's text costs a Keccak hash: made once per account, not once per transaction.
    let mut names: HashMap<Address, String> = HashMap::new();
    {
        let chain = world.chain.lock().unwrap();
        for block in &chain.blocks {
            for tx in &block.txs {
                if !world.accounts.contains(&tx.from) {
                    continue;
                }
                used.insert((tx.from, tx.nonce), tx.hash.clone());
                if foreign.contains(&tx.hash) {
                    continue;
                }
                let account = names
                    .entry(tx.from)
                    .or_insert_with(|| EvmAddress::from(tx.from.0.0).to_string())
                    .clone();
                let owner = world
                    .store
                    .read(|t| accounts::nonce_owner(t, &root, CHAIN, &account, tx.nonce));
                let Ok(Some(owner)) = owner else {
                    world.violation(format!(
                        "{} of {account} at nonce {} landed in block {}, but no operation owns that nonce",
                        tx.hash, tx.nonce, block.number
                    ));
                    continue;
                };
                let attempt = ops.get(&owner).and_then(|op| {
                    op.attempts
                        .iter()
                        .find(|a| a.tx_id.eq_ignore_ascii_case(&tx.hash))
                });
                match attempt {
                    None => world.violation(format!(
                        "{} landed at nonce {} of {account}, none of the recorded attempts of its owner {owner}",
                        tx.hash, tx.nonce
                    )),
                    Some(a) if !record::reason_of(a).takes_the_nonce_instead() => {
                        effects.entry(owner).or_default().push(format!(
                            "{} (attempt {}) in block {}",
                            tx.hash, a.number, block.number
                        ));
                    }
                    Some(_) => {}
                }
            }
        }
        for (op_id, landed) in &effects {
            if landed.len() > 1 {
                world.violation(format!(
                    "AT MOST ONCE broken: {op_id} has {} transactions on chain: {landed:?}",
                    landed.len()
                ));
            }
        }
        for op in ops.values() {
            settled(world, &chain, op, &effects, &used);
        }
    }
    // Nonces: each owned by the operation that signed at it.
    let owners = world.store.read(|tx| {
        let (begin, end) = root.subspace(&("nonce_owner",)).range();
        tx.get_range(&begin, &end, usize::MAX, false)
    });
    if let Ok(owners) = owners {
        for (key, value) in owners {
            let Ok((_, _, account, nonce)) = root.unpack::<(String, String, String, u64)>(&key)
            else {
                continue;
            };
            let owner = String::from_utf8_lossy(&value).into_owned();
            let signed_at = ops.get(&owner).and_then(nonce_of);
            if signed_at != Some(nonce) {
                world.violation(format!(
                    "nonce {nonce} of {account} is allocated to {owner}, which signed at {signed_at:?}: orphaned"
                ));
            }
        }
    }
    for op in ops.values() {
        let bumps = op
            .attempts
            .iter()
            .filter(|a| a.reason == "fee_bump")
            .count() as u32;
        if bumps > crate::world::MAX_FEE_BUMPS {
            world.violation(format!("{} has {bumps} fee bumps", op.op_id));
        }
    }
    if end {
        let open: Vec<String> = ops
            .values()
            .filter(|op| {
                !matches!(
                    op.state(),
                    pb::OperationState::Confirmed
                        | pb::OperationState::Rejected
                        | pb::OperationState::Cancelled
                )
            })
            .map(|op| {
                // Where it waits: its nonce, the chain's count of its account, and the nonces of
                // the account the pool holds (a gap below its nonce holds it up).
                let account: Option<Address> = op.account.parse().ok();
                let (chain_nonce, pooled) = account.map_or((0, Vec::new()), |a| {
                    let chain = world.chain.lock().unwrap();
                    let mut pooled: Vec<u64> = chain
                        .pool
                        .keys()
                        .filter(|(from, _)| *from == a)
                        .map(|(_, n)| *n)
                        .collect();
                    pooled.sort();
                    (chain.nonce(&a), pooled)
                });
                format!(
                    "{} {:?} ({} attempts, nonce {:?}, account at {chain_nonce}, pool {pooled:?})",
                    op.op_id,
                    op.state(),
                    op.attempts.len(),
                    nonce_of(op)
                )
            })
            .collect();
        if !open.is_empty() || ids.len() < world.settings.ops {
            world.violation(format!(
                "not terminal once the faults stopped: {open:?} ({} of {} submitted)",
                ids.len(),
                world.settings.ops
            ));
        }
    }
}

/// A terminal operation's state against the chain.
fn settled(
    world: &World,
    chain: &crate::chain::Chain,
    op: &pb::Operation,
    effects: &HashMap<String, Vec<String>>,
    used: &HashMap<(Address, u64), String>,
) {
    let landed = effects.get(&op.op_id);
    match op.state() {
        pb::OperationState::Confirmed => {
            let Some(result) = &op.result else {
                return world.violation(format!("CONFIRMED {} without a result", op.op_id));
            };
            let canonical = chain
                .blocks
                .get(result.block_number as usize)
                .filter(|b| b.hash == result.block_hash)
                .is_some_and(|b| b.txs.iter().any(|t| t.hash == result.tx_id));
            if !canonical {
                world.violation(format!(
                    "CONFIRMED {} names {} in block {} ({}), which is not on the canonical chain",
                    op.op_id, result.tx_id, result.block_number, result.block_hash
                ));
            }
        }
        pb::OperationState::Rejected | pb::OperationState::Cancelled => {
            if let Some(landed) = landed {
                world.violation(format!(
                    "{:?} {} has its effect on chain: {landed:?} ({:?})",
                    op.state(),
                    op.op_id,
                    op.error
                ));
            }
            let refused_by_signer = op
                .error
                .as_ref()
                .is_some_and(|e| e.reason == reasons::SIGNER_REFUSED);
            if let (Some(nonce), false) = (nonce_of(op), refused_by_signer) {
                let account: Address = op.account.parse().expect("an EVM account");
                if !used.contains_key(&(account, nonce)) {
                    world.violation(format!(
                        "{:?} {} while its nonce {nonce} is still free: its transactions can still land ({:?})",
                        op.state(),
                        op.op_id,
                        op.error
                    ));
                }
            }
        }
        _ => {}
    }
}
