//! The broadcaster's work loop: persist, send, record, check.
//!
//! Every step is one store transaction that re-reads the operation and acts only if it is still
//! in the state the step expects, so any step may run twice (after a crash, or in two
//! broadcaster processes) without effect. A send goes to one endpoint and is recorded before
//! and after; an ambiguous send is resolved by reading receipts and the account nonce; a
//! resend is always the stored, byte-identical payload. This version never re-signs.

use crate::config::Config;
use futures::StreamExt;
use sigcast_domain::OperationState;
use sigcast_evm::{Address, B256, EvmRpc, SendClass, classify_send_error};
use sigcast_proto::sigcast::signer::v1::signer_service_client::SignerServiceClient;
use sigcast_proto::sigcast::signer::v1::{SignOperationRequest, SignPurpose};
use sigcast_proto::{pb, state_to_proto};
use sigcast_solana::SolanaRpc;
use sigcast_store::operations::{self, ListFilter};
use sigcast_store::{Store, accounts};
use sigcast_telemetry::metrics;
use sigcast_telemetry::trace::op_span;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tonic::transport::Channel;
use tracing::Instrument;

/// Most operations of one state picked up per pass.
const BATCH: usize = 1_000;

/// A chain this broadcaster serves.
struct Chain {
    pool: EvmRpc,
}

/// The broadcaster's state: the store, the signer client and the chains.
#[derive(Clone)]
pub struct Worker {
    store: Store,
    signer: SignerServiceClient<Channel>,
    chains: Arc<HashMap<String, Chain>>,
    solana: Arc<HashMap<String, SolanaRpc>>,
    solana_commitment: String,
    confirmations: u64,
    rebroadcast: Duration,
    check_after: Duration,
    fee_bump_after: Option<Duration>,
    concurrency: usize,
}

impl Worker {
    /// A worker for `config` over `store`.
    pub fn new(config: &Config, store: Store) -> anyhow::Result<Self> {
        let timeout = Duration::from_millis(config.rpc_timeout_ms);
        let mut chains = HashMap::new();
        for chain in &config.evm_chains {
            chains.insert(
                format!("eip155:{}", chain.chain_id),
                Chain {
                    pool: EvmRpc::new(&chain.rpc_urls, timeout)?,
                },
            );
        }
        let mut solana = HashMap::new();
        for cluster in &config.solana_clusters {
            solana.insert(
                format!("solana:{}", cluster.cluster),
                SolanaRpc::new(&cluster.rpc_urls, timeout)?,
            );
        }
        let channel = signer_channel(&config.signer_url, config.signer_tls.as_ref())?;
        Ok(Self {
            store,
            signer: SignerServiceClient::new(channel),
            chains: Arc::new(chains),
            solana: Arc::new(solana),
            solana_commitment: config.solana_commitment.clone(),
            confirmations: config.confirmations,
            rebroadcast: Duration::from_millis(config.rebroadcast_ms),
            check_after: Duration::from_millis(config.check_after_ms),
            fee_bump_after: (config.fee_bump_after_ms > 0)
                .then(|| Duration::from_millis(config.fee_bump_after_ms)),
            concurrency: config.concurrency,
        })
    }

    /// One pass over every non-terminal operation of the served chains.
    pub async fn pass(&self) -> anyhow::Result<()> {
        // The three stages work on disjoint states and each transition checks the state it
        // expects, so they run side by side: signing never waits for sends or checks.
        let (signed, sent, checked) =
            tokio::join!(self.sign_stage(), self.send_stage(), self.check_stage());
        signed.and(sent).and(checked)
    }

    /// RECEIVED → SIGNED.
    async fn sign_stage(&self) -> anyhow::Result<()> {
        let received = self.in_state(pb::OperationState::Received).await?;
        futures::stream::iter(received)
            .for_each_concurrent(self.concurrency, |op| async move {
                let span = op_span("Sign", &op.op_id);
                self.sign(op).instrument(span).await
            })
            .await;
        Ok(())
    }

    /// SIGNED → SENT. Sends of one account go out in nonce order; accounts proceed side by
    /// side. (An account's SIGNED operations are a run of consecutive nonces: a nonce is
    /// allocated in the transaction that makes its operation SIGNED.)
    async fn send_stage(&self) -> anyhow::Result<()> {
        let mut by_account: BTreeMap<(String, String), Vec<pb::Operation>> = BTreeMap::new();
        for op in self.in_state(pb::OperationState::Signed).await? {
            by_account
                .entry((op.chain.clone(), op.account.clone()))
                .or_default()
                .push(op);
        }
        futures::stream::iter(by_account.into_values())
            .for_each_concurrent(self.concurrency, |mut ops| async move {
                ops.sort_by_key(evm_nonce);
                self.first_sends(ops).await;
            })
            .await;
        Ok(())
    }

