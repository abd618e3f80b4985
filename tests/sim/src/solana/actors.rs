//! The simulated Solana processes, as the product runs them: the broadcaster reads its work
//! from the store, reads each endpoint's view with the product's reader, calls `decide`, and
//! applies the action with the record functions under the worker's guards; the signer plans
//! a lifetime (a free durable-nonce account of the key, else a recent blockhash), re-checks a
//! re-sign's proof from its own endpoint with the product's `lifetime`, and signs with the
//! product's signing body.

use super::{CLUSTER, SolWorld, b58};
use crate::actors::{Load, SignJob, apply, ask_signer, list_work, serve_signs, settle, submit_all};
use crate::exec::{sleep, system_time, yield_now};
use crate::world::Tamper;
use base64::Engine;
use rand::Rng;
use rand::rngs::StdRng;
use serde_json::json;
use sigcast_domain::{AttemptReason, Intent, Lamports, OpId, SolanaPubkey, SolanaTransfer};
use sigcast_jsonrpc::{Endpoint, PassCache};
use sigcast_proto::sigcast::signer::v1::SignPurpose;
use sigcast_proto::{intent_from_proto, new_operation, pb};
use sigcast_protocol::solana::{Lifetime, signing_of, uses_durable_nonce};
use sigcast_protocol::{Action, Evidence, Replacement, SolanaView, decide, record};
use sigcast_signer::keys::Ed25519Handle;
use sigcast_signer::{SolanaAttempt, sign_solana_attempt};
use sigcast_store::accounts;
use sigcast_store::operations::{self, Guard};
use std::rc::Rc;
use std::sync::Arc;

const CHAIN: &str = "solana:sim";
/// The priority fee of a first signature, in micro-lamports per compute unit.
const BASE_PRICE: u64 = 1_000;

/// What a broadcaster asks of the signer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Purpose {
    Initial,
    Resign,
    Cancel,
}

/// The client side: registers the keys' durable-nonce accounts, then submits transfers,
/// replays some, conflicts on purpose, cancels some.
pub(crate) async fn gateway(world: Rc<SolWorld>, rng: StdRng) {
    let root = world.store.root().clone();
    for (account, key) in &world.nonce_accounts {
        let (authority, account) = (b58(&world.accounts[*key]), b58(account));
        let registered = world
            .store
            .run(|tx| accounts::register_nonce_account(tx, &root, CLUSTER, &authority, &account))
            .await;
        world.trace(format!(
            "gateway: nonce account {account} of {authority}: {registered:?}"
        ));
    }
    let load = Load {
        ops: world.settings.ops,
        accounts: world.accounts.len(),
        submit_spread_ms: world.settings.submit_spread_ms,
        cancel_rate: world.settings.cancel_rate,
    };
    let make = {
        let world = world.clone();
        move |op_id: &str, account: usize, lamports: u64| {
            let intent = Intent::SolanaTransfer(SolanaTransfer {
                cluster: CLUSTER.into(),
                from: SolanaPubkey::from(world.accounts[account]),
                to: SolanaPubkey::from([0xbe; 32]),
                lamports: Lamports(lamports),
            });
            new_operation(&OpId::parse(op_id).expect("a valid op_id"), &intent)
        }
    };
    submit_all(world, load, make, rng).await;
}

/// One signer replica: takes jobs from the shared queue, one at a time.
pub(crate) async fn signer(world: Rc<SolWorld>, name: String, mut rng: StdRng) {
    serve_signs(&world, &world.sign_jobs, &name, async |job| {
        sign_one(&world, job, &mut rng).await
    })
    .await;
}

fn pubkey(text: &str) -> Option<[u8; 32]> {
    bs58::decode(text).into_vec().ok()?.try_into().ok()
}

