//! Solana signing: a recent blockhash, or — for a key with durable-nonce accounts registered —
//! a nonce account held by one operation at a time.
//!
//! A new signature for an operation is made only on proof, read by the signer itself from one
//! of its endpoints, that none of its earlier transactions can land: past every attempt's last
//! valid block height (blockhash), or the nonce account advanced past the value they carry
//! (durable nonce), and in both cases no status for any of their signatures.

use super::{Signed, Signer, already_signed, unix_millis};
use crate::error::{Error, Result};
use prost::Message;
use sigcast_domain::Intent;
use sigcast_domain::OperationState;
use sigcast_domain::policy::{KeyPolicy, check_co_signers, lamports_moved, policy_for};
use sigcast_evm::U256;
use sigcast_proto::sigcast::signer::v1::{AuditRecord, SignPurpose};
use sigcast_proto::{pb, state_from_proto, state_to_proto};
use sigcast_solana::{Lifetime, SolanaRpc};
use sigcast_store::{accounts, operations};

/// Attempt reason of the transaction that only advances the nonce.
const CANCEL: &str = "cancel";
/// Attempt reason of a new signature after proven expiry.
const RESIGN: &str = "resign";

/// How an attempt is bound in time, before it is signed.
enum Plan {
    /// A recent blockhash, its last valid block height, and the slot it was read at.
    Blockhash(sigcast_solana::LatestBlockhash),
    /// A durable nonce account of the operation's key, its current value, and the slot it
    /// was read at.
    Nonce {
        account: [u8; 32],
        value: [u8; 32],
        slot: u64,
    },
}

/// A cluster's priority fee per compute unit: each re-sign raises it, up to a cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PriorityFee {
    /// What the first attempt pays, in micro-lamports.
    base: u64,
    /// The most any attempt pays.
    max: u64,
}

impl PriorityFee {
    /// A re-sign pays more than the attempt it follows, so that a transaction left out for
    /// its fee gets in; 10 times the base at most unless configured.
    pub(crate) fn of(cluster: &crate::config::SolanaClusterConfig) -> Self {
        let base = cluster.compute_unit_price_micro_lamports;
        Self {
            base,
            max: cluster
                .max_compute_unit_price_micro_lamports
                .unwrap_or(base.saturating_mul(10)),
        }
    }

    /// What attempt `number` (from 1) pays: `number` times the base, at most the cap.
    pub(crate) fn for_attempt(self, number: u32) -> u64 {
        self.base.saturating_mul(u64::from(number)).min(self.max)
    }
}

fn b58(bytes: &[u8]) -> String {
    bs58::encode(bytes).into_string()
}

fn pubkey(text: &str) -> Option<[u8; 32]> {
    bs58::decode(text).into_vec().ok()?.try_into().ok()
}

impl Signer {
    /// Signs a recorded Solana operation: reads its lifetime (a recent blockhash at
    /// `confirmed`, or the value of a free durable-nonce account of its key), then in one store
    /// transaction builds the message, signs it with every key it needs, and persists it.
    pub(super) async fn sign_solana(&self, op: pb::Operation, caller: &str) -> Result<Signed> {
        self.solana_attempt(op, 1, caller).await
    }

    fn solana_rpc(&self, op: &pb::Operation) -> Result<&SolanaRpc> {
        let cluster = op.chain.trim_start_matches("solana:");
        self.solana
            .get(cluster)
            .map(|(rpc, _, _)| rpc)
            .ok_or_else(|| Error::UnknownChain {
                op_id: op.op_id.clone(),
                chain: op.chain.clone(),
            })
    }

    async fn read_op(&self, op_id: &str) -> Result<pb::Operation> {
        let root = self.store.root().clone();
        let id = op_id.to_owned();
        self.store
            .read_async(move |tx| operations::get(tx, &root, &id))
            .await?
            .ok_or_else(|| Error::NotFound(op_id.to_owned()))
    }