    /// SENT → CONFIRMED | REJECTED | CANCELLED, or a resend or replacement.
    async fn check_stage(&self) -> anyhow::Result<()> {
        let sent = self.in_state(pb::OperationState::Sent).await?;
        let recent = |op: &pb::Operation| {
            let Some(last) = op.attempts.last() else {
                return false;
            };
            let at = last.outcome_time.as_ref().or(last.send_time.as_ref());
            at.and_then(|t| SystemTime::try_from(*t).ok())
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|elapsed| elapsed < self.check_after)
        };
        futures::stream::iter(sent.into_iter().filter(|op| !recent(op)))
            .for_each_concurrent(self.concurrency, |op| async move {
                let span = op_span("Check", &op.op_id);
                span.record("chain", op.chain.as_str());
                span.record("account", op.account.as_str());
                if let Some(nonce) = evm_nonce(&op) {
                    span.record("nonce", nonce);
                }
                self.check(op).instrument(span).await
            })
            .await;
        Ok(())
    }

    async fn in_state(&self, state: pb::OperationState) -> anyhow::Result<Vec<pb::Operation>> {
        let root = self.store.root().clone();
        let filter = ListFilter {
            state: Some(state),
            ..Default::default()
        };
        let page = self
            .store
            .read_async(move |tx| operations::list(tx, &root, &filter, None, BATCH))
            .await?
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let ops: Vec<pb::Operation> = page
            .operations
            .into_iter()
            .filter(|op| self.chains.contains_key(&op.chain) || self.solana.contains_key(&op.chain))
            .collect();
        let name = state.as_str_name().trim_start_matches("OPERATION_STATE_");
        metrics::metrics()
            .in_flight
            .get_or_create(&metrics::owned(&[("state", name)]))
            .set(i64::try_from(ops.len()).unwrap_or(i64::MAX));
        Ok(ops)
    }

    async fn sign(&self, op: pb::Operation) {
        let request = SignOperationRequest {
            op_id: op.op_id.clone(),
            purpose: SignPurpose::Initial.into(),
            replaces_attempt: 0,
        };
        match self.signer.clone().sign_operation(traced(request)).await {
            Ok(_) => {}
            Err(status) if refuses_the_operation(&status) => {
                // The signer will never sign it (no key, or policy): it was never applied.
                let reason = status.message().to_owned();
                tracing::warn!(op.id = %op.op_id, %reason, "signer refused the operation; rejecting it");
                self.update(&op.op_id, OperationState::Received, move |op| {
                    op.set_state(state_to_proto(OperationState::Rejected));
                    op.error = Some(pb::OperationError {
                        reason: "SIGNER_REFUSED".into(),
                        message: reason.clone(),
                    });
                })
                .await;
            }
            Err(status) if waits_for_nonce_account(&status) => {
                tracing::debug!(op.id = %op.op_id, message = status.message(), "waiting for a durable-nonce account")
            }
            Err(status) => {
                tracing::warn!(op.id = %op.op_id, code = ?status.code(), message = status.message(), "signing failed; will retry")
            }
        }
    }

    /// SIGNED → SENT: record the attempt, then send it. A cancel asked for before the first
    /// send takes the nonce with a cancel replacement instead: the nonce must be used.
    /// Returns the operation as recorded SENT and the attempt to send, or `None` if there is
    /// nothing to send (it moved on, or was cancelled before its first send).
    async fn prepare_first_send(&self, op: pb::Operation) -> Option<(pb::Operation, u32)> {
        let mut attempt = op.attempts.last().map(|a| a.number)?;
        if op.cancel_requested
            && self.solana.contains_key(&op.chain)
            && nonce_account(&op).is_none()
        {
            // Never sent, and only the store holds the signed bytes; its blockhash expires.
            self.update(&op.op_id, OperationState::Signed, |op| {
                op.set_state(state_to_proto(OperationState::Cancelled));
                op.error = Some(pb::OperationError {
                    reason: "CANCELLED_BEFORE_SENDING".into(),
                    message: "cancelled before its first send; its signed transaction never left the store".into(),
                });
            })
            .await;
            return None;
        }
        if op.cancel_requested && !has_self_transfer(&op) {
            attempt = self.replace(&op, SignPurpose::Cancel, attempt).await?;
        }
        let now = SystemTime::now();
        let recorded = self
            .update(&op.op_id, OperationState::Signed, move |op| {
                op.set_state(state_to_proto(OperationState::Sent));
                if let Some(a) = op.attempts.iter_mut().find(|a| a.number == attempt) {
                    a.send_time = Some(now.into());
                    a.outcome = pb::AttemptOutcome::Pending.into();
                }
            })
            .await;
        recorded.map(|op| (op, attempt))
    }

    /// First sends of one account's SIGNED operations, in nonce order. Every attempt is
    /// recorded SENT before any of them goes out (their records commit together), each goes
    /// out to one endpoint in turn, and their outcomes are recorded together after. A crash
    /// in between leaves operations SENT without an outcome: the check resolves them from
    /// chain state, as for any unknown outcome.
    async fn first_sends(&self, ops: Vec<pb::Operation>) {
        let prepared = futures::future::join_all(ops.into_iter().map(|op| {
            let span = op_span("FirstSend", &op.op_id);
            let prepare = self.prepare_first_send(op).instrument(span.clone());
            async move { (prepare.await, span) }
        }))
        .await;
        let mut outcomes = Vec::new();
        for (prepared, parent) in prepared {
            let Some((op, attempt)) = prepared else {
                continue;
            };
            let span = parent.in_scope(|| send_span(&op, attempt));
            if let Some(sent) = self.transmit(&op, attempt).instrument(span.clone()).await {
                outcomes.push(async move {
                    self.record_outcome(&op, attempt, sent, &span)
                        .instrument(span.clone())
                        .await
                });
            }
        }
        futures::future::join_all(outcomes).await;
    }

    /// Asks the signer for a replacement of attempt `last` at the same nonce; returns the
    /// number of the operation's newest attempt afterwards.
    async fn replace(&self, op: &pb::Operation, purpose: SignPurpose, last: u32) -> Option<u32> {
        let request = SignOperationRequest {
            op_id: op.op_id.clone(),
            purpose: purpose.into(),
            replaces_attempt: last,
        };
        match self.signer.clone().sign_operation(traced(request)).await {
            Ok(response) => Some(response.into_inner().attempt),
            Err(status) => {
                tracing::warn!(op.id = %op.op_id, purpose = purpose.as_str_name(), code = ?status.code(), message = status.message(), "replacement not signed; will retry");
                None
            }
        }
    }

    /// Sends an attempt's stored bytes to one endpoint and records the outcome.
    async fn send(&self, op: &pb::Operation, attempt: u32) {
        let span = send_span(op, attempt);
        async {
            if let Some(sent) = self.transmit(op, attempt).await {
                self.record_outcome(op, attempt, sent, &span).await;
            }
        }
        .instrument(span.clone())
        .await;
    }

    /// Sends an attempt's stored bytes to one endpoint, once; returns the endpoint and what
    /// it answered.
    async fn transmit(
        &self,
        op: &pb::Operation,
        attempt: u32,
    ) -> Option<(String, Result<(), sigcast_evm::RpcError>)> {
        let evm = self.chains.get(&op.chain);
        let solana = self.solana.get(&op.chain);
        if evm.is_none() && solana.is_none() {
            return None;
        }
        let root = self.store.root().clone();
        let id = op.op_id.clone();
        let raw = match self
            .store
            .read_async(move |tx| accounts::payload(tx, &root, &id, attempt))
            .await
        {
            Ok(Some(raw)) => raw,
            Ok(None) => {
                tracing::error!(op.id = %op.op_id, attempt, "signed payload missing from the store");
                return None;
            }
            Err(error) => {
                tracing::warn!(op.id = %op.op_id, %error, "reading payload");
                return None;
            }
        };
        match (evm, solana) {
            (Some(chain), _) => {
                let sent = chain.pool.send_raw(&raw).await;
                Some((sent.endpoint, sent.result.map(|_| ())))
            }
            (None, Some(rpc)) => {
                let sent = rpc.send_transaction(&raw).await;
                Some((sent.endpoint, sent.result.map(|_| ())))
            }
            (None, None) => None,
        }
    }

    /// Records what the endpoint said of an attempt.
    async fn record_outcome(
        &self,
        op: &pb::Operation,
        attempt: u32,
        (endpoint, result): (String, Result<(), sigcast_evm::RpcError>),
        span: &tracing::Span,
    ) {
        let solana_send = self.solana.contains_key(&op.chain);
        let (outcome, error) = match &result {
            Ok(()) => (pb::AttemptOutcome::Accepted, None),
            // Solana: a duplicate is as good as accepted; anything else is resolved from
            // signature statuses and block height, never from the message.
            Err(e) if solana_send => match e {
                sigcast_evm::RpcError::Node { message, .. }
                    if message.contains("already been processed") =>
                {
                    (pb::AttemptOutcome::Accepted, None)
                }
                _ => (pb::AttemptOutcome::Unknown, None),
            },
            Err(e) => match classify_send_error(e) {
                SendClass::AlreadyKnown => (pb::AttemptOutcome::Accepted, None),
                SendClass::Rejected => (
                    pb::AttemptOutcome::Rejected,
                    Some(pb::OperationError {
                        reason: SEND_REJECTED.into(),
                        message: e.to_string(),
                    }),
                ),
                SendClass::Underpriced => (
                    pb::AttemptOutcome::Rejected,
                    Some(pb::OperationError {
                        reason: UNDERPRICED.into(),
                        message: e.to_string(),
                    }),
                ),
                SendClass::NonceUsed | SendClass::Unknown => (pb::AttemptOutcome::Unknown, None),
            },
        };
        tracing::info!(op.id = %op.op_id, attempt, %endpoint, outcome = outcome.as_str_name(), "sent");
        span.record("endpoint", metrics::endpoint_label(&endpoint));
        span.record("outcome", outcome.as_str_name());
        let outcome_label = match outcome {
            pb::AttemptOutcome::Accepted => "accepted",
            pb::AttemptOutcome::Rejected => "rejected",
            _ => "unknown",
        };
        metrics::inc(
            &metrics::metrics().attempts,
            &[("chain", op.chain.as_str()), ("outcome", outcome_label)],
        );
        let now = SystemTime::now();
        self.update(&op.op_id, OperationState::Sent, move |op| {
            if let Some(a) = op.attempts.iter_mut().find(|a| a.number == attempt) {
                a.endpoint = endpoint.clone();
                a.outcome = outcome.into();
                a.outcome_time = Some(now.into());
            }
            // A self-transfer's acceptance says nothing about why the operation's own
            // transaction was refused: keep that reason as the evidence.
            let self_transfer = op
                .attempts
                .iter()
                .any(|a| a.number == attempt && (a.reason == CANCEL || a.reason == GAP_FILL));
            if error.is_some() || !self_transfer {
                op.error = error.clone();
            }
        })
        .await;
    }

    /// SENT: confirm from a receipt, reject on proof that no attempt can land, or resend.
    async fn check(&self, op: pb::Operation) {
        if let Some(rpc) = self.solana.get(&op.chain) {
            return self.check_solana(rpc, op).await;
        }
        let Some(chain) = self.chains.get(&op.chain) else {
            return;
        };
        let Some(nonce) = evm_nonce(&op) else { return };
        let hashes: Vec<B256> = op
            .attempts
            .iter()
            .filter_map(|a| a.tx_id.parse().ok())
            .collect();
        for hash in &hashes {
            match chain.pool.receipt(*hash).await {
                Ok(Some(receipt)) => return self.confirm_if_deep(&op, chain, receipt).await,
                Ok(None) => {}
                Err(error) => {
                    return tracing::debug!(op.id = %op.op_id, %error, "receipt read failed");
                }
            }
        }
        let Ok(account) = op.account.parse::<Address>() else {
            return;
        };
        match chain.pool.nonce(account).await {
            Ok(chain_nonce) if chain_nonce > nonce => {
                self.prove_rejected(&op, chain, account, nonce, &hashes)
                    .await
            }
            Ok(_) => self.replace_or_rebroadcast(&op).await,
            Err(error) => tracing::debug!(op.id = %op.op_id, %error, "nonce read failed"),
        }
    }

    async fn confirm_if_deep(
        &self,
        op: &pb::Operation,
        chain: &Chain,
        receipt: sigcast_evm::Receipt,
    ) {
        let Ok(head) = chain.pool.block_number().await else {
            return;
        };
        if head + 1 < receipt.block_number + self.confirmations {
            return;
        }
        let result = pb::TerminalResult {
            tx_id: receipt.tx_hash.to_string(),
            block_number: receipt.block_number,
            block_hash: receipt.block_hash.clone(),
            execution_status: if receipt.success {
                pb::ExecutionStatus::Success
            } else {
                pb::ExecutionStatus::Failed
            }
            .into(),
        };
        // The cancel replacement landing is what makes an operation CANCELLED; any other of its
        // transactions landing makes it CONFIRMED, cancel requested or not.
        let hash = receipt.tx_hash.to_string();
        let landed = op
            .attempts
            .iter()
            .find(|a| a.tx_id == hash)
            .map(|a| a.reason.as_str())
            .unwrap_or_default();
        let (state, error) = match landed {
            CANCEL => (OperationState::Cancelled, None),
            // The node refused the operation's own transaction; the fill took its nonce, so it
            // can never apply.
            GAP_FILL => (
                OperationState::Rejected,
                Some(pb::OperationError {
                    reason: "NEVER_APPLIED".into(),
                    message: format!(
                        "the node refused the operation's transaction ({}); its nonce was filled by the \
                         zero-value self-transfer {hash} in block {}, so it can never apply",
                        op.error
                            .as_ref()
                            .map_or("no reason recorded", |e| e.message.as_str()),
                        receipt.block_number
                    ),
                }),
            ),
            _ => (OperationState::Confirmed, None),
        };
        let settled = self
            .update(&op.op_id, OperationState::Sent, move |op| {
                op.set_state(state_to_proto(state));
                op.result = Some(result.clone());
                op.error = error.clone();
            })
            .await;
        if settled.is_some() {
            tracing::info!(op.id = %op.op_id, tx = %receipt.tx_hash, block = receipt.block_number, success = receipt.success, ?state, "settled");
        }
    }

    /// The account nonce moved past ours. REJECTED only on evidence from one endpoint: its
    /// nonce is past ours and, at that same view or later, none of our hashes has a receipt.
    async fn prove_rejected(
        &self,
        op: &pb::Operation,
        chain: &Chain,
        account: Address,
        nonce: u64,
        hashes: &[B256],
    ) {
        for url in chain.pool.urls() {
            let Ok(value) = chain
                .pool
                .read_from(
                    url,
                    "eth_getTransactionCount",
                    serde_json::json!([account.to_string(), "latest"]),
                )
                .await
            else {
                continue;
            };
            let Some(seen) = value
                .as_str()
                .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok())
            else {
                continue;
            };
            if seen <= nonce {
                continue; // this endpoint lags: its silence proves nothing
            }
            let mut all_absent = true;
            for hash in hashes {
                match chain
                    .pool
                    .read_from(
                        url,
                        "eth_getTransactionReceipt",
                        serde_json::json!([hash.to_string()]),
                    )
                    .await
                {
                    Ok(value) if value.is_null() => {}
                    _ => all_absent = false,
                }
            }
            if !all_absent {
                return; // a receipt exists (or could not be read): the next pass confirms
            }
            let evidence = format!(
                "endpoint {} reports account {account} at nonce {seen}, past this operation's nonce {nonce}, \
                 and no receipt for any of its transactions {hashes:?}: the nonce was consumed by another transaction",
                metrics::endpoint_label(url)
            );
            tracing::warn!(op.id = %op.op_id, %evidence, "operation rejected");
            self.update(&op.op_id, OperationState::Sent, move |op| {
                op.set_state(state_to_proto(OperationState::Rejected));
                op.error = Some(pb::OperationError {
                    reason: "NONCE_CONSUMED_EXTERNALLY".into(),
                    message: evidence.clone(),
                });
            })
            .await;
            return;
        }
    }

    /// Nothing of the operation is included and its nonce is free: sign a cancel if one was
    /// asked for, a fee bump if the last attempt waited too long, else resend its same bytes.
    async fn replace_or_rebroadcast(&self, op: &pb::Operation) {
        let Some(last) = op.attempts.last() else {
            return;
        };
        let first_sent = last
            .send_time
            .as_ref()
            .and_then(|t| SystemTime::try_from(*t).ok());
        let last_sent = last
            .outcome_time
            .as_ref()
            .and_then(|t| SystemTime::try_from(*t).ok())
            .or(first_sent);
        let waited = |since: Option<SystemTime>, limit: Duration| {
            since.is_none_or(|t| t.elapsed().unwrap_or_default() >= limit)
        };
        let refused = last.outcome() == pb::AttemptOutcome::Rejected;
        let refused_for =
            |reason: &str| refused && op.error.as_ref().is_some_and(|e| e.reason == reason);
        let purpose = if has_self_transfer(op) {
            None // a cancel or gap fill is final: only resent
        } else if op.cancel_requested {
            Some(SignPurpose::Cancel)
        } else if refused_for(SEND_REJECTED) {
            Some(SignPurpose::GapFill)
        } else if refused_for(UNDERPRICED)
            || self
                .fee_bump_after
                .is_some_and(|after| waited(first_sent, after))
        {
            Some(SignPurpose::FeeBump)
        } else {
            None
        };
        let number = match purpose {
            Some(purpose) => match self.replace(op, purpose, last.number).await {
                Some(number) if number != last.number => number,
                _ => return,
            },
            None if waited(last_sent, self.rebroadcast) => last.number,
            None => return,
        };
        let now = SystemTime::now();
        let recorded = self
            .update(&op.op_id, OperationState::Sent, move |op| {
                if let Some(a) = op.attempts.iter_mut().find(|a| a.number == number) {
                    if a.send_time.is_none() {
                        a.send_time = Some(now.into());
                    }
                    a.outcome = pb::AttemptOutcome::Pending.into();
                }
            })
            .await;
        if let Some(op) = recorded {
            tracing::debug!(op.id = %op.op_id, attempt = number, ?purpose, "sending");
            if purpose.is_none() {
                metrics::inc(&metrics::metrics().resends, &[("chain", op.chain.as_str())]);
            }
            self.send(&op, number).await;
        }
    }

    /// SENT on Solana: CONFIRMED once any attempt's signature has a status at the configured
    /// commitment (a failure in execution included: it landed, it is not retried); while the
    /// blockhash is valid the same bytes again; once one endpoint that is itself past every
    /// attempt's lastValidBlockHeight finds none of the signatures, a new signature (or, if a
    /// cancel was asked for, CANCELLED).
    async fn check_solana(&self, rpc: &SolanaRpc, op: pb::Operation) {
        let signatures: Vec<String> = op.attempts.iter().map(|a| a.tx_id.clone()).collect();
        let last_valid = match &op.signing {
            Some(pb::operation::Signing::Solana(s)) => s.last_valid_block_height,
            _ => return,
        };
        let Ok(statuses) = rpc.statuses(&signatures).await else {
            return;
        };
        let landed = signatures
            .iter()
            .zip(&statuses)
            .find_map(|(sig, s)| s.as_ref().map(|s| (sig.clone(), s.clone())));
        if let Some((signature, status)) = landed {
            if !self.commitment_reached(&status.confirmation) {
                return;
            }
            let failed = status.err.clone();
            let cancel_landed = op
                .attempts
                .iter()
                .any(|a| a.tx_id == signature && a.reason == CANCEL);
            let result = pb::TerminalResult {
                tx_id: signature.clone(),
                block_number: status.slot,
                block_hash: String::new(),
                execution_status: if failed.is_some() {
                    pb::ExecutionStatus::Failed
                } else {
                    pb::ExecutionStatus::Success
                }
                .into(),
            };
            let settled = self
                .update(&op.op_id, OperationState::Sent, move |op| {
                    if cancel_landed {
                        // The nonce advance landed: nothing of the operation ever can.
                        op.set_state(state_to_proto(OperationState::Cancelled));
                        op.result = Some(result.clone());
                        op.error = Some(pb::OperationError {
                            reason: "CANCELLED_ON_CHAIN".into(),
                            message: format!("the cancel advanced the nonce account in slot {}", status.slot),
                        });
                        return;
                    }
                    op.set_state(state_to_proto(OperationState::Confirmed));
                    op.result = Some(result.clone());
                    op.error = failed.as_ref().map(|err| pb::OperationError {
                        reason: "EXECUTION_FAILED".into(),
                        message: format!("landed in slot {} and failed: {err}; its fee was paid, it is not retried", status.slot),
                    });
                })
                .await;
            if settled.is_some() {
                tracing::info!(op.id = %op.op_id, %signature, slot = status.slot, cancel = cancel_landed, "landed");
            }
            return;
        }
        if let Some(account) = nonce_account(&op) {
            return self
                .check_durable_nonce(rpc, &op, account, &signatures)
                .await;
        }
        match rpc.block_height().await {
            Ok(height) if height > last_valid => {
                self.prove_expired(rpc, &op, &signatures, last_valid).await
            }
            Ok(_) => self.rebroadcast_if_due(&op).await,
            Err(error) => tracing::debug!(op.id = %op.op_id, %error, "block height read failed"),
        }
    }

    fn commitment_reached(&self, confirmation: &str) -> bool {
        match self.solana_commitment.as_str() {
            "finalized" => confirmation == "finalized",
            _ => matches!(confirmation, "confirmed" | "finalized"),
        }
    }

    /// The blockhash looks expired. Only one endpoint's own view may prove it: its block height
    /// past the last valid one and, from it, no status for any signature.
    async fn prove_expired(
        &self,
        rpc: &SolanaRpc,
        op: &pb::Operation,
        signatures: &[String],
        last_valid: u64,
    ) {
        for url in rpc.urls() {
            let Ok((height, statuses)) = rpc.view_from(url, signatures).await else {
                continue;
            };
            if height <= last_valid {
                continue; // this endpoint lags: its silence proves nothing
            }
            if statuses.iter().any(Option::is_some) {
                return; // landed after all: the next pass confirms it
            }
            let evidence = format!(
                "endpoint {} is at block height {height}, past {last_valid}, and knows none of {signatures:?}: \
                 the signed transaction can never land",
                metrics::endpoint_label(url)
            );
            self.nothing_can_land(op, op.cancel_requested, evidence)
                .await;
            return;
        }
    }

    /// A durable-nonce operation none of whose transactions has landed: while the nonce
    /// account still holds their value they stay valid, so the same bytes go out again (or,
    /// if a cancel was asked for, the transaction that only advances the nonce). Once one
    /// endpoint shows the nonce advanced and none of the signatures, nothing of it can land:
    /// CANCELLED if a cancel was asked for, otherwise a new signature over the new value.
    async fn check_durable_nonce(
        &self,
        rpc: &SolanaRpc,
        op: &pb::Operation,
        account: [u8; 32],
        signatures: &[String],
    ) {
        let Some(pb::operation::Signing::Solana(signing)) = &op.signing else {
            return;
        };
        let carried = signing.blockhash.clone();
        match rpc.nonce(&account).await {
            Ok(Some(state)) if bs58::encode(state.value).into_string() == carried => {
                if op.cancel_requested && !has_self_transfer(op) {
                    let last = op.attempts.last().map_or(0, |a| a.number);
                    if let Some(number) = self.replace(op, SignPurpose::Cancel, last).await {
                        self.send_new_attempt(op, number).await;
                    }
                } else {
                    self.rebroadcast_if_due(op).await;
                }
                return;
            }
            Ok(Some(_)) => {}
            Ok(None) => {
                tracing::warn!(op.id = %op.op_id, nonce_account = %signing.nonce_account, "nonce account missing or not initialized");
                return;
            }
            Err(error) => {
                tracing::debug!(op.id = %op.op_id, %error, "nonce read failed");
                return;
            }
        }
        for url in rpc.urls() {
            let Ok(view) = rpc.nonce_view_from(url, &account, signatures).await else {
                continue;
            };
            if view.statuses.iter().any(Option::is_some) {
                return; // landed after all: the next pass settles it
            }
            let Some(now) = view.nonce.map(|n| bs58::encode(n.value).into_string()) else {
                continue;
            };
            if now == carried {
                continue; // this endpoint lags: its silence proves nothing
            }
            let evidence = format!(
                "endpoint {} shows nonce account {} at {now}, past {carried}, and none of {signatures:?}: \
                 nothing of the operation can land",
                metrics::endpoint_label(url),
                signing.nonce_account
            );
            let cancel = op.cancel_requested || has_self_transfer(op);
            self.nothing_can_land(op, cancel, evidence).await;
            return;
        }
    }

    /// One endpoint proved that none of the operation's transactions can land (`evidence`
    /// says how): CANCELLED if a cancel was asked for, otherwise a new signature, sent.
    async fn nothing_can_land(&self, op: &pb::Operation, cancel: bool, evidence: String) {
        if cancel {
            self.update(&op.op_id, OperationState::Sent, move |op| {
                op.set_state(state_to_proto(OperationState::Cancelled));
                op.error = Some(pb::OperationError {
                    reason: "CANCELLED_BEFORE_LANDING".into(),
                    message: evidence.clone(),
                });
            })
            .await;
            return;
        }
        let last = op.attempts.last().map_or(0, |a| a.number);
        tracing::info!(op.id = %op.op_id, %evidence, "no attempt can land: re-signing");
        if let Some(number) = self
            .replace(op, SignPurpose::Resign, last)
            .await
            .filter(|n| *n != last)
        {
            self.send_new_attempt(op, number).await;
        }
    }

    /// Marks a freshly signed attempt as being sent, then sends it.
    async fn send_new_attempt(&self, op: &pb::Operation, number: u32) {
        let now = SystemTime::now();
        let recorded = self
            .update(&op.op_id, OperationState::Sent, move |op| {
                if let Some(a) = op.attempts.iter_mut().find(|a| a.number == number) {
                    a.send_time = Some(now.into());
                    a.outcome = pb::AttemptOutcome::Pending.into();
                }
            })
            .await;
        if let Some(op) = recorded {
            self.send(&op, number).await;
        }
    }

    /// Resends the last attempt's same bytes when it has waited `rebroadcast` since its last send.
    async fn rebroadcast_if_due(&self, op: &pb::Operation) {
        let Some(last) = op.attempts.last() else {
            return;
        };
        let last_sent = last
            .outcome_time
            .as_ref()
            .or(last.send_time.as_ref())
            .and_then(|t| SystemTime::try_from(*t).ok());
        if last_sent.is_some_and(|t| t.elapsed().unwrap_or_default() < self.rebroadcast) {
            return;
        }
        let number = last.number;
        let recorded = self
            .update(&op.op_id, OperationState::Sent, move |op| {
                if let Some(a) = op.attempts.iter_mut().find(|a| a.number == number) {
                    a.outcome = pb::AttemptOutcome::Pending.into();
                }
            })
            .await;
        if let Some(op) = recorded {
            metrics::inc(&metrics::metrics().resends, &[("chain", op.chain.as_str())]);
            self.send(&op, number).await;
        }
    }

    /// Applies `change` to the operation in one transaction if it is still in `expected`;
    /// returns the updated operation, or `None` if it had moved on (or on a store error).
    async fn update(
        &self,
        op_id: &str,
        expected: OperationState,
        change: impl Fn(&mut pb::Operation) + Send + 'static,
    ) -> Option<pb::Operation> {
        let root = self.store.root().clone();
        let id = op_id.to_owned();
        let now = SystemTime::now();
        let result = self
            .store
            .run_grouped(move |tx| {
                let Some(stored) = operations::get(tx, &root, &id)? else {
                    return Ok(None);
                };
                if stored.state() != state_to_proto(expected) {
                    return Ok(None);
                }
                let mut op = stored.clone();
                change(&mut op);
                operations::put(tx, &root, Some(&stored), &mut op, now)?;
                Ok(Some(op))
            })
            .await;
        match result {
            Ok(Some(op)) => {
                if op.state() != state_to_proto(expected) {
                    count_transition(&op);
                }
                Some(op)
            }
            Ok(None) => None,
            Err(error) => {
                tracing::warn!(op.id = %op_id, %error, "store update failed; the next pass retries");
                None
            }
        }
    }
}