/// A view of one endpoint, read with the product's reader through `endpoint` (the pass's
/// cache of `raw`, or `raw` itself), and, broken on purpose, trusted beyond what it proves.
async fn read_view(
    world: &SolWorld,
    endpoint: &impl Endpoint,
    raw: &super::endpoint::SolEndpoint,
    signatures: &[String],
    nonce_account: Option<&[u8; 32]>,
) -> SolanaView {
    // Broken on purpose: the first slot kept as read before everything else (the product reads
    // it last).
    let read_first = match world.settings.tamper {
        Tamper::HistoryReadFirst => {
            let mut first = None;
            for method in ["minimumLedgerSlot", "getFirstAvailableBlock"] {
                if let Some(slot) = endpoint
                    .request(method, json!([]))
                    .await
                    .ok()
                    .and_then(|s| s.as_u64())
                {
                    first = Some(first.map_or(slot, |f: u64| f.max(slot)));
                }
            }
            Some(first)
        }
        _ => None,
    };
    let mut view = sigcast_solana::evidence::read_view(endpoint, signatures, nonce_account).await;
    if let Some(first) = read_first {
        view.first_available_slot = first;
    }
    match world.settings.tamper {
        Tamper::TrustPrunedHistory => view.first_available_slot = Some(0),
        Tamper::IgnoreStatusesSlot => view.statuses_slot = Some(u64::MAX),
        // The nonce read as if at the statuses' slot: past any signing slot, and not past the
        // statuses (whose own check is not what this breaks).
        Tamper::IgnoreNonceSlot => {
            view.nonce_slot = view.nonce_slot.and(view.statuses_slot.or(Some(u64::MAX)))
        }
        Tamper::ShortStatuses if view.statuses.is_none() => {
            // The list as answered, the missing entries read as "unknown". Asked of the node
            // itself: the pass's cache refuses a list that does not hold one entry per
            // signature before any view reads it.
            let answer = raw
                .request(
                    "getSignatureStatuses",
                    json!([signatures, { "searchTransactionHistory": true }]),
                )
                .await;
            if let Ok(answer) = answer {
                let entries = answer["value"].as_array().map_or(0, Vec::len);
                if let Some(mut statuses) =
                    sigcast_solana::evidence::parse_statuses(&answer, entries)
                {
                    statuses.resize(signatures.len(), None);
                    view.statuses = Some(statuses);
                    view.statuses_slot = answer["context"]["slot"].as_u64();
                }
            }
        }
        _ => {}
    }
    view
}

/// Where an attempt's lifetime comes from, read from one endpoint.
enum Plan {
    Blockhash {
        hash: [u8; 32],
        last_valid: u64,
        slot: u64,
    },
    Nonce {
        account: [u8; 32],
        value: [u8; 32],
        slot: u64,
    },
}