    /// Signs a Solana operation again (a fresh blockhash, or the nonce's new value) — only
    /// after checking, from one of its own endpoints, what the broadcaster claims: no attempt
    /// can land any more, and none has.
    pub async fn resign_solana(
        &self,
        op_id: &str,
        replaces_attempt: u32,
        caller: &str,
    ) -> Result<Signed> {
        let op = self.read_op(op_id).await?;
        let not_signable = |why: &str| Error::NotSignable {
            op_id: op_id.to_owned(),
            state: format!("{} ({why})", op.state().as_str_name()),
        };
        let Some(last) = op.attempts.last() else {
            return Err(not_signable("no attempt"));
        };
        if last.number != replaces_attempt {
            return Ok(Signed {
                tx_id: last.tx_id.clone(),
                attempt: last.number,
                already_signed: true,
            });
        }
        let (Some(pb::operation::Signing::Solana(signing)), pb::OperationState::Sent) =
            (&op.signing, op.state())
        else {
            return Err(not_signable("only a sent Solana operation is re-signed"));
        };
        if op.attempts.iter().any(|a| a.reason == CANCEL) {
            return Err(not_signable("a cancel was signed; it is not re-signed"));
        }
        if op.cancel_requested {
            return Err(cancel_asked(&op));
        }
        let rpc = self.solana_rpc(&op)?;
        let signatures: Vec<String> = op.attempts.iter().map(|a| a.tx_id.clone()).collect();
        let nonce_account = pubkey(&signing.nonce_account);
        // The same proof the broadcaster decides on, read again here from the signer's own
        // endpoints: one of them must show it whole.
        let mut refusal = sigcast_protocol::Why::Unread;
        let mut proven = false;
        for endpoint in rpc.ranked_endpoints() {
            // An endpoint of another cluster shows none of our attempts and their blockhash
            // expired: never a proof.
            if !rpc.serves_cluster(&endpoint).await {
                continue;
            }
            let view =
                sigcast_solana::evidence::read_view(&endpoint, &signatures, nonce_account.as_ref())
                    .await;
            match sigcast_protocol::solana::lifetime(&op, &view, self.clock.now()) {
                sigcast_protocol::solana::Lifetime::Over(_) => {
                    proven = true;
                    break;
                }
                sigcast_protocol::solana::Lifetime::Valid => {
                    refusal = sigcast_protocol::Why::InFlight(self.clock.now());
                }
                sigcast_protocol::solana::Lifetime::Unknown(why) => refusal = why,
            }
        }
        if !proven {
            let why = match refusal {
                sigcast_protocol::Why::InFlight(_) => {
                    "an attempt landed or can still land, as an endpoint shows".to_owned()
                }
                other => format!("no endpoint proves that no attempt can land: {other}"),
            };
            return Err(not_signable(&why));
        }
        self.solana_attempt(op.clone(), replaces_attempt + 1, caller)
            .await
    }

    /// The lifetime of attempt `number`: the nonce account the operation already holds, or a
    /// free one of its key, or — for a key without nonce accounts — a recent blockhash.
    async fn plan(&self, op: &pb::Operation, rpc: &SolanaRpc, number: u32) -> Result<Plan> {
        let op_id = op.op_id.clone();
        let chain_error = |source| Error::Chain {
            op_id: op_id.clone(),
            source,
        };
        let held = match &op.signing {
            Some(pb::operation::Signing::Solana(s)) if !s.nonce_account.is_empty() => {
                Some((s.nonce_account.clone(), s.blockhash.clone()))
            }
            _ => None,
        };
        let accounts = match held {
            Some((account, _)) => Some(vec![account]),
            None => self.free_nonce_accounts(op).await?,
        };
        let Some(accounts) = accounts else {
            // A first signature's is read at most once a second for all the signatures of the
            // cluster: its slot is then up to a second before this signature, which only asks
            // an endpoint's history to reach further back before "never landed" is believed.
            // A re-sign, which follows proof that the last blockhash expired, reads its own.
            let latest = match self.solana.get(op.chain.trim_start_matches("solana:")) {
                Some((_, _, fresh)) if number == 1 => fresh.get(|| rpc.latest_blockhash()).await,
                _ => rpc.latest_blockhash().await,
            };
            return Ok(Plan::Blockhash(latest.map_err(chain_error)?));
        };
        // A first signature takes the first free account that is a nonce account of the key:
        // one registered but closed, never made or handed over would hold every operation of
        // the key while another sits free. An account held already is the operation's.
        let mut accounts = accounts.into_iter().peekable();
        while let Some(account) = accounts.next() {
            match self.nonce_plan(op, rpc, number, &account).await {
                Err(error @ (Error::NotSignable { .. } | Error::BadIntent { .. }))
                    if accounts.peek().is_some() =>
                {
                    tracing::warn!(sigcast.op_id = %op.op_id, nonce_account = %account, %error, "nonce account passed over");
                }
                planned => return planned,
            }
        }
        Err(Error::NotSignable {
            op_id,
            state: "waiting: no nonce account to sign with".into(),
        })
    }