/// The span of one send of an attempt, under the current span.
fn send_span(op: &pb::Operation, attempt: u32) -> tracing::Span {
    tracing::info_span!(
        "send",
        otel.name = "Send",
        op.id = %op.op_id,
        attempt,
        endpoint = tracing::field::Empty,
        outcome = tracing::field::Empty,
    )
}

/// Counts an operation entering its state and, once terminal, how an unknown send outcome
/// (if its last send had one) was settled.
fn count_transition(op: &pb::Operation) {
    let state = op
        .state()
        .as_str_name()
        .trim_start_matches("OPERATION_STATE_");
    metrics::inc(&metrics::metrics().transitions, &[("state", state)]);
    let terminal = matches!(
        op.state(),
        pb::OperationState::Confirmed
            | pb::OperationState::Rejected
            | pb::OperationState::Cancelled
    );
    if terminal
        && op
            .attempts
            .iter()
            .any(|a| a.outcome() == pb::AttemptOutcome::Unknown)
    {
        metrics::inc(
            &metrics::metrics().unknown_resolved,
            &[("chain", op.chain.as_str()), ("resolution", state)],
        );
    }
}

/// A signer request carrying the current span as W3C `traceparent`, so the signer's span
/// hangs under ours.
fn traced<T>(message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if let Some(value) = sigcast_telemetry::trace::traceparent(&tracing::Span::current())
        .and_then(|v| tonic::metadata::MetadataValue::try_from(v).ok())
    {
        request.metadata_mut().insert("traceparent", value);
    }
    request
}