async fn plan(
    world: &SolWorld,
    op: &pb::Operation,
    endpoint: &super::endpoint::SolEndpoint,
    number: u32,
) -> Result<Plan, String> {
    let root = world.store.root().clone();
    let held = signing_of(op)
        .filter(|s| uses_durable_nonce(s))
        .map(|s| s.nonce_account.clone());
    let account = match held {
        Some(account) => Some(account),
        None => {
            // A registered nonce account of the key whose holder is done, as the signer picks.
            let authority = op.account.clone();
            let op_id = op.op_id.clone();
            let (registered, free) = world
                .store
                .read(|tx| {
                    let registered = accounts::nonce_accounts(tx, &root, CLUSTER, &authority)?;
                    for account in &registered {
                        let holder = accounts::nonce_holder(tx, &root, CLUSTER, account)?;
                        let done = match holder {
                            None => true,
                            Some(h) if h == op_id => true,
                            Some(h) => operations::get(tx, &root, &h)?
                                .and_then(|o| sigcast_proto::state_from_proto(o.state()))
                                .is_none_or(sigcast_domain::OperationState::is_terminal),
                        };
                        if done {
                            return Ok((registered.len(), Some(account.clone())));
                        }
                    }
                    Ok((registered.len(), None))
                })
                .map_err(|e| e.to_string())?;
            match (registered, free) {
                (0, _) => None,
                (_, Some(account)) => Some(account),
                (_, None) => return Err("every nonce account of the key is held".into()),
            }
        }
    };
    let Some(account) = account else {
        let latest = endpoint
            .request("getLatestBlockhash", json!([{ "commitment": "confirmed" }]))
            .await
            .map_err(|e| e.to_string())?;
        let hash = latest["value"]["blockhash"]
            .as_str()
            .and_then(pubkey)
            .ok_or("no blockhash")?;
        return Ok(Plan::Blockhash {
            hash,
            last_valid: latest["value"]["lastValidBlockHeight"]
                .as_u64()
                .ok_or("no last valid height")?,
            slot: latest["context"]["slot"].as_u64().ok_or("no slot")?,
        });
    };
    let bytes = pubkey(&account).ok_or("not a nonce account")?;
    let info = endpoint
        .request(
            "getAccountInfo",
            json!([account, { "encoding": "base64", "commitment": "confirmed" }]),
        )
        .await
        .map_err(|e| e.to_string())?;
    let data = info["value"]["data"][0]
        .as_str()
        .and_then(|d| base64::engine::general_purpose::STANDARD.decode(d).ok())
        .ok_or("nonce account unreadable")?;
    let state = sigcast_solana::parse_nonce_account(&data).ok_or("not an initialized nonce")?;
    if number > 1 && signing_of(op).is_some_and(|s| s.blockhash == b58(&state.value)) {
        return Err("the endpoint still shows the consumed nonce value".into());
    }
    Ok(Plan::Nonce {
        account: bytes,
        value: state.value,
        slot: info["context"]["slot"].as_u64().ok_or("no slot")?,
    })
}