    /// The lifetime of attempt `number` over nonce account `account`, as it is on chain.
    async fn nonce_plan(
        &self,
        op: &pb::Operation,
        rpc: &SolanaRpc,
        number: u32,
        account: &str,
    ) -> Result<Plan> {
        let op_id = op.op_id.clone();
        let chain_error = |source| Error::Chain {
            op_id: op_id.clone(),
            source,
        };
        let bytes = pubkey(account).ok_or_else(|| Error::BadIntent {
            op_id: op_id.clone(),
            reason: format!("nonce account {account:?} is not a base58 public key"),
        })?;
        let (state, slot) = rpc.nonce_and_slot(&bytes).await.map_err(chain_error)?;
        let state = state.ok_or_else(|| Error::NotSignable {
            op_id: op_id.clone(),
            state: format!("waiting: nonce account {account} is not an initialized nonce"),
        })?;
        if b58(&state.authority) != op.account {
            return Err(Error::BadIntent {
                op_id: op_id.clone(),
                reason: format!(
                    "nonce account {account} is advanced by {}, not by the operation's key {}",
                    b58(&state.authority),
                    op.account
                ),
            });
        }
        if number > 1 && op.signing.as_ref().is_some_and(|s| matches!(s, pb::operation::Signing::Solana(s) if s.blockhash == b58(&state.value))) {
            // A lagging endpoint: signing at the consumed value again would only waste a fee.
            return Err(Error::NotSignable {
                op_id,
                state: "SENT (the endpoint read still shows the consumed nonce value)".into(),
            });
        }
        Ok(Plan::Nonce {
            account: bytes,
            value: state.value,
            slot,
        })
    }

    /// The registered nonce accounts of the operation's key that no operation in flight
    /// holds, in key order; `None` when the key has none registered. Checked again when one
    /// is taken.
    async fn free_nonce_accounts(&self, op: &pb::Operation) -> Result<Option<Vec<String>>> {
        let root = self.store.root().clone();
        let cluster = op.chain.trim_start_matches("solana:").to_owned();
        let (authority, op_id) = (op.account.clone(), op.op_id.clone());
        let (registered, free) = self
            .store
            .read_async(move |tx| {
                let registered = accounts::nonce_accounts(tx, &root, &cluster, &authority)?;
                let mut free = Vec::new();
                for account in &registered {
                    if holder_is_done(tx, &root, &cluster, account, &op_id)? {
                        free.push(account.clone());
                    }
                }
                Ok((registered.len(), free))
            })
            .await?;
        match (registered, free) {
            (0, _) => Ok(None),
            (count, free) if free.is_empty() => Err(Error::NonceAccountsBusy {
                op_id: op.op_id.clone(),
                account: op.account.clone(),
                count,
            }),
            (_, free) => Ok(Some(free)),
        }
    }