/// A lazy channel to the signer: `unix:/path/to.sock` (the signer checks our uid),
/// `https://` with our client certificate (mutual TLS), or `http://` (development).
fn signer_channel(
    url: &str,
    tls: Option<&crate::config::SignerTlsConfig>,
) -> anyhow::Result<Channel> {
    let timeout = Duration::from_secs(30);
    if let Some(path) = url.strip_prefix("unix:") {
        return Ok(sigcast_proto::unix_channel_lazy(path, timeout));
    }
    let mut endpoint = tonic::transport::Endpoint::from_shared(url.to_owned())?.timeout(timeout);
    if let Some(tls) = tls {
        let read = |path: &std::path::Path| {
            std::fs::read(path).map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))
        };
        let mut config = tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(read(&tls.ca)?))
            .identity(tonic::transport::Identity::from_pem(
                read(&tls.cert)?,
                read(&tls.key)?,
            ));
        if let Some(domain) = &tls.domain {
            config = config.domain_name(domain.clone());
        }
        endpoint = endpoint.tls_config(config)?;
    }
    Ok(endpoint.connect_lazy())
}

/// Whether the signer refused the operation itself (no key, policy), as opposed to refusing
/// us (an unlisted certificate) or failing: only the former makes an operation REJECTED.
fn refuses_the_operation(status: &tonic::Status) -> bool {
    use tonic_types::StatusExt;
    status.code() == tonic::Code::PermissionDenied
        && status.get_details_error_info().is_some_and(|info| {
            info.domain == "sigcast-signer"
                && matches!(info.reason.as_str(), "NO_KEY" | "POLICY_DENIED")
        })
}