async fn sign_one(
    world: &SolWorld,
    job: &SignJob<Purpose>,
    rng: &mut StdRng,
) -> Result<u32, String> {
    let root = world.store.root().clone();
    let op = world
        .store
        .read(|tx| operations::get(tx, &root, &job.op_id))
        .map_err(|e| e.to_string())?
        .ok_or("not recorded")?;
    let rules = sigcast_domain::IntentRules {
        solana_clusters: [CLUSTER.to_owned()].into(),
        ..Default::default()
    };
    let intent = intent_from_proto("intent", op.intent.as_ref(), Some(&rules))
        .map_err(|v| format!("{v:?}"))?;
    let Intent::SolanaTransfer(transfer) = &intent else {
        return Err("only Solana transfers are simulated".into());
    };
    let index = world
        .accounts
        .iter()
        .position(|a| a == transfer.from.as_bytes())
        .ok_or("no key")?;
    let key = Ed25519Handle::Keystore(Arc::new(world.keys[index].clone()));
    let endpoint = &world.endpoints[rng.gen_range(0..world.endpoints.len())];
    let newest = op.attempts.last();
    let (number, message, signing, purpose, reason) = match job.purpose {
        Purpose::Initial => {
            if op.state() != pb::OperationState::Received {
                return newest.map(|a| a.number).ok_or("not received".into());
            }
            let (message, signing) = lifetime_message(world, &op, transfer, endpoint, 1).await?;
            (
                1,
                message,
                signing,
                SignPurpose::Initial,
                AttemptReason::Initial,
            )
        }
        Purpose::Resign => {
            let last = newest.ok_or("no attempt")?;
            if last.number != job.replaces {
                return Ok(last.number);
            }
            if op.state() != pb::OperationState::Sent || signing_of(&op).is_none() {
                return Err("only a sent Solana operation is re-signed".into());
            }
            if op
                .attempts
                .iter()
                .any(|a| record::reason_of(a) == AttemptReason::Cancel)
            {
                return Err("a cancel was signed; it is not re-signed".into());
            }
            // The broadcaster's proof, read again from this signer's own endpoint.
            let signatures: Vec<String> = op.attempts.iter().map(|a| a.tx_id.clone()).collect();
            let nonce_account = signing_of(&op)
                .filter(|s| uses_durable_nonce(s))
                .and_then(|s| pubkey(&s.nonce_account));
            let view = read_view(
                world,
                endpoint,
                endpoint,
                &signatures,
                nonce_account.as_ref(),
            )
            .await;
            match sigcast_protocol::solana::lifetime(&op, &view, system_time()) {
                Lifetime::Over(_) => {}
                other => return Err(format!("not proven over: {other:?}")),
            }
            let number = job.replaces + 1;
            let (message, signing) =
                lifetime_message(world, &op, transfer, endpoint, number).await?;
            (
                number,
                message,
                signing,
                SignPurpose::Resign,
                AttemptReason::Resign,
            )
        }
        Purpose::Cancel => {
            if !matches!(
                op.state(),
                pb::OperationState::Signed | pb::OperationState::Sent
            ) {
                return Err("only a signed or sent operation is cancelled on chain".into());
            }
            if let Some(done) = op
                .attempts
                .iter()
                .find(|a| record::reason_of(a) == AttemptReason::Cancel)
            {
                return Ok(done.number);
            }
            let last = newest.ok_or("no attempt")?;
            if last.number != job.replaces {
                return Ok(last.number);
            }
            let signing = signing_of(&op).ok_or("not signed")?.clone();
            let (Some(account), Some(value)) =
                (pubkey(&signing.nonce_account), pubkey(&signing.blockhash))
            else {
                return Err("a blockhash operation is cancelled by its expiry".into());
            };
            let message =
                sigcast_solana::advance_nonce_message(account, world.accounts[index], value);
            (
                job.replaces + 1,
                message,
                signing,
                SignPurpose::Cancel,
                AttemptReason::Cancel,
            )
        }
    };
    let attempt = SolanaAttempt {
        root,
        op_id: job.op_id.clone(),
        caller: "sim".into(),
        now: system_time(),
        intent: intent.clone(),
        window: Vec::new(),
        message,
        signing,
        number,
        purpose,
        reason: reason.as_str(),
        keys: vec![key],
    };
    match world
        .store
        .run_or_refuse(|tx| sign_solana_attempt(tx, &attempt))
        .await
    {
        Ok(Ok(signed)) => Ok(signed.attempt),
        Ok(Err(refusal)) => Err(refusal.to_string()),
        Err(error) => Err(error.to_string()),
    }
}

/// The transfer's message over a lifetime planned from `endpoint`, and how the operation
/// records that lifetime.
async fn lifetime_message(
    world: &SolWorld,
    op: &pb::Operation,
    transfer: &SolanaTransfer,
    endpoint: &super::endpoint::SolEndpoint,
    number: u32,
) -> Result<(sigcast_solana::Message, pb::SolanaSigning), String> {
    let authority = *transfer.from.as_bytes();
    let price = BASE_PRICE * u64::from(number);
    Ok(match plan(world, op, endpoint, number).await? {
        Plan::Blockhash {
            hash,
            last_valid,
            slot,
        } => (
            sigcast_solana::transfer_message(
                transfer,
                &sigcast_solana::Lifetime::Blockhash(hash),
                price,
            ),
            pb::SolanaSigning {
                blockhash: b58(&hash),
                last_valid_block_height: last_valid,
                nonce_account: String::new(),
                signing_slot: slot,
            },
        ),
        Plan::Nonce {
            account,
            value,
            slot,
        } => (
            sigcast_solana::transfer_message(
                transfer,
                &sigcast_solana::Lifetime::DurableNonce {
                    account,
                    authority,
                    value,
                },
                price,
            ),
            pb::SolanaSigning {
                blockhash: b58(&value),
                last_valid_block_height: 0,
                nonce_account: b58(&account),
                signing_slot: slot,
            },
        ),
    })
}