    /// Makes attempt `number` of a Solana operation: 1 signs a RECEIVED operation, more re-sign
    /// a SENT one whose last attempt is `number - 1`.
    async fn solana_attempt(&self, op: pb::Operation, number: u32, caller: &str) -> Result<Signed> {
        let op_id = op.op_id.clone();
        let intent = self.stored_intent(&op)?;
        if !matches!(
            intent,
            Intent::SolanaTransfer(_) | Intent::SolanaInstructions(_)
        ) {
            return Err(Error::UnknownChain {
                op_id,
                chain: intent.chain().to_string(),
            });
        }
        self.may_sign(&op, &intent)?;
        let rpc = self.solana_rpc(&op)?;
        let price = self.solana[op.chain.trim_start_matches("solana:")]
            .1
            .for_attempt(number);
        let plan = self.plan(&op, rpc, number).await?;
        let authority = pubkey(&op.account).unwrap_or_default();
        let lifetime = match plan {
            Plan::Blockhash(latest) => Lifetime::Blockhash(latest.hash),
            Plan::Nonce { account, value, .. } => Lifetime::DurableNonce {
                account,
                authority,
                value,
            },
        };
        let message = match &intent {
            Intent::SolanaTransfer(t) => sigcast_solana::transfer_message(t, &lifetime, price),
            Intent::SolanaInstructions(list) => {
                sigcast_solana::instructions_message(list, &lifetime, price)
            }
            _ => unreachable!("checked above"),
        };
        // Every send of a transaction past a packet would be refused, and on Solana a refused
        // send says nothing: signed, it would be re-signed at every expiry, for ever.
        let bytes = sigcast_solana::wire_size(&message);
        if bytes > sigcast_domain::SOLANA_PACKET_BYTES {
            return Err(Error::TooLarge {
                op_id: op.op_id.clone(),
                bytes,
                max: sigcast_domain::SOLANA_PACKET_BYTES,
            });
        }
        let signing = match plan {
            Plan::Blockhash(latest) => pb::SolanaSigning {
                blockhash: b58(&latest.hash),
                last_valid_block_height: latest.last_valid_block_height,
                nonce_account: String::new(),
                signing_slot: latest.slot,
            },
            Plan::Nonce {
                account,
                value,
                slot,
            } => pb::SolanaSigning {
                blockhash: b58(&value),
                last_valid_block_height: 0,
                nonce_account: b58(&account),
                signing_slot: slot,
            },
        };
        let purpose = if number == 1 {
            SignPurpose::Initial
        } else {
            SignPurpose::Resign
        };
        let reason = if number == 1 { "" } else { RESIGN };
        self.sign_solana_message(op, message, signing, number, purpose, reason, caller)
            .await
    }

    /// Cancels a durable-nonce operation: a transaction that only advances its nonce account,
    /// at the value its attempts carry. Whichever lands first decides: the cancel (nothing of
    /// the operation can land after it) or the operation (the cancel then fails to land).
    pub(super) async fn cancel_solana(
        &self,
        op_id: &str,
        replaces_attempt: u32,
        caller: &str,
    ) -> Result<Signed> {
        let op = self.read_op(op_id).await?;
        let not_signable = |why: &str| Error::NotSignable {
            op_id: op_id.to_owned(),
            state: format!("{} ({why})", op.state().as_str_name()),
        };
        if !matches!(
            state_from_proto(op.state()),
            Some(OperationState::Signed | OperationState::Sent)
        ) {
            return Err(not_signable(
                "only a signed or sent operation is cancelled on chain",
            ));
        }
        if let Some(done) = op.attempts.iter().find(|a| a.reason == CANCEL) {
            return Ok(Signed {
                tx_id: done.tx_id.clone(),
                attempt: done.number,
                already_signed: true,
            });
        }
        let Some(last) = op.attempts.last() else {
            return Err(not_signable("no attempt"));
        };
        if last.number != replaces_attempt {
            return Ok(Signed {
                tx_id: last.tx_id.clone(),
                attempt: last.number,
                already_signed: true,
            });
        }
        if !op.cancel_requested {
            return Err(super::no_cancel_asked(&op));
        }
        // Checked like any signature: the nonce's authority is the account of the intent.
        self.stored_intent(&op)?;
        let Some(pb::operation::Signing::Solana(signing)) = &op.signing else {
            return Err(not_signable("not a Solana operation"));
        };
        let (Some(account), Some(value), Some(authority)) = (
            pubkey(&signing.nonce_account),
            pubkey(&signing.blockhash),
            pubkey(&op.account),
        ) else {
            return Err(not_signable(
                "a recent-blockhash operation is cancelled by letting its blockhash expire",
            ));
        };
        let message = sigcast_solana::advance_nonce_message(account, authority, value);
        let signing = signing.clone();
        self.sign_solana_message(
            op,
            message,
            signing,
            replaces_attempt + 1,
            SignPurpose::Cancel,
            CANCEL,
            caller,
        )
        .await
    }