/// Attempt reasons of the self-transfers that take an operation's nonce.
const CANCEL: &str = "cancel";
const GAP_FILL: &str = "gap_fill";
/// Operation error reasons of a refused send.
const SEND_REJECTED: &str = "SEND_REJECTED";
const UNDERPRICED: &str = "UNDERPRICED";

fn has_self_transfer(op: &pb::Operation) -> bool {
    op.attempts
        .iter()
        .any(|a| a.reason == CANCEL || a.reason == GAP_FILL)
}

/// The durable-nonce account a Solana operation's transactions advance, if it uses one.
fn nonce_account(op: &pb::Operation) -> Option<[u8; 32]> {
    match &op.signing {
        Some(pb::operation::Signing::Solana(s)) if !s.nonce_account.is_empty() => {
            bs58::decode(&s.nonce_account)
                .into_vec()
                .ok()
                .and_then(|v| v.try_into().ok())
        }
        _ => None,
    }
}

/// Whether the signer said the operation waits for a durable-nonce account of its key.
fn waits_for_nonce_account(status: &tonic::Status) -> bool {
    use tonic_types::StatusExt;
    status.code() == tonic::Code::ResourceExhausted
        && status.get_details_error_info().is_some_and(|info| {
            info.domain == "sigcast-signer" && info.reason == "NONCE_ACCOUNTS_BUSY"
        })
}

fn evm_nonce(op: &pb::Operation) -> Option<u64> {
    match &op.signing {
        Some(pb::operation::Signing::Evm(evm)) => Some(evm.nonce),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic_types::{ErrorDetails, StatusExt};

    #[test]
    fn only_a_refusal_of_the_operation_rejects_it() {
        let refusal = |reason: &str| {
            let details = ErrorDetails::with_error_info(reason, "sigcast-signer", HashMap::new());
            tonic::Status::with_error_details(tonic::Code::PermissionDenied, "refused", details)
        };
        assert!(refuses_the_operation(&refusal("POLICY_DENIED")));
        assert!(refuses_the_operation(&refusal("NO_KEY")));
        // The signer refusing *us* (an unlisted certificate) must never reject work.
        assert!(!refuses_the_operation(&tonic::Status::permission_denied(
            "client certificate not allowed"
        )));
        assert!(!refuses_the_operation(&refusal("SOMETHING_ELSE")));
        assert!(!refuses_the_operation(&tonic::Status::unavailable("down")));
    }
}