/// One broadcaster replica: the worker's passes, one operation at a time.
pub(crate) async fn broadcaster(world: Rc<SolWorld>, name: String, mut rng: StdRng) {
    let work = sigcast_store::work::WorkList::default();
    loop {
        sleep(200).await;
        for state in [
            pb::OperationState::Received,
            pb::OperationState::Signed,
            pb::OperationState::Sent,
        ] {
            // Each endpoint read through one cache for the stage, as the worker's checks read
            // them.
            let caches: Vec<_> = world
                .endpoints
                .iter()
                .map(|endpoint| PassCache::with_clock(endpoint, crate::exec::instant))
                .collect();
            let ops = list_work(&world, &work, CHAIN, state, world.settings.tamper);
            yield_now().await;
            for op in ops {
                work_on(&world, &name, op, &caches, &mut rng).await;
            }
        }
    }
}

async fn work_on(
    world: &Rc<SolWorld>,
    name: &str,
    op: pb::Operation,
    caches: &[PassCache<&super::endpoint::SolEndpoint>],
    rng: &mut StdRng,
) {
    let mut views = Vec::new();
    let mut action = decide(&op, &Evidence::None, system_time(), &world.rules);
    if matches!(action, Action::ReadMore(_)) {
        let signatures: Vec<String> = op.attempts.iter().map(|a| a.tx_id.clone()).collect();
        let nonce_account = signing_of(&op)
            .filter(|s| uses_durable_nonce(s))
            .and_then(|s| pubkey(&s.nonce_account));
        let mut order: Vec<usize> = (0..world.endpoints.len()).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, rng.gen_range(0..=i));
        }
        for index in order {
            if !matches!(action, Action::ReadMore(_)) {
                break;
            }
            let (cache, raw) = (&caches[index], &world.endpoints[index]);
            views.push(read_view(world, cache, raw, &signatures, nonce_account.as_ref()).await);
            action = decide(
                &op,
                &Evidence::Solana(views.clone()),
                system_time(),
                &world.rules,
            );
        }
    }
    if world.settings.tamper == Tamper::CancelResends
        && matches!(
            action,
            Action::Wait(sigcast_protocol::Why::CancelPendingExpiry)
        )
        && let Some(newest) = op.attempts.last()
    {
        action = Action::Send(newest.number);
    }
    match &action {
        Action::Wait(_) | Action::ReadMore(_) => return,
        _ => world.trace(format!(
            "{name}: {} rev {} {:?} → {}{}",
            op.op_id,
            op.revision,
            op.state(),
            action.name(),
            match &action {
                Action::Settle(s) => s.evidence.as_ref().map_or(String::new(), |e| format!(
                    " on {} (head {}, last valid {}, history from slot {}, signed at slot {}, nonce {:?}, {} in slot {})",
                    e.endpoint, e.head, e.last_valid_block_height, e.first_available_slot,
                    e.signing_slot, e.nonce_value, e.tx_id, e.block_number
                )),
                Action::Resign(e) => format!(
                    " on {} (head {}, last valid {}, history from slot {}, signed at slot {})",
                    e.endpoint, e.head, e.last_valid_block_height, e.first_available_slot,
                    e.signing_slot
                ),
                _ => String::new(),
            }
        )),
    }
    let newest = op.attempts.last().map_or(0, |a| a.number);
    match action {
        Action::Wait(_) | Action::ReadMore(_) => {}
        Action::Sign => {
            let answer = ask_signer(&world.sign_jobs, &op.op_id, Purpose::Initial, 0).await;
            world.trace(format!("{name}: {} signed: {answer:?}", op.op_id));
        }
        Action::Send(attempt) => {
            let at = system_time();
            let guard = Guard::Revision(op.revision);
            if let Some(sending) = apply(world, name, &op.op_id, guard, move |o| {
                record::record_sending(o, attempt, at)
            })
            .await
            {
                send(world, name, &sending, attempt, rng).await;
            }
        }
        Action::Resign(_) | Action::Replace(Replacement::Cancel) => {
            let purpose = if matches!(action, Action::Resign(_)) {
                Purpose::Resign
            } else {
                Purpose::Cancel
            };
            match ask_signer(&world.sign_jobs, &op.op_id, purpose, newest).await {
                Ok(attempt) if attempt != newest => {
                    let at = system_time();
                    if let Some(sending) =
                        apply(world, name, &op.op_id, Guard::NotTerminal, move |o| {
                            record::record_sending_new(o, attempt, at)
                        })
                        .await
                    {
                        send(world, name, &sending, attempt, rng).await;
                    }
                }
                other => world.trace(format!("{name}: {} {purpose:?}: {other:?}", op.op_id)),
            }
        }
        Action::Replace(other) => {
            world.violation(format!(
                "{}: {other:?} decided for a Solana operation",
                op.op_id
            ));
        }
        Action::Settle(settlement) => {
            settle(world, name, &op, Guard::Revision(op.revision), settlement).await;
        }
    }
}