    /// In one store transaction: checks the operation is where the caller saw it and that it
    /// holds its nonce account (if any), signs `message` with every key it needs, persists the
    /// transaction and its audit record, and records the attempt.
    #[allow(clippy::too_many_arguments)]
    async fn sign_solana_message(
        &self,
        op: pb::Operation,
        message: sigcast_solana::Message,
        signing: pb::SolanaSigning,
        number: u32,
        purpose: SignPurpose,
        reason: &'static str,
        caller: &str,
    ) -> Result<Signed> {
        let op_id = op.op_id.clone();
        let intent = self.stored_intent(&op)?;
        let policy = policy_for(&self.policies, &op.account);
        let signers = sigcast_solana::signers(&message);
        // What is about to be signed, not only the intent: no key but the fee payer's signs
        // unless the fee payer's policy names it.
        check_co_signers(
            &op.account,
            policy.map_or(&[][..], |p| p.allowed_co_signers.as_slice()),
            signers.iter().map(|key| b58(key)),
        )
        .map_err(|v| Error::PolicyDenied {
            op_id: op_id.clone(),
            rule: v.0,
        })?;
        // The rolling window counts an operation once, at its first signature, against the
        // window of every key that signs it: a co-signer's limits bound what it signs too.
        let windowed: Vec<(String, KeyPolicy)> = signers
            .iter()
            .filter(|_| number == 1)
            .map(|key| b58(key))
            .filter_map(|key| {
                policy_for(&self.policies, &key)
                    .filter(|p| p.window_secs > 0 && !p.window_max_lamports.is_empty())
                    .map(|policy| (key, policy.clone()))
            })
            .collect();
        let window = if windowed.is_empty() {
            Vec::new()
        } else {
            let moved = lamports_moved(&intent).map_err(|v| Error::PolicyDenied {
                op_id: op_id.clone(),
                rule: v.0,
            })?;
            let lamports = moved
                .iter()
                .fold(U256::ZERO, |sum, (_, l)| sum.saturating_add(U256::from(*l)));
            windowed
                .into_iter()
                .map(|(key, policy)| (key, policy, lamports))
                .collect()
        };
        let keys = signers
            .into_iter()
            .map(|signer| {
                self.keys.ed25519(&signer).ok_or_else(|| Error::NoKey {
                    op_id: op_id.clone(),
                    account: b58(&signer),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let in_process = keys.iter().all(|k| k.signs_in_process());
        let attempt = SolanaAttempt {
            root: self.store.root().clone(),
            op_id: op_id.clone(),
            caller: caller.to_owned(),
            now: self.clock.now(),
            intent,
            window,
            message,
            signing,
            number,
            purpose,
            reason,
            keys,
        };
        let outcome = self
            .commit(in_process, move |tx| sign_solana_attempt(tx, &attempt))
            .await??;
        if !outcome.already_signed {
            tracing::info!(sigcast.op_id = %op_id, signature = %outcome.tx_id, attempt = number, purpose = purpose.as_str_name(), "solana transaction signed");
        }
        Ok(outcome)
    }
}

/// Everything a Solana signature needs, read and checked before its transaction.
pub struct SolanaAttempt {
    /// The store's root subspace.
    pub root: sigcast_store::tuple::Subspace,
    /// The operation.
    pub op_id: String,
    /// The authenticated caller, for the audit record.
    pub caller: String,
    /// The time recorded.
    pub now: std::time::SystemTime,
    /// The stored intent, parsed.
    pub intent: Intent,
    /// Each signing key with a rolling window that counts this signature (an operation's
    /// first): the key, its policy and the lamports the intent moves.
    pub window: Vec<(String, KeyPolicy, U256)>,
    /// The message to sign.
    pub message: sigcast_solana::Message,
    /// Its lifetime, as the operation records it.
    pub signing: pb::SolanaSigning,
    /// The attempt it makes: 1 signs a RECEIVED operation, more follow attempt `number - 1`.
    pub number: u32,
    /// Why it is signed, for the audit record.
    pub purpose: SignPurpose,
    /// The attempt's recorded reason ("" for the first).
    pub reason: &'static str,
    /// The keys of the message's signers, in signature order.
    pub keys: Vec<crate::keys::Ed25519Handle>,
}

/// A Solana signature inside the caller's store transaction: checks the operation is where
/// the caller saw it (and, for a re-sign, that no cancel was asked for) and that it may hold
/// its nonce account (if any), records the rolling window's spend, signs the message with
/// every key it needs, and persists the transaction, its audit record and the attempt. A refusal after anything was written must roll the
/// transaction back (`Store::run_*_or_refuse`); a re-run after a commit finds the attempt.
pub fn sign_solana_attempt(
    tx: &mut dyn sigcast_store::KvTransaction,
    r: &SolanaAttempt,
) -> sigcast_store::Result<Result<Signed>> {
    let (root, id, number) = (&r.root, &r.op_id, r.number);
    let Some(stored) = operations::get(tx, root, id)? else {
        return Ok(Err(Error::NotFound(id.clone())));
    };
    // The record read inside the transaction is the one whose intent was checked.
    if let Err(refusal) = super::record_matches(&stored, &r.intent) {
        return Ok(Err(refusal));
    }
    if number == 1 {
        if let Some(done) = already_signed(&stored).transpose() {
            return Ok(done);
        }
    } else if let Some(last) = stored
        .attempts
        .last()
        .filter(|last| last.number != number - 1)
    {
        // Someone signed meanwhile: that signature stands.
        return Ok(Ok(Signed {
            tx_id: last.tx_id.clone(),
            attempt: last.number,
            already_signed: true,
        }));
    }
    // Read in this transaction, so a cancel committed since the re-sign was decided counts.
    if r.purpose == SignPurpose::Resign && stored.cancel_requested {
        return Ok(Err(cancel_asked(&stored)));
    }
    if r.purpose == SignPurpose::Cancel && !stored.cancel_requested {
        return Ok(Err(super::no_cancel_asked(&stored)));
    }
    let cluster = stored.chain.trim_start_matches("solana:");
    // The durable-nonce accounts of the keys that sign, read in this transaction: a list
    // that touches one could strand another operation signed over it.
    if let (Intent::SolanaInstructions(list), false) = (&r.intent, r.purpose == SignPurpose::Cancel)
    {
        let mut registered = Vec::new();
        for key in sigcast_domain::policy::signing_keys(list) {
            registered.extend(accounts::nonce_accounts(tx, root, cluster, &key)?);
        }
        if let Err(violation) = sigcast_domain::policy::check_nonce_accounts(list, &registered) {
            return Ok(Err(Error::PolicyDenied {
                op_id: id.clone(),
                rule: violation.0,
            }));
        }
    }
    for (account, policy, lamports) in &r.window {
        let spend = super::WindowSpend {
            root,
            chain: &stored.chain,
            account,
            op_id: id,
            unit: "lamports",
            value: *lamports,
            now: r.now,
        };
        if let Err(refusal) = spend.record(tx, policy)? {
            return Ok(Err(refusal));
        }
    }
    // DO NOT TURN THIS OFF: a nonce account's value is signed over by one operation at a
    // time; another may take it only once its holder is terminal.
    if !r.signing.nonce_account.is_empty() {
        let account = &r.signing.nonce_account;
        if !holder_is_done(tx, root, cluster, account, id)? {
            let holder = accounts::nonce_holder(tx, root, cluster, account)?;
            return Ok(Err(Error::NonceAccountHeld {
                op_id: id.clone(),
                nonce_account: account.clone(),
                holder: holder.unwrap_or_default(),
            }));
        }
        accounts::hold_nonce_account(tx, root, cluster, account, id)?;
    }
    let bytes = sigcast_solana::message_bytes(&r.message);
    let mut signatures = Vec::with_capacity(r.keys.len());
    for key in &r.keys {
        match key.sign(&bytes) {
            Ok(signature) => signatures.push(signature),
            Err(reason) => {
                return Ok(Err(Error::Sign {
                    op_id: id.clone(),
                    nonce: 0,
                    reason,
                }));
            }
        }
    }
    let transaction = sigcast_solana::assemble(r.message.clone(), &signatures);
    let Some(first) = signatures.first() else {
        return Ok(Err(Error::NoKey {
            op_id: id.clone(),
            account: stored.account.clone(),
        }));
    };
    let tx_id = b58(first);
    if !accounts::put_payload(
        tx,
        root,
        id,
        number,
        &sigcast_solana::wire_bytes(&transaction),
    )? {
        return Ok(Err(Error::PayloadDiffers {
            op_id: id.clone(),
            attempt: number,
        }));
    }
    let audit = AuditRecord {
        op_id: id.clone(),
        attempt: number,
        purpose: r.purpose.into(),
        key_id: stored.account.clone(),
        digest: hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes)),
        tx_id: tx_id.clone(),
        nonce: 0,
        time_unix_ms: unix_millis(r.now),
        caller: r.caller.clone(),
    };
    accounts::append_audit(tx, root, id, number, &audit.encode_to_vec())?;
    let mut op = stored.clone();
    if number == 1 {
        op.set_state(state_to_proto(OperationState::Signed));
    }
    op.signing = Some(pb::operation::Signing::Solana(r.signing.clone()));
    op.attempts.push(pb::Attempt {
        number,
        tx_id: tx_id.clone(),
        outcome: pb::AttemptOutcome::Pending.into(),
        reason: r.reason.into(),
        ..Default::default()
    });
    operations::put(tx, root, Some(&stored), &mut op, r.now)?;
    Ok(Ok(Signed {
        tx_id,
        attempt: number,
        already_signed: false,
    }))
}

/// The refusal of a re-sign once a cancel was asked for: the re-sign follows proof that no
/// attempt can land, so the operation ends CANCELLED instead of being signed again.
fn cancel_asked(op: &pb::Operation) -> Error {
    Error::NotSignable {
        op_id: op.op_id.clone(),
        state: format!(
            "{} (a cancel was asked for: with no attempt able to land, the broadcaster settles \
             it CANCELLED; it is not signed again)",
            op.state().as_str_name()
        ),
    }
}

/// Whether `op_id` may sign over a nonce account: nobody holds it, `op_id` does, or its holder
/// is terminal (its transaction, or its cancel, advanced the nonce; or proof showed nothing of
/// it can land).
fn holder_is_done(
    tx: &mut dyn sigcast_store::KvRead,
    root: &sigcast_store::tuple::Subspace,
    cluster: &str,
    account: &str,
    op_id: &str,
) -> sigcast_store::Result<bool> {
    let Some(holder) = accounts::nonce_holder(tx, root, cluster, account)? else {
        return Ok(true);
    };
    if holder == op_id {
        return Ok(true);
    }
    Ok(operations::get(tx, root, &holder)?
        .and_then(|op| state_from_proto(op.state()))
        .is_none_or(OperationState::is_terminal))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sigcast_domain::{Lamports, OpId, SolanaPubkey, SolanaTransfer};
    use std::sync::Arc;
    use std::time::SystemTime;

    /// Each re-sign pays more, never past the cap: an outage of hours (a re-sign every
    /// blockhash lifetime) must not end in a transfer paying hundreds of times the price.
    #[test]
    fn the_priority_fee_rises_with_each_re_sign_up_to_its_cap() {
        let cluster = |base, max| crate::config::SolanaClusterConfig {
            cluster: "localnet".into(),
            rpc_urls: Vec::new(),
            compute_unit_price_micro_lamports: base,
            max_compute_unit_price_micro_lamports: max,
            genesis_hash: None,
        };
        let default = PriorityFee::of(&cluster(1_000, None));
        let paid: Vec<u64> = [1, 2, 9, 10, 11, 500, u32::MAX]
            .into_iter()
            .map(|n| default.for_attempt(n))
            .collect();
        assert_eq!(paid, [1_000, 2_000, 9_000, 10_000, 10_000, 10_000, 10_000]);
        let capped = PriorityFee::of(&cluster(1_000, Some(2_500)));
        assert_eq!(capped.for_attempt(2), 2_000);
        assert_eq!(capped.for_attempt(3), 2_500);
        assert_eq!(PriorityFee::of(&cluster(0, None)).for_attempt(7), 0);
        // A cap below the base holds from the first attempt.
        assert_eq!(
            PriorityFee::of(&cluster(1_000, Some(10))).for_attempt(1),
            10
        );
    }

    /// A Solana operation of `key`, signed at attempt 1 and sent, in `store`.
    fn sent_operation(
        store: &sigcast_store::Store,
        op_id: &str,
        key: &ed25519_dalek::SigningKey,
    ) -> SolanaAttempt {
        let root = store.root().clone();
        let transfer = SolanaTransfer {
            cluster: "localnet".into(),
            from: SolanaPubkey::from(key.verifying_key().to_bytes()),
            to: SolanaPubkey::from([9; 32]),
            lamports: Lamports(5_000),
        };
        let intent = Intent::SolanaTransfer(transfer.clone());
        let new = sigcast_proto::new_operation(&OpId::parse(op_id).unwrap(), &intent);
        let now = SystemTime::now();
        store
            .run(|tx| operations::submit(tx, &root, new.clone(), now))
            .unwrap();
        let attempt = |number: u32, hash: [u8; 32], purpose| SolanaAttempt {
            root: root.clone(),
            op_id: op_id.into(),
            caller: "test".into(),
            now,
            intent: intent.clone(),
            window: Vec::new(),
            message: sigcast_solana::transfer_message(
                &transfer,
                &sigcast_solana::Lifetime::Blockhash(hash),
                0,
            ),
            signing: pb::SolanaSigning {
                blockhash: b58(&hash),
                last_valid_block_height: 150,
                nonce_account: String::new(),
                signing_slot: 3,
            },
            number,
            purpose,
            reason: if number == 1 { "" } else { RESIGN },
            keys: vec![crate::keys::Ed25519Handle::Keystore(Arc::new(key.clone()))],
        };
        let first = attempt(1, [1; 32], SignPurpose::Initial);
        store
            .run(|tx| sign_solana_attempt(tx, &first))
            .unwrap()
            .unwrap();
        crate::sign::replacement_tests::record_sent(store, op_id, 1);
        attempt(2, [2; 32], SignPurpose::Resign)
    }

    #[test]
    fn a_resign_is_refused_in_its_transaction_once_a_cancel_was_asked_for() {
        // Decided on a record read before the cancel: signed and sent, it could land after
        // the client was told the operation would be cancelled (simulation seed 502).
        let dir = tempfile::tempdir().unwrap();
        let store =
            sigcast_store::Store::open(&sigcast_store::StoreConfig::sqlite(dir.path().join("db")))
                .unwrap();
        let root = store.root().clone();
        let key = ed25519_dalek::SigningKey::from_bytes(&[7; 32]);

        let resign = sent_operation(&store, "kept", &key);
        let signed = store
            .run(|tx| sign_solana_attempt(tx, &resign))
            .unwrap()
            .expect("without a cancel, a proven re-sign is signed");
        assert_eq!(signed.attempt, 2);

        let resign = sent_operation(&store, "cancelled", &key);
        let cancel = store
            .run(|tx| operations::cancel(tx, &root, "cancelled", SystemTime::now()))
            .unwrap();
        assert!(matches!(cancel, operations::CancelOutcome::Requested(_)));
        let refused = store
            .run(|tx| sign_solana_attempt(tx, &resign))
            .unwrap()
            .expect_err("a cancel was asked for");
        assert!(
            refused.to_string().contains("a cancel was asked for"),
            "{refused}"
        );
        let op = store
            .read(|tx| operations::get(tx, &root, "cancelled"))
            .unwrap()
            .unwrap();
        assert_eq!(op.attempts.len(), 1, "nothing signed");
        let payload = store
            .read(|tx| accounts::payload(tx, &root, "cancelled", 2))
            .unwrap();
        assert_eq!(payload, None, "nothing stored");
    }
}