/// Sends an attempt's stored bytes to one endpoint and records what it answered. `op` is the
/// record that says it is being sent.
async fn send(
    world: &Rc<SolWorld>,
    name: &str,
    op: &pb::Operation,
    attempt: u32,
    rng: &mut StdRng,
) {
    let op_id = op.op_id.as_str();
    let root = world.store.root().clone();
    let Ok(Some(raw)) = world
        .store
        .read(|tx| accounts::payload(tx, &root, op_id, attempt))
    else {
        world.violation(format!(
            "{op_id} attempt {attempt}: no stored payload to send"
        ));
        return;
    };
    let reason = op
        .attempts
        .iter()
        .find(|a| a.number == attempt)
        .map(record::reason_of);
    if op.cancel_requested && reason != Some(AttemptReason::Cancel) {
        world.violation(format!(
            "{op_id} attempt {attempt} sent after its cancel was accepted"
        ));
    }
    world.same_bytes(op_id, attempt, &raw);
    world.nonce_used(op_id, &raw);
    let endpoint = &world.endpoints[rng.gen_range(0..world.endpoints.len())];
    let answer = endpoint
        .request(
            "sendTransaction",
            json!([
                base64::engine::general_purpose::STANDARD.encode(&raw),
                { "encoding": "base64", "skipPreflight": true, "maxRetries": 0 }
            ]),
        )
        .await;
    let outcome = sigcast_solana::send_outcome(&answer);
    world.trace(format!(
        "{name}: {op_id} attempt {attempt} sent to {} → {outcome:?}",
        endpoint.label()
    ));
    let at = system_time();
    let label = endpoint.label().to_owned();
    apply(world, name, &op.op_id, Guard::NotTerminal, move |o| {
        record::record_outcome(o, attempt, &label, &outcome, at);
        true
    })
    .await;
}

impl SolWorld {
    /// Notes which operation signed over a nonce account's value: two operations never both
    /// have a transaction over a value the account still holds (one that can land). A value
    /// already consumed when read (a lagging endpoint) only costs the operation a re-sign.
    pub(crate) fn nonce_used(&self, op_id: &str, raw: &[u8]) {
        let Some(tx) = super::endpoint::decode(raw, true) else {
            self.violation(format!(
                "{op_id}: a stored payload does not decode or verify"
            ));
            return;
        };
        let Some(account) = tx.nonce_account else {
            return;
        };
        let current =
            self.cluster.lock().unwrap().tip().nonces.get(&account) == Some(&tx.blockhash);
        let mut users = self.nonce_users.lock().unwrap();
        let user = users
            .entry((account, tx.blockhash))
            .or_insert_with(|| op_id.to_owned());
        if user != op_id && current {
            let user = user.clone();
            drop(users);
            self.violation(format!(
                "{op_id} and {user} both signed over nonce account {} at the value it holds",
                b58(&account)
            ));
        }
    }
}
