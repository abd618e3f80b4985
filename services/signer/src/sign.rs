//! Signing a recorded operation: read chain inputs, then allocate the nonce, sign and persist
//! the payload in one store transaction.
//!
//! The transaction body is idempotent: it re-reads the operation and returns the stored
//! signature if the operation was signed meanwhile (by this or another signer process), so a
//! retried call — or a body re-run after an unknown commit — never signs twice.

use crate::config::{Config, TxType};
use crate::error::{Error, Result};
use crate::keys::Keyring;
use prost::Message;
use sigcast_domain::policy::{KeyPolicy, check_intent, policy_for};
use sigcast_domain::{EvmAddress, EvmTransfer, Wei};
use sigcast_domain::{Intent, IntentRules, OperationState};
use sigcast_evm::U256;
use sigcast_evm::evidence::{AccountNonces, account_nonces, served_chain_id};
use sigcast_evm::{Address, EvmRpc, FeeLimits, Fees, TxParams, build_transaction, params_of};
use sigcast_jsonrpc::Endpoint as _;
use sigcast_proto::sigcast::signer::v1::{AuditRecord, SignPurpose};
use sigcast_proto::{intent_from_proto, pb, state_from_proto, state_to_proto};
use sigcast_protocol::record::was_sent;
use sigcast_solana::SolanaRpc;
use sigcast_store::{Store, accounts, operations};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

mod solana;
pub use solana::{SolanaAttempt, sign_solana_attempt};

/// Gas of a plain transfer.
const TRANSFER_GAS: u64 = 21_000;

/// Why a replacement at the same nonce is signed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replacement {
    /// The same intent with higher fees.
    FeeBump,
    /// A zero-value self-transfer that takes the nonce instead of the operation.
    Cancel,
    /// The same self-transfer, taking the nonce of an operation the node refused.
    GapFill,
}

impl Replacement {
    /// The attempt `reason` recorded for it.
    pub fn reason(self) -> &'static str {
        match self {
            Replacement::FeeBump => "fee_bump",
            Replacement::Cancel => "cancel",
            Replacement::GapFill => "gap_fill",
        }
    }

    /// The signer API's name for it.
    pub fn purpose(self) -> SignPurpose {
        match self {
            Replacement::FeeBump => SignPurpose::FeeBump,
            Replacement::Cancel => SignPurpose::Cancel,
            Replacement::GapFill => SignPurpose::GapFill,
        }
    }
}

/// What a sign call did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signed {
    /// Hash of the signed transaction.
    pub tx_id: String,
    /// Its attempt number.
    pub attempt: u32,
    /// True when it was already signed and the stored signature is returned.
    pub already_signed: bool,
}

struct EvmChain {
    pool: EvmRpc,
    /// How deep another sender's transaction must be before its nonce is skipped.
    confirmations: u64,
    tx_type: TxType,
    /// The most any transaction offers per gas, in wei.
    max_fee_per_gas: u128,
    /// The same, in gwei, for messages.
    max_fee_per_gas_gwei: u64,
    /// The last fees read and when: under load every signature would otherwise read them.
    fees: Fresh<Fees>,
    /// Each account's nonce as last read from the chain, and when.
    nonces: std::sync::Mutex<HashMap<Address, Arc<Fresh<AccountNonces>>>>,
    /// Set once an endpoint of the chain answered with the configured chain id. Nothing is
    /// signed for a chain before that: a transaction for one chain sent to another is at
    /// best wasted, at worst replayable there.
    verified: std::sync::atomic::AtomicBool,
    /// The configured chain id.
    chain_id: u64,
    /// Each endpoint's chain id as last read (by configuration index), and when: a nonce is
    /// read only from an endpoint seen serving the chain within [`CHAIN_READS_FRESH_FOR`].
    served: std::sync::Mutex<HashMap<usize, (std::time::Instant, u64)>>,
}

/// How long fees and nonces read from the chain are reused (about a block; a fee bump covers
/// a rise in fees).
const CHAIN_READS_FRESH_FOR: Duration = Duration::from_secs(1);

/// A value read from the chain, reused for [`CHAIN_READS_FRESH_FOR`], and read once however
/// many callers want it at the same moment: the first reads, the others wait for its answer
/// (a batch of signatures, or concurrent calls, asked the node once each before any had
/// filled the cache).
struct Fresh<T> {
    /// The last value read.
    value: std::sync::Mutex<Option<Read<T>>>,
    /// The last read that failed: when it ended, and why.
    failed: std::sync::Mutex<Option<(std::time::Instant, String)>>,
    /// Held across a read: reads take turns, and whoever waits for one finds its answer.
    /// A caller content with the value kept never waits here.
    reading: tokio::sync::Mutex<()>,
}

impl<T> Default for Fresh<T> {
    fn default() -> Self {
        Self {
            value: std::sync::Mutex::new(None),
            failed: std::sync::Mutex::new(None),
            reading: tokio::sync::Mutex::new(()),
        }
    }
}

/// A value read, with when its read began and ended.
#[derive(Clone, Copy)]
struct Read<T> {
    began: std::time::Instant,
    ended: std::time::Instant,
    value: T,
}

impl<T: Copy> Fresh<T> {
    /// The value, read at most once every [`CHAIN_READS_FRESH_FOR`] (from the end of its read).
    async fn get<F>(&self, read: impl FnOnce() -> F) -> sigcast_jsonrpc::Result<T>
    where
        F: std::future::Future<Output = sigcast_jsonrpc::Result<T>>,
    {
        self.get_where(|kept| kept.ended.elapsed() < CHAIN_READS_FRESH_FOR, read)
            .await
    }

    /// The value from a read begun at `not_before` or later: one begun before is not reused.
    /// Callers waiting for the same read share it, and the value read is kept for
    /// [`Fresh::get`]'s callers.
    async fn get_read_since<F>(
        &self,
        not_before: std::time::Instant,
        read: impl FnOnce() -> F,
    ) -> sigcast_jsonrpc::Result<T>
    where
        F: std::future::Future<Output = sigcast_jsonrpc::Result<T>>,
    {
        self.get_where(|kept| kept.began >= not_before, read).await
    }

    async fn get_where<F>(
        &self,
        fresh: impl Fn(&Read<T>) -> bool,
        read: impl FnOnce() -> F,
    ) -> sigcast_jsonrpc::Result<T>
    where
        F: std::future::Future<Output = sigcast_jsonrpc::Result<T>>,
    {
        let kept = || {
            self.value
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .filter(|kept| fresh(kept))
                .map(|kept| kept.value)
        };
        if let Some(value) = kept() {
            return Ok(value);
        }
        let asked = std::time::Instant::now();
        let _turn = self.reading.lock().await;
        // Read by the caller this one waited for.
        if let Some(value) = kept() {
            return Ok(value);
        }
        // A read that failed while this caller waited: its answer is this caller's too (a
        // node that is down is not asked once more, one timeout after another, per waiting
        // caller).
        if let Some((at, why)) = &*self.failed.lock().unwrap_or_else(|p| p.into_inner())
            && *at >= asked
        {
            return Err(sigcast_jsonrpc::Error::Shared(why.clone()));
        }
        let began = std::time::Instant::now();
        match read().await {
            Ok(value) => {
                *self.value.lock().unwrap_or_else(|p| p.into_inner()) = Some(Read {
                    began,
                    ended: std::time::Instant::now(),
                    value,
                });
                Ok(value)
            }
            Err(error) => {
                *self.failed.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some((std::time::Instant::now(), error.to_string()));
                Err(error)
            }
        }
    }
}

impl EvmChain {
    /// The account's transaction count on chain, at the head and at the confirmation depth,
    /// read at most once a second. Allocation takes the larger of the settled count and the
    /// store's next nonce, so a value up to a second old only delays noticing a send made
    /// outside sigcast; it never hands out a used nonce twice (the store does not) and the
    /// broadcaster proves such a nonce consumed from fresh reads. Settled, because a nonce
    /// skipped for another sender's transaction that a reorg then drops would leave a gap
    /// nobody fills: every operation allocated past it would wait for ever. The price: each
    /// nonce another sender took less than `confirmations` deep when we allocate it costs
    /// one operation, REJECTED with that transaction as proof once it is deep (CONFIRMED if
    /// it is reorged out instead).
    async fn chain_nonce(&self, account: Address) -> sigcast_jsonrpc::Result<AccountNonces> {
        let fresh = self
            .nonces
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(account)
            .or_default()
            .clone();
        // One endpoint, seen serving the chain, answers the head and both counts under it.
        // An endpoint moved to another chain since the start (a DNS name, a load balancer)
        // shows the key's count there: taken here, the nonce would jump past a gap nobody
        // fills, and every operation of the account would wait for ever.
        // Hedged across the endpoints (G6), each read whole from one.
        fresh
            .get(|| async {
                self.pool
                    .hedged("the account's transaction count", |endpoint| async move {
                        self.serves_chain(&endpoint).await?;
                        account_nonces(&endpoint, account, self.confirmations).await
                    })
                    .await
                    .map_err(|error| {
                        sigcast_jsonrpc::Error::Shared(format!(
                            "{error} (from an endpoint serving chain {}, {} blocks deep: \
                             `confirmations`; the endpoint must keep state that deep)",
                            self.chain_id, self.confirmations,
                        ))
                    })
            })
            .await
    }

    /// Whether `endpoint` serves the chain: its `eth_chainId`, read at most once a
    /// [`CHAIN_READS_FRESH_FOR`]; else why not.
    async fn serves_chain(
        &self,
        endpoint: &sigcast_jsonrpc::PoolEndpoint<'_>,
    ) -> std::result::Result<(), sigcast_jsonrpc::RpcError> {
        let index = endpoint.index();
        let known = self
            .served
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&index)
            .filter(|(at, _)| at.elapsed() < CHAIN_READS_FRESH_FOR)
            .map(|(_, served)| *served);
        let served = match known {
            Some(served) => served,
            None => {
                let served = served_chain_id(endpoint).await?;
                self.served
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(index, (std::time::Instant::now(), served));
                served
            }
        };
        if served != self.chain_id {
            tracing::warn!(
                endpoint = endpoint.label(),
                served,
                configured = self.chain_id,
                "endpoint serves another chain; no nonce is read from it"
            );
            return Err(sigcast_jsonrpc::RpcError::Malformed {
                endpoint: endpoint.label().to_owned(),
                message: format!("serves chain {served}, not {}", self.chain_id),
            });
        }
        Ok(())
    }

    /// Fees for a new transaction now, of the configured type (read at most once a second).
    async fn current_fees(&self) -> sigcast_jsonrpc::Result<Fees> {
        self.fees.get(|| self.read_fees()).await
    }

    /// Fees read since this call began (replacements waiting for the same read share it, and
    /// the next second's new transactions are signed with it). A replacement is signed with
    /// these: it is asked for because fees moved (a head whose base fee is above the newest
    /// attempt's cap, or a bump period without inclusion), and fees kept for up to a second
    /// may be from before that head: a bump priced under it would be a bump spent for nothing.
    async fn fees_read_now(&self) -> sigcast_jsonrpc::Result<Fees> {
        self.fees
            .get_read_since(std::time::Instant::now(), || self.read_fees())
            .await
    }

    /// Fees for a new transaction, as the chain answers them now.
    async fn read_fees(&self) -> sigcast_jsonrpc::Result<Fees> {
        Ok(match self.tx_type {
            TxType::Eip1559 => self.pool.eip1559_fees().await?,
            TxType::Legacy => Fees::Legacy {
                gas_price: self.pool.gas_price().await?,
            },
        })
    }
}

/// The fee limits of one transaction with `gas_limit`: the chain's cap (wei per gas),
/// lowered by the key's policy (its own caps, and its most fees per transaction spread over
/// the gas limit).
fn fee_limits(chain_cap: u128, policy: Option<&KeyPolicy>, gas_limit: u64) -> FeeLimits {
    const GWEI: u128 = 1_000_000_000;
    let mut limits = FeeLimits::per_gas(chain_cap);
    let Some(policy) = policy else {
        return limits;
    };
    if policy.max_fee_per_gas_gwei > 0 {
        limits.per_gas = limits
            .per_gas
            .min(u128::from(policy.max_fee_per_gas_gwei).saturating_mul(GWEI));
    }
    if let Some(total) = limit(&policy.max_fee_wei) {
        let per_gas = total / U256::from(gas_limit.max(1));
        limits.per_gas = limits
            .per_gas
            .min(u128::try_from(per_gas).unwrap_or(u128::MAX));
    }
    limits.priority = limits.per_gas;
    if policy.max_priority_fee_per_gas_gwei > 0 {
        limits.priority = limits
            .priority
            .min(u128::from(policy.max_priority_fee_per_gas_gwei).saturating_mul(GWEI));
    }
    limits
}

/// A policy's decimal limit; `None` when it is left empty (no limit). (Careful: `U256` parses
/// an empty string as 0, which would be a limit of nothing.)
fn limit(text: &str) -> Option<U256> {
    if text.is_empty() {
        return None;
    }
    U256::from_str_radix(text, 10).ok()
}

/// In words, for a refusal.
fn describe(limits: FeeLimits) -> String {
    format!(
        "{} wei per gas, {} wei priority",
        limits.per_gas, limits.priority
    )
}

/// What signing an operation needs: its parsed intent, and the key and chain it names.
struct Resolved<'a> {
    intent: Intent,
    chain_id: u64,
    from: EvmAddress,
    key: crate::keys::KeyHandle,
    chain: &'a EvmChain,
}

/// A Solana cluster as the signer reaches it: its endpoints, its base priority fee
/// (micro-lamports per CU) and its latest blockhash as last read.
type SolanaCluster = (
    SolanaRpc,
    solana::PriorityFee,
    Fresh<sigcast_solana::LatestBlockhash>,
);

/// What the signer makes, at start, of one endpoint's answer to "which chain do you serve".
/// Pure, as is the rule the start follows ([`EndpointAtStart::refuses_start`]), so that the
/// simulation starts its signers by both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndpointAtStart {
    /// It serves the configured chain: the chain needs no check before its first signature.
    Serves,
    /// It did not answer (the error). Only reported: the chain is checked again before its
    /// first signature, and every other chain is served meanwhile. One chain's outage must
    /// not stop the signer, and with it every chain (the signer once exited here).
    Unanswered(String),
    /// It serves another chain (the id it answered): a configuration error, which refuses
    /// the start — signing for one chain from another's state would be wrong everywhere.
    ServesAnother(u64),
}

impl EndpointAtStart {
    /// The endpoint's `answer` for a chain configured as `configured`.
    pub fn of<E: std::fmt::Display>(configured: u64, answer: std::result::Result<u64, E>) -> Self {
        match answer {
            Ok(served) if served == configured => EndpointAtStart::Serves,
            Ok(served) => EndpointAtStart::ServesAnother(served),
            Err(error) => EndpointAtStart::Unanswered(error.to_string()),
        }
    }

    /// Whether the signer refuses to start on this answer: only on another chain's.
    pub fn refuses_start(&self) -> bool {
        matches!(self, EndpointAtStart::ServesAnother(_))
    }
}

impl std::fmt::Display for EndpointAtStart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EndpointAtStart::Serves => write!(f, "serves its chain"),
            EndpointAtStart::Unanswered(error) => write!(f, "did not answer ({error})"),
            EndpointAtStart::ServesAnother(served) => write!(f, "serves chain {served}"),
        }
    }
}

/// Signs operations with the keys it holds.
#[derive(Clone)]
pub struct Signer {
    store: Store,
    keys: Keyring,
    chains: Arc<HashMap<u64, EvmChain>>,
    /// Per cluster: its endpoints, its base priority fee (micro-lamports per CU) and its
    /// latest blockhash as last read.
    solana: Arc<HashMap<String, SolanaCluster>>,
    rules: IntentRules,
    policies: Arc<Vec<KeyPolicy>>,
    callers: Arc<Vec<sigcast_domain::callers::CallerRule>>,
    /// Fingerprints (SHA-256 hex) and identities (URI/DNS SAN, else CN) of the TLS client
    /// certificates allowed; both empty: any the client CA issued.
    allowed_certificates: Arc<(Vec<String>, Vec<String>)>,
    /// The time spends and audit records are recorded at, and rolling windows measured by:
    /// a step of the system clock while running does not move it, so a step forward cannot
    /// push recorded spends out of a window early (see `sigcast_runtime::clock`).
    clock: sigcast_runtime::clock::SteadyClock,
}

impl Signer {
    /// A signer over `store` with `keys`, reading chain state through the configured endpoints.
    pub fn new(config: &Config, store: Store, keys: Keyring) -> anyhow::Result<Self> {
        let timeout = Duration::from_millis(config.rpc_timeout_ms);
        let mut chains = HashMap::new();
        for chain in &config.evm_chains {
            chains.insert(
                chain.chain_id,
                EvmChain {
                    pool: EvmRpc::new(&chain.rpc_urls, timeout)?,
                    confirmations: config.confirmations,
                    tx_type: chain.tx_type,
                    max_fee_per_gas: u128::from(chain.max_fee_per_gas_gwei) * 1_000_000_000,
                    max_fee_per_gas_gwei: chain.max_fee_per_gas_gwei,
                    fees: Fresh::default(),
                    nonces: std::sync::Mutex::new(HashMap::new()),
                    verified: std::sync::atomic::AtomicBool::new(false),
                    chain_id: chain.chain_id,
                    served: std::sync::Mutex::new(HashMap::new()),
                },
            );
        }
        let rules = IntentRules {
            evm_chain_ids: config.evm_chains.iter().map(|c| c.chain_id).collect(),
            solana_clusters: config
                .solana_clusters
                .iter()
                .map(|c| c.cluster.clone())
                .collect(),
            max_evm_call_data: usize::MAX,
        };
        let mut solana = HashMap::new();
        for cluster in &config.solana_clusters {
            solana.insert(
                cluster.cluster.clone(),
                (
                    SolanaRpc::new(&cluster.rpc_urls, timeout)?
                        .expecting_cluster(&cluster.cluster, cluster.genesis_hash.as_deref()),
                    solana::PriorityFee::of(cluster),
                    // A blockhash lives about a minute: one read a second serves every
                    // signature of that second (each read the node once before).
                    Fresh::default(),
                ),
            );
        }
        Ok(Self {
            clock: sigcast_runtime::clock::SteadyClock::start(),
            store,
            keys,
            chains: Arc::new(chains),
            solana: Arc::new(solana),
            rules,
            policies: Arc::new(config.policies.clone()),
            callers: Arc::new(config.callers.clone()),
            allowed_certificates: Arc::new(
                config
                    .tls
                    .as_ref()
                    .map(|tls| {
                        let fingerprints = tls
                            .allowed_client_fingerprints
                            .iter()
                            .map(|f| f.to_ascii_lowercase().replace(':', ""))
                            .collect();
                        (fingerprints, tls.allowed_client_identities.clone())
                    })
                    .unwrap_or_default(),
            ),
        })
    }

    /// Checks, at start, what each configured endpoint serves ([`EndpointAtStart`]): another
    /// chain id refuses the start; an endpoint that does not answer is only reported.
    pub async fn check_chains(&self) -> anyhow::Result<()> {
        for (chain_id, chain) in self.chains.iter() {
            for url in chain.pool.urls() {
                let label = sigcast_jsonrpc::endpoint_label(url);
                let check = EndpointAtStart::of(*chain_id, chain.pool.chain_id_from(url).await);
                anyhow::ensure!(
                    !check.refuses_start(),
                    "endpoint {label} {check}, configured for chain {chain_id}"
                );
                match check {
                    EndpointAtStart::Serves => chain
                        .verified
                        .store(true, std::sync::atomic::Ordering::Release),
                    _ => tracing::warn!(
                        chain_id, endpoint = %label, answer = %check,
                        "endpoint unreachable at start; its chain is checked again before signing for it"
                    ),
                }
            }
        }
        Ok(())
    }

    /// Ensures the chain's endpoints were seen serving its configured chain id.
    async fn ensure_verified(&self, op_id: &str, chain_id: u64, chain: &EvmChain) -> Result<()> {
        if chain.verified.load(std::sync::atomic::Ordering::Acquire) {
            return Ok(());
        }
        let actual = chain.pool.chain_id().await.map_err(|source| Error::Chain {
            op_id: op_id.to_owned(),
            source,
        })?;
        if actual != chain_id {
            return Err(Error::WrongChain {
                op_id: op_id.to_owned(),
                configured: chain_id,
                served: actual,
            });
        }
        chain
            .verified
            .store(true, std::sync::atomic::Ordering::Release);
        Ok(())
    }

    /// Whether a TLS client certificate (its SHA-256 hex and its identity) may call: one of
    /// the allowed fingerprints or identities; any the client CA issued when neither list is
    /// configured. An identity outlives the certificate's renewal; a fingerprint does not.
    pub(crate) fn allowed_certificate(&self, fingerprint: &str, identity: Option<&str>) -> bool {
        let (fingerprints, identities) = &*self.allowed_certificates;
        (fingerprints.is_empty() && identities.is_empty())
            || fingerprints.iter().any(|f| f == fingerprint)
            || identity.is_some_and(|id| identities.iter().any(|allowed| allowed == id))
    }

    /// Runs a signing transaction: grouped with other callers' when the key signs in this
    /// process (microseconds), alone when it signs in a token — a slow HSM would otherwise
    /// hold a whole group's transaction (and SQLite's write lock) open. A refusal inside the
    /// body (a failed signature, a refused build, the interlock) rolls back everything the body
    /// wrote: a nonce is never allocated, nor a spend recorded, without the payload stored.
    async fn commit<T, F>(&self, in_process: bool, body: F) -> sigcast_store::Result<Result<T>>
    where
        T: Send + 'static,
        F: FnMut(&mut dyn sigcast_store::KvTransaction) -> sigcast_store::Result<Result<T>>
            + Send
            + 'static,
    {
        if in_process {
            self.store.run_grouped_or_refuse(body).await
        } else {
            self.store.run_async_or_refuse(body).await
        }
    }

    /// The keys held.
    pub fn keys(&self) -> &Keyring {
        &self.keys
    }

    /// The operation's stored intent, parsed against the chains this signer serves, and
    /// checked against the record around it: the fingerprint recomputed, the account and chain
    /// taken from the intent. A record whose fields disagree with its intent (written by
    /// something other than the gateway) is refused: the key, its policy and its nonces are
    /// chosen from the intent alone.
    fn stored_intent(&self, op: &pb::Operation) -> Result<Intent> {
        let intent = intent_from_proto("intent", op.intent.as_ref(), Some(&self.rules)).map_err(
            |violations| Error::BadIntent {
                op_id: op.op_id.clone(),
                reason: violations
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; "),
            },
        )?;
        record_matches(op, &intent)?;
        Ok(intent)
    }

    /// The checks before a new transaction of the operation's own intent (a first signature, a
    /// re-sign): the key's policy, and the caller recorded at submit against `[[callers]]`
    /// (the gateway may be misconfigured, or not the only writer of the store). A replacement
    /// that only raises fees or takes the nonce is not checked again: refusing it could only
    /// leave what was signed stuck.
    fn may_sign(&self, op: &pb::Operation, intent: &Intent) -> Result<()> {
        let refused = |v: sigcast_domain::policy::Violation| Error::PolicyDenied {
            op_id: op.op_id.clone(),
            rule: v.0,
        };
        sigcast_domain::callers::Callers(&self.callers)
            .may_submit(&op.caller, intent)
            .map_err(refused)?;
        check_intent(&self.policies, intent).map_err(refused)
    }

    /// Parses the stored intent and finds the key and chain it needs.
    fn resolve(&self, op: &pb::Operation) -> Result<Resolved<'_>> {
        let op_id = op.op_id.as_str();
        let intent = self.stored_intent(op)?;
        let (chain_id, from) = match &intent {
            Intent::EvmTransfer(t) => (t.chain_id, t.from),
            Intent::EvmContractCall(c) => (c.chain_id, c.from),
            other => {
                return Err(Error::UnknownChain {
                    op_id: op_id.to_owned(),
                    chain: other.chain().to_string(),
                });
            }
        };
        let address = Address::from(*from.as_bytes());
        let key = self.keys.get(&address).ok_or_else(|| Error::NoKey {
            op_id: op_id.to_owned(),
            account: address.to_string(),
        })?;
        let chain = self
            .chains
            .get(&chain_id)
            .ok_or_else(|| Error::UnknownChain {
                op_id: op_id.to_owned(),
                chain: format!("eip155:{chain_id}"),
            })?;
        Ok(Resolved {
            intent,
            chain_id,
            from,
            key,
            chain,
        })
    }

    /// Signs the recorded operation `op_id` (or returns its stored signature) for `caller`,
    /// the authenticated identity recorded in the audit trail.
    pub async fn sign(&self, op_id: &str, caller: &str) -> Result<Signed> {
        let root = self.store.root().clone();
        let id = op_id.to_owned();
        let op = self
            .store
            .read_async(move |tx| operations::get(tx, &root, &id))
            .await?
            .ok_or_else(|| Error::NotFound(op_id.to_owned()))?;
        if let Some(done) = already_signed(&op)? {
            return Ok(done);
        }
        if op.chain.starts_with("solana:") {
            return self.sign_solana(op, caller).await;
        }
        let request = self.prepare_initial_evm(&op, caller).await?;
        let in_process = request.key.signs_in_process();
        let outcome = self
            .commit(in_process, move |tx| sign_initial_evm(tx, &request))
            .await??;
        if !outcome.already_signed {
            tracing::info!(sigcast.op_id = %op_id, tx = %outcome.tx_id, "operation signed");
        }
        Ok(outcome)
    }

    /// First signatures of the recorded operations `asked` (each with its span) for `caller`,
    /// each answered as [`Signer::sign`] answers it alone, in the order asked. Those of EVM
    /// keys held in this process are committed together, in one store transaction: their
    /// nonces allocated in the order asked, each checked, signed and recorded exactly as
    /// alone (see [`Signer::commit_together`] for when that transaction cannot commit).
    pub async fn sign_batch(
        &self,
        asked: &[(String, tracing::Span)],
        caller: &str,
    ) -> Vec<Result<Signed>> {
        use tracing::Instrument;
        // A call of replacements only: no batch (nothing read, nothing timed).
        if asked.is_empty() {
            return Vec::new();
        }
        let root = self.store.root().clone();
        let ids: Vec<String> = asked.iter().map(|(id, _)| id.clone()).collect();
        let started = std::time::Instant::now();
        let records: Vec<Result<Option<pb::Operation>>> = match self
            .store
            .read_async(move |tx| {
                ids.iter()
                    .map(|id| operations::get(tx, &root, id))
                    .collect::<sigcast_store::Result<Vec<_>>>()
            })
            .await
        {
            Ok(records) => records.into_iter().map(Ok).collect(),
            // One record that does not read fails only its own operation.
            Err(_) => {
                futures::future::join_all(asked.iter().map(|(id, _)| {
                    let (root, id) = (self.store.root().clone(), id.clone());
                    async move {
                        Ok(self
                            .store
                            .read_async(move |tx| operations::get(tx, &root, &id))
                            .await?)
                    }
                }))
                .await
            }
        };
        let started = observe_stage("read", started);
        // Everything before the transaction, side by side, each in its operation's span:
        // reading the records' intents, the key's policy, the chain's fees and nonces (each
        // read once for all who ask at once).
        let prepared =
            futures::future::join_all(asked.iter().zip(records).map(|((op_id, span), record)| {
                async move {
                    let op = record?.ok_or_else(|| Error::NotFound(op_id.clone()))?;
                    if let Some(done) = already_signed(&op)? {
                        return Ok(Prepared::Done(done));
                    }
                    if op.chain.starts_with("solana:") {
                        return self.sign_solana(op, caller).await.map(Prepared::Done);
                    }
                    let request = self.prepare_initial_evm(&op, caller).await?;
                    Ok(match request.key.signs_in_process() {
                        true => Prepared::Together(request),
                        false => Prepared::Alone(request),
                    })
                }
                .instrument(span.clone())
            }))
            .await;
        let started = observe_stage("prepare", started);
        let mut results: Vec<Option<Result<Signed>>> = Vec::with_capacity(asked.len());
        let mut together = Vec::new();
        let mut alone = Vec::new();
        for (index, prepared) in prepared.into_iter().enumerate() {
            results.push(match prepared {
                Ok(Prepared::Done(signed)) => Some(Ok(signed)),
                Ok(Prepared::Together(request)) => {
                    together.push((index, request));
                    None
                }
                Ok(Prepared::Alone(request)) => {
                    alone.push((index, request));
                    None
                }
                Err(error) => Some(Err(error)),
            });
        }
        // A token's signatures each in a transaction of its own, as `sign` commits them: a
        // slow HSM must not hold the others' transaction open. One after the other, so that
        // their nonces too follow the order asked.
        let alone = async {
            let mut signed = Vec::with_capacity(alone.len());
            for (index, request) in alone {
                let one = self
                    .commit(false, move |tx| sign_initial_evm(tx, &request))
                    .instrument(asked[index].1.clone())
                    .await
                    .map_err(Error::from)
                    .and_then(|signed| signed);
                signed.push((index, one));
            }
            signed
        };
        let (alone, together) = tokio::join!(alone, self.commit_together(together));
        observe_stage("commit", started);
        for (index, result) in alone.into_iter().chain(together) {
            let (op_id, span) = &asked[index];
            if let Ok(signed) = &result
                && !signed.already_signed
            {
                span.in_scope(|| {
                    tracing::info!(sigcast.op_id = %op_id, tx = %signed.tx_id, "operation signed")
                });
            }
            results[index] = Some(result);
        }
        results
            .into_iter()
            .map(|result| result.unwrap_or_else(|| Err(Error::Store(lost()))))
            .collect()
    }

    /// First EVM signatures in one store transaction (see [`Signer::sign_batch`]), with their
    /// indexes in the batch. When that transaction cannot commit — one of them refused inside
    /// it (its rolling window, the interlock), or it is more than one transaction may hold (48
    /// contract calls of 128 KiB), or the store failed — every one is signed again alone, in
    /// order: a refusal or a size costs no other operation its signature, and a refused one
    /// costs one more transaction, not a re-run of the rest per refusal. Not when the store
    /// as a whole refused it (`Error::store_wide`): each alone would wait to meet that again.
    async fn commit_together(
        &self,
        requests: Vec<(usize, InitialEvm)>,
    ) -> Vec<(usize, Result<Signed>)> {
        // Nothing to sign together (a batch of Solana operations, of a token's keys, or signed
        // before): no transaction to wait for, where an empty one took its turn in the group
        // commit (58 ms a Solana batch, BENCHMARKS.md).
        if requests.is_empty() {
            return Vec::new();
        }
        let (indexes, requests): (Vec<usize>, Vec<Arc<InitialEvm>>) = requests
            .into_iter()
            .map(|(index, request)| (index, Arc::new(request)))
            .unzip();
        let body_requests = requests.clone();
        let together = self
            .store
            .run_grouped_or_refuse(move |tx| sign_initial_evm_together(tx, &body_requests))
            .await;
        match together {
            Ok(Ok(signed)) => {
                return indexes
                    .into_iter()
                    .zip(signed.into_iter().map(Ok))
                    .collect();
            }
            // About the whole batch, outside any one operation's span: the line names them all.
            Ok(Err(refusal)) => {
                tracing::debug!(sigcast.op_ids = ?op_ids(&requests), %refusal, "an operation of the batch was refused: signing each alone")
            }
            Err(error) => match error.store_wide(true) {
                // The store as a whole failed (its lock held past the deadline, a newer data
                // format): each alone would meet it again, one after another.
                Some(wide) => {
                    tracing::warn!(sigcast.op_ids = ?op_ids(&requests), %error, "the batch did not commit: the store refused it");
                    return indexes
                        .into_iter()
                        .map(|index| (index, Err(Error::Store(wide.into()))))
                        .collect();
                }
                None => {
                    tracing::warn!(sigcast.op_ids = ?op_ids(&requests), %error, "the batch did not commit: signing each alone")
                }
            },
        }
        let mut results = Vec::with_capacity(indexes.len());
        let mut store_wide: Option<sigcast_store::StoreWide> = None;
        for (index, request) in indexes.into_iter().zip(requests) {
            // One alone met the store's own failure: the rest would wait to meet it too.
            if let Some(wide) = store_wide {
                results.push((index, Err(Error::Store(wide.into()))));
                continue;
            }
            let signed = self
                .store
                .run_grouped_or_refuse(move |tx| sign_initial_evm(tx, &request))
                .await;
            store_wide = signed.as_ref().err().and_then(|e| e.store_wide(false));
            results.push((index, signed.map_err(Error::from).and_then(|signed| signed)));
        }
        results
    }

    /// Everything the first signature of the recorded EVM operation `op` needs before its
    /// store transaction: its intent checked against the record, the key and the caller's and
    /// key's policies, and the chain's nonce, fees and gas read.
    async fn prepare_initial_evm(&self, op: &pb::Operation, caller: &str) -> Result<InitialEvm> {
        let op_id = op.op_id.as_str();
        let Resolved {
            intent,
            chain_id,
            from,
            key,
            chain,
        } = self.resolve(op)?;
        self.ensure_verified(op_id, chain_id, chain).await?;
        let from = Address::from(*from.as_bytes());
        self.may_sign(op, &intent)?;
        let policy = policy_for(&self.policies, &intent.account()).cloned();
        let value = match &intent {
            Intent::EvmTransfer(t) => {
                U256::from_str_radix(t.value.as_str(), 10).unwrap_or(U256::MAX)
            }
            Intent::EvmContractCall(c) => {
                U256::from_str_radix(c.value.as_str(), 10).unwrap_or(U256::MAX)
            }
            _ => U256::ZERO,
        };

        // Chain reads happen before the store transaction, which must not wait on the network.
        let chain_error = |source| Error::Chain {
            op_id: op_id.to_owned(),
            source,
        };
        let (chain_nonce, fees) = tokio::join!(chain.chain_nonce(from), chain.current_fees());
        let (chain_nonce, fees) = (
            chain_nonce.map_err(chain_error)?,
            fees.map_err(chain_error)?,
        );
        let gas_limit = match &intent {
            Intent::EvmContractCall(c) => match c.gas_limit {
                Some(limit) => limit,
                None => {
                    let to = Address::from(*c.to.as_bytes());
                    let estimate = chain
                        .pool
                        .estimate_gas(from, to, c.value.as_str(), &c.data)
                        .await
                        .map_err(chain_error)?;
                    // Headroom: state may change between estimate and inclusion. (Saturating:
                    // the estimate is a node's number; the node refuses a limit over its block.)
                    estimate.saturating_add(estimate / 5)
                }
            },
            _ => TRANSFER_GAS,
        };
        // Held to the caps whatever the node quoted: a node (or something between) that
        // inflates its fees costs at most what the operator allowed.
        let fees = fees.limited(fee_limits(
            chain.max_fee_per_gas,
            policy.as_ref(),
            gas_limit,
        ));

        Ok(InitialEvm {
            root: self.store.root().clone(),
            op_id: op_id.to_owned(),
            caller: caller.to_owned(),
            now: self.clock.now(),
            intent,
            policy,
            value,
            chain_nonce,
            gas_limit,
            fees,
            key,
        })
    }
}

/// Records the time since `started` as a batch's `stage` (`sigcast_signer_batch_seconds`) and
/// answers now, when the next stage starts.
fn observe_stage(stage: &'static str, started: std::time::Instant) -> std::time::Instant {
    let now = std::time::Instant::now();
    sigcast_telemetry::metrics::metrics()
        .signer_stage_duration
        .get_or_create(&sigcast_telemetry::metrics::owned(&[("stage", stage)]))
        .observe((now - started).as_secs_f64());
    now
}

/// Where an operation of a batch goes once read (see [`Signer::sign_batch`]).
enum Prepared {
    /// Already answered: signed before, or a Solana signature made on its own.
    Done(Signed),
    /// Into the batch's one transaction.
    Together(InitialEvm),
    /// Into a transaction of its own (its key is in a token).
    Alone(InitialEvm),
}

/// An operation of a batch left without an answer: never expected, answered as a failure to
/// retry rather than a panic.
fn lost() -> sigcast_store::Error {
    sigcast_store::Error::Task("an operation of the batch was left without an answer".into())
}

/// The operations of a batch, for a line about all of them.
fn op_ids(requests: &[Arc<InitialEvm>]) -> Vec<&str> {
    requests.iter().map(|r| r.op_id.as_str()).collect()
}

/// Everything the first signature of an EVM operation needs, read before its transaction.
pub struct InitialEvm {
    /// The store's root subspace.
    pub root: sigcast_store::tuple::Subspace,
    /// The operation.
    pub op_id: String,
    /// The authenticated caller, for the audit record.
    pub caller: String,
    /// The time recorded.
    pub now: SystemTime,
    /// The stored intent, parsed.
    pub intent: Intent,
    /// The key's policy, for its rolling-window limit.
    pub policy: Option<KeyPolicy>,
    /// The value the intent moves, in wei.
    pub value: U256,
    /// The account's transaction count on chain, as read: allocation goes past the settled
    /// one; the one at the head measures what is in flight.
    pub chain_nonce: AccountNonces,
    /// The transaction's gas limit.
    pub gas_limit: u64,
    /// Its fees.
    pub fees: Fees,
    /// The key of the operation's account.
    pub key: crate::keys::KeyHandle,
}

/// First signatures of several EVM operations inside the caller's one store transaction, each
/// as [`sign_initial_evm`] alone, nonces allocated in the order given. The first refusal is
/// returned as it is, and must roll the whole transaction back (`Store::run_*_or_refuse`):
/// the caller then signs each alone.
pub fn sign_initial_evm_together(
    tx: &mut dyn sigcast_store::KvTransaction,
    requests: &[Arc<InitialEvm>],
) -> sigcast_store::Result<Result<Vec<Signed>>> {
    let mut signed = Vec::with_capacity(requests.len());
    for request in requests {
        match sign_initial_evm(tx, request)? {
            Ok(one) => signed.push(one),
            Err(refusal) => return Ok(Err(refusal)),
        }
    }
    Ok(Ok(signed))
}

/// The first signature of an EVM operation, inside the caller's store transaction: the
/// rolling-window check and spend, the nonce allocation (the interlock), the signature, the
/// payload and audit record, and the operation SIGNED. A refusal after anything was written
/// must roll the transaction back (`Store::run_*_or_refuse`). Re-running it after a commit
/// finds the operation signed and returns its stored signature.
pub fn sign_initial_evm(
    tx: &mut dyn sigcast_store::KvTransaction,
    r: &InitialEvm,
) -> sigcast_store::Result<Result<Signed>> {
    let Some(stored) = operations::get(tx, &r.root, &r.op_id)? else {
        return Ok(Err(Error::NotFound(r.op_id.clone())));
    };
    if let Some(done) = already_signed(&stored).transpose() {
        return Ok(done);
    }
    // The record read inside the transaction is the one whose intent was checked.
    if let Err(refusal) = record_matches(&stored, &r.intent) {
        return Ok(Err(refusal));
    }
    let chain_key = stored.chain.clone();
    let account = stored.account.clone();
    if let Some(policy) = r.policy.as_ref().filter(|p| p.window_secs > 0) {
        let spend = WindowSpend {
            root: &r.root,
            chain: &chain_key,
            account: &account,
            op_id: &r.op_id,
            unit: "wei",
            value: r.value,
            now: r.now,
        };
        if let Err(refusal) = spend.record(tx, policy)? {
            return Ok(Err(refusal));
        }
    }
    let allocation = match accounts::allocate_nonce(
        tx,
        &r.root,
        &chain_key,
        &account,
        &r.op_id,
        r.chain_nonce.settled,
    )? {
        Ok(allocation) => allocation,
        Err(taken) => return Ok(Err(Error::Interlock(taken))),
    };
    // A gauge set is idempotent: a body re-run after an unknown commit sets it again.
    sigcast_telemetry::metrics::metrics()
        .nonce_lag
        .get_or_create(&sigcast_telemetry::metrics::owned(&[
            ("chain", stored.chain.as_str()),
            ("account", account.as_str()),
        ]))
        .set(
            i64::try_from(allocation.nonce.saturating_sub(r.chain_nonce.head)).unwrap_or(i64::MAX),
        );
    if let Some((store_next, chain_next)) = allocation.external_gap {
        tracing::warn!(
            sigcast.op_id = %r.op_id, account = %account, store_next, chain_next,
            "the chain's nonce is ahead of the store's: another sender used this key; \
             operations at the skipped nonces will be proven rejected"
        );
    }
    let params = TxParams {
        nonce: allocation.nonce,
        gas_limit: r.gas_limit,
        fees: r.fees,
    };
    let signing = Signing {
        root: &r.root,
        op_id: &r.op_id,
        attempt: 1,
        purpose: SignPurpose::Initial,
        account: &account,
        caller: &r.caller,
        now: r.now,
    };
    let signed = match signing.sign_and_record(tx, &r.intent, params, &r.key)? {
        Ok(signed) => signed,
        Err(e) => return Ok(Err(e)),
    };
    let mut op = stored.clone();
    op.set_state(state_to_proto(OperationState::Signed));
    op.signing = Some(pb::operation::Signing::Evm(pb::EvmSigning {
        nonce: allocation.nonce,
    }));
    op.attempts = vec![pb::Attempt {
        number: 1,
        tx_id: signed.hash.to_string(),
        outcome: pb::AttemptOutcome::Pending.into(),
        max_fee_per_gas: params.fees.max_per_gas().to_string(),
        ..Default::default()
    }];
    operations::put(tx, &r.root, Some(&stored), &mut op, r.now)?;
    Ok(Ok(Signed {
        tx_id: signed.hash.to_string(),
        attempt: 1,
        already_signed: false,
    }))
}

impl Signer {
    /// Signs a declared replacement of `op_id`'s last attempt at the same nonce: a fee bump, or
    /// a cancel. Only the operation that owns the nonce gets a second payload there, and only
    /// while `replaces_attempt` is still its last attempt; otherwise the last one is returned.
    /// An EVM replacement is priced for a base fee of at least `min_base_fee` (the head the
    /// caller decided at), whatever this signer's own read answers.
    pub async fn sign_replacement(
        &self,
        op_id: &str,
        kind: Replacement,
        replaces_attempt: u32,
        min_base_fee: Option<u128>,
        caller: &str,
    ) -> Result<Signed> {
        let root = self.store.root().clone();
        let id = op_id.to_owned();
        let read = self
            .store
            .read_async(move |tx| {
                let op = operations::get(tx, &root, &id)?;
                let priced_from = op
                    .as_ref()
                    .and_then(|op| priced_against(op).map(|a| a.number));
                let payload = match priced_from {
                    Some(n) => accounts::payload(tx, &root, &id, n)?,
                    None => None,
                };
                Ok((op, payload))
            })
            .await?;
        let (Some(op), Some(previous_raw)) = read else {
            return Err(Error::NotFound(op_id.to_owned()));
        };
        if op.chain.starts_with("solana:") {
            // On Solana only a durable-nonce operation has a replacement: its cancel.
            return match kind {
                Replacement::Cancel => self.cancel_solana(op_id, replaces_attempt, caller).await,
                _ => Err(Error::NotSignable {
                    op_id: op_id.to_owned(),
                    state: format!(
                        "{} (no {} on Solana)",
                        op.state().as_str_name(),
                        kind.reason()
                    ),
                }),
            };
        }
        let not_signable = || Error::NotSignable {
            op_id: op_id.to_owned(),
            state: op.state().as_str_name().to_owned(),
        };
        if !matches!(
            state_from_proto(op.state()),
            Some(OperationState::Signed | OperationState::Sent)
        ) {
            return Err(not_signable());
        }
        let last = op.attempts.last().ok_or_else(not_signable)?;
        // A self-transfer (cancel or gap fill) is final: nothing replaces it, and there is one;
        // but a cancel every send of which was refused, which a cancel at a higher price may.
        let existing_self_transfer = sigcast_protocol::record::final_self_transfer(
            &op,
            (kind == Replacement::Cancel).then_some(replaces_attempt),
        );
        if let Some(existing) = existing_self_transfer {
            return Ok(Signed {
                tx_id: existing.tx_id.clone(),
                attempt: existing.number,
                already_signed: true,
            });
        }
        if last.number != replaces_attempt {
            return Ok(Signed {
                tx_id: last.tx_id.clone(),
                attempt: last.number,
                already_signed: true,
            });
        }
        if kind == Replacement::FeeBump && op.cancel_requested {
            // Refused again in the transaction, where a cancel asked for since counts too.
            return Err(fee_bump_after_a_cancel(&op));
        }
        if kind == Replacement::Cancel && !op.cancel_requested {
            return Err(no_cancel_asked(&op));
        }
        if kind == Replacement::GapFill && !sigcast_protocol::evm::all_refused(&op) {
            return Err(no_gap(&op));
        }
        // The attempt whose payload was read above, if it was sent (0: none was, and the
        // payload read is the newest attempt's).
        let outbids = newest_sent(&op).map_or(0, |a| a.number);
        let previous = params_of(&previous_raw).ok_or_else(|| Error::BadIntent {
            op_id: op_id.to_owned(),
            reason: "the stored payload does not decode".into(),
        })?;
        let Resolved {
            intent,
            chain_id,
            from,
            key,
            chain,
        } = self.resolve(&op)?;
        self.ensure_verified(op_id, chain_id, chain).await?;
        let current = chain.fees_read_now().await.map_err(|source| Error::Chain {
            op_id: op_id.to_owned(),
            source,
        })?;
        let policy = policy_for(&self.policies, &op.account);
        let bumps = op
            .attempts
            .iter()
            .filter(|a| a.reason == Replacement::FeeBump.reason())
            .count();
        if let Some(max) = policy.and_then(|p| p.max_fee_bumps)
            && kind == Replacement::FeeBump
            && bumps >= usize::try_from(max).unwrap_or(usize::MAX)
        {
            return Err(Error::FeeCap {
                op_id: op_id.to_owned(),
                attempt: replaces_attempt,
                why: format!("the key's policy allows {max} fee bumps, all made"),
            });
        }
        let gas_limit = match kind {
            Replacement::FeeBump => previous.gas_limit,
            Replacement::Cancel | Replacement::GapFill => TRANSFER_GAS,
        };
        let limits = fee_limits(chain.max_fee_per_gas, policy, gas_limit);
        let in_a_pool = may_sit_in_a_pool(&op);
        let fees = replacement_fees(
            kind,
            previous.fees,
            current,
            min_base_fee,
            limits,
            in_a_pool,
        )
        .ok_or_else(|| Error::FeeCap {
            op_id: op_id.to_owned(),
            attempt: replaces_attempt,
            why: format!(
                "held to the fee caps ({}; chain cap {} gwei) it would not replace it",
                describe(limits),
                chain.max_fee_per_gas_gwei
            ),
        })?;
        let intent = match kind {
            Replacement::FeeBump => intent,
            Replacement::Cancel | Replacement::GapFill => Intent::EvmTransfer(EvmTransfer {
                chain_id,
                from,
                to: EvmAddress::from(*from.as_bytes()),
                value: Wei::zero(),
            }),
        };
        let params = TxParams {
            nonce: previous.nonce,
            gas_limit,
            fees,
        };

        let request = ReplacementEvm {
            root: self.store.root().clone(),
            op_id: op_id.to_owned(),
            caller: caller.to_owned(),
            now: self.clock.now(),
            kind,
            replaces_attempt,
            outbids,
            intent,
            params,
            key,
        };
        let in_process = request.key.signs_in_process();
        let signed = self
            .commit(in_process, move |tx| sign_replacement_evm(tx, &request))
            .await??;
        if !signed.already_signed {
            tracing::info!(sigcast.op_id = %op_id, tx = %signed.tx_id, attempt = signed.attempt, reason = kind.reason(), "replacement signed");
        }
        Ok(signed)
    }
}

/// Whether an attempt of `op` was sent, so that a transaction of it may sit in a pool for a
/// replacement to outbid (see [`replacement_fees`]).
pub fn may_sit_in_a_pool(op: &pb::Operation) -> bool {
    op.attempts.iter().any(was_sent)
}

/// The attempt whose fees a replacement of `op` is priced from: the newest that was sent (each
/// one pays more than the one before it), else the newest. One signed and never sent sits in
/// no pool and has nothing to outbid: a fee bump signed on a decision read before a cancel was
/// asked for, its send declined, would otherwise price the cancel a bump above itself and, at
/// the fee cap, leave the operation uncancellable.
pub fn priced_against(op: &pb::Operation) -> Option<&pb::Attempt> {
    newest_sent(op).or(op.attempts.last())
}

/// The newest attempt of `op` recorded as sent, if any.
pub fn newest_sent(op: &pb::Operation) -> Option<&pb::Attempt> {
    op.attempts.iter().rev().find(|a| was_sent(a))
}

/// The fees of a `kind` replacement of an attempt signed with `previous`, with fees at
/// `current` now, priced for a base fee of at least `min_base_fee` (the head the replacement
/// was decided at, when the caller names it: a read from an endpoint behind that head would
/// price it under it), held to `limits`; `None` when they leave no room for a replacement
/// a node would take. Only a transaction that may sit in a pool (`in_a_pool`: an attempt was
/// sent) must be outbid: a gap fill replaces nothing (every attempt was refused), nor does a
/// cancel of an operation never sent; a fee bump or a cancel no node takes would only be a
/// second payload at the nonce.
pub fn replacement_fees(
    kind: Replacement,
    previous: Fees,
    current: Fees,
    min_base_fee: Option<u128>,
    limits: FeeLimits,
    in_a_pool: bool,
) -> Option<Fees> {
    let current = match min_base_fee {
        Some(base_fee) => current.for_base_fee_at_least(base_fee),
        None => current,
    };
    let fees = Fees::bumped(previous, current).limited(limits);
    let must_outbid = in_a_pool && kind != Replacement::GapFill;
    (!must_outbid || fees.replaces(&previous)).then_some(fees)
}

/// Everything a declared replacement of an EVM operation's newest attempt needs.
pub struct ReplacementEvm {
    /// The store's root subspace.
    pub root: sigcast_store::tuple::Subspace,
    /// The operation.
    pub op_id: String,
    /// The authenticated caller, for the audit record.
    pub caller: String,
    /// The time recorded.
    pub now: SystemTime,
    /// Why it is replaced.
    pub kind: Replacement,
    /// The attempt the caller saw last: a new one is signed only while it is the newest.
    pub replaces_attempt: u32,
    /// The newest attempt sent when the fees were priced ([`newest_sent`]; 0: none was): none
    /// after it may have been sent since, or the replacement would not outbid what sits in a
    /// pool.
    pub outbids: u32,
    /// What the replacement carries: the operation's intent, or a self-transfer.
    pub intent: Intent,
    /// Its parameters, at the operation's nonce.
    pub params: TxParams,
    /// The key of the operation's account.
    pub key: crate::keys::KeyHandle,
}

/// A declared replacement at the operation's own nonce, inside the caller's store
/// transaction. The interlock: only the operation that owns the nonce gets a second payload
/// there, and only while `replaces_attempt` is still its newest attempt (a retried request gets
/// the newest one back instead of signing twice).
pub fn sign_replacement_evm(
    tx: &mut dyn sigcast_store::KvTransaction,
    r: &ReplacementEvm,
) -> sigcast_store::Result<Result<Signed>> {
    let Some(stored) = operations::get(tx, &r.root, &r.op_id)? else {
        return Ok(Err(Error::NotFound(r.op_id.clone())));
    };
    let Some(last) = stored.attempts.last().cloned() else {
        return Ok(Err(Error::NotFound(r.op_id.clone())));
    };
    if last.number != r.replaces_attempt {
        return Ok(Ok(Signed {
            tx_id: last.tx_id,
            attempt: last.number,
            already_signed: true,
        }));
    }
    // Read in this transaction: a fee bump decided on a record from before a cancel was asked
    // for would carry the operation's effect at a higher fee; the cancel replaces it instead.
    if r.kind == Replacement::FeeBump && stored.cancel_requested {
        return Ok(Err(fee_bump_after_a_cancel(&stored)));
    }
    if r.kind == Replacement::Cancel && !stored.cancel_requested {
        return Ok(Err(no_cancel_asked(&stored)));
    }
    if r.kind == Replacement::GapFill && !sigcast_protocol::evm::all_refused(&stored) {
        return Ok(Err(no_gap(&stored)));
    }
    if let Some(sent) = stored
        .attempts
        .iter()
        .find(|a| a.number > r.outbids && was_sent(a))
    {
        let priced = match r.outbids {
            0 => "when none was sent".to_owned(),
            n => format!("from attempt {n}"),
        };
        return Ok(Err(Error::NotSignable {
            op_id: r.op_id.clone(),
            state: format!(
                "{} (attempt {} was sent after the replacement was priced {priced}: priced \
                 again at the next check)",
                stored.state().as_str_name(),
                sent.number,
            ),
        }));
    }
    // DO NOT TURN THIS OFF: a second payload at a nonce only for the operation that owns it.
    let nonce = r.params.nonce;
    let owner = accounts::nonce_owner(tx, &r.root, &stored.chain, &stored.account, nonce)?;
    if owner.as_deref() != Some(r.op_id.as_str()) {
        return Ok(Err(Error::Interlock(accounts::NonceTaken {
            chain: stored.chain.clone(),
            account: stored.account.clone(),
            nonce,
            owner: owner.unwrap_or_default(),
        })));
    }
    let number = last.number + 1;
    let signing = Signing {
        root: &r.root,
        op_id: &r.op_id,
        attempt: number,
        purpose: r.kind.purpose(),
        account: &stored.account,
        caller: &r.caller,
        now: r.now,
    };
    let signed = match signing.sign_and_record(tx, &r.intent, r.params, &r.key)? {
        Ok(signed) => signed,
        Err(e) => return Ok(Err(e)),
    };
    let mut op = stored.clone();
    op.attempts.push(pb::Attempt {
        number,
        tx_id: signed.hash.to_string(),
        outcome: pb::AttemptOutcome::Pending.into(),
        reason: r.kind.reason().into(),
        max_fee_per_gas: r.params.fees.max_per_gas().to_string(),
        ..Default::default()
    });
    operations::put(tx, &r.root, Some(&stored), &mut op, r.now)?;
    Ok(Ok(Signed {
        tx_id: signed.hash.to_string(),
        attempt: number,
        already_signed: false,
    }))
}

/// The refusal of a fee bump once a cancel was asked for: the cancel replaces the attempt.
fn fee_bump_after_a_cancel(op: &pb::Operation) -> Error {
    Error::NotSignable {
        op_id: op.op_id.clone(),
        state: format!(
            "{} (a cancel was asked for: its cancel replaces it, not a fee bump)",
            op.state().as_str_name()
        ),
    }
}

/// The refusal of a cancel nobody asked for: the signer signs only what the store records.
pub(crate) fn no_cancel_asked(op: &pb::Operation) -> Error {
    Error::NotSignable {
        op_id: op.op_id.clone(),
        state: format!(
            "{} (no cancel was asked for: CancelOperation records one first)",
            op.state().as_str_name()
        ),
    }
}

/// The refusal of a gap fill while an attempt of the operation may land: the self-transfer
/// would end an operation nobody cancelled.
fn no_gap(op: &pb::Operation) -> Error {
    Error::NotSignable {
        op_id: op.op_id.clone(),
        state: format!(
            "{} (a gap fill takes the nonce only once every send of every attempt was refused)",
            op.state().as_str_name()
        ),
    }
}

/// One signature being made inside a store transaction.
struct Signing<'a> {
    root: &'a sigcast_store::tuple::Subspace,
    op_id: &'a str,
    attempt: u32,
    purpose: SignPurpose,
    account: &'a str,
    caller: &'a str,
    now: SystemTime,
}

impl Signing<'_> {
    /// Builds the transaction, signs its digest with `key`, and records the signed payload and
    /// the audit record under this attempt, in the caller's transaction.
    fn sign_and_record(
        &self,
        tx: &mut dyn sigcast_store::KvTransaction,
        intent: &Intent,
        params: TxParams,
        key: &crate::keys::KeyHandle,
    ) -> sigcast_store::Result<Result<sigcast_evm::SignedTx>> {
        let op_id = self.op_id.to_owned();
        let unsigned = match build_transaction(intent, params) {
            Ok(unsigned) => unsigned,
            Err(e) => {
                return Ok(Err(Error::BadIntent {
                    op_id,
                    reason: e.to_string(),
                }));
            }
        };
        let digest = unsigned.signature_hash();
        let signature = match key.sign_hash(&digest) {
            Ok(signature) => signature,
            Err(reason) => {
                return Ok(Err(Error::Sign {
                    op_id,
                    nonce: params.nonce,
                    reason,
                }));
            }
        };
        let signed = unsigned.into_signed(signature);
        // An attempt's bytes never change once stored (unreachable while attempts are
        // numbered in the transaction that stores them; refused, not overwritten, if not).
        if !accounts::put_payload(tx, self.root, self.op_id, self.attempt, &signed.raw)? {
            return Ok(Err(Error::PayloadDiffers {
                op_id: self.op_id.to_owned(),
                attempt: self.attempt,
            }));
        }
        let audit = AuditRecord {
            op_id,
            attempt: self.attempt,
            purpose: self.purpose.into(),
            key_id: self.account.to_owned(),
            digest: digest.to_string(),
            tx_id: signed.hash.to_string(),
            nonce: params.nonce,
            time_unix_ms: unix_millis(self.now),
            caller: self.caller.to_owned(),
        };
        accounts::append_audit(
            tx,
            self.root,
            self.op_id,
            self.attempt,
            &audit.encode_to_vec(),
        )?;
        Ok(Ok(signed))
    }
}

/// One operation's spend against its key's rolling window, inside its signing transaction.
pub(crate) struct WindowSpend<'a> {
    pub(crate) root: &'a sigcast_store::tuple::Subspace,
    pub(crate) chain: &'a str,
    pub(crate) account: &'a str,
    pub(crate) op_id: &'a str,
    /// "wei" or "lamports".
    pub(crate) unit: &'a str,
    pub(crate) value: U256,
    pub(crate) now: SystemTime,
}

impl WindowSpend<'_> {
    /// Refuses the spend if it would take the window over the policy's limit; records it
    /// otherwise (a refusal after this must roll the transaction back).
    pub(crate) fn record(
        &self,
        tx: &mut dyn sigcast_store::KvTransaction,
        policy: &KeyPolicy,
    ) -> sigcast_store::Result<Result<()>> {
        let now_ms = unix_millis(self.now);
        let since =
            now_ms - i64::try_from(policy.window_secs.saturating_mul(1000)).unwrap_or(i64::MAX);
        let spent = accounts::spent_since(tx, self.root, self.chain, self.account, since)?
            .iter()
            .fold(U256::ZERO, |sum, v| {
                sum.saturating_add(U256::from_be_slice(v))
            });
        if let Err(rule) = check_window(policy, self.unit, spent, self.value) {
            // Named: the key may be a co-signer of another account's operation.
            return Ok(Err(Error::PolicyDenied {
                op_id: self.op_id.to_owned(),
                rule: format!("{}: {rule}", self.account),
            }));
        }
        accounts::record_spend(
            tx,
            self.root,
            self.chain,
            self.account,
            now_ms,
            self.op_id,
            &self.value.to_be_bytes::<32>(),
        )?;
        Ok(Ok(()))
    }
}

/// The rolling-window rule for an amount in `unit` ("wei" or "lamports"; the limit is
/// `window_max_value_wei` or `window_max_lamports`): `spent` is what the key signed within
/// the policy's window.
fn check_window(policy: &KeyPolicy, unit: &str, spent: U256, value: U256) -> Result<(), String> {
    let (field, limit) = match unit {
        "lamports" => ("window_max_lamports", &policy.window_max_lamports),
        _ => ("window_max_value_wei", &policy.window_max_value_wei),
    };
    let Some(max) = self::limit(limit) else {
        return Ok(()); // no window limit (validated at start)
    };
    let total = spent.saturating_add(value);
    if total > max {
        return Err(format!(
            "value {value} {unit} would bring the last {} s to {total} {unit}, over {field} {max}",
            policy.window_secs
        ));
    }
    Ok(())
}

/// Whether the record's own fields say what its intent says (see `Signer::stored_intent`).
pub(crate) fn record_matches(op: &pb::Operation, intent: &Intent) -> Result<()> {
    let fingerprint = intent.fingerprint().to_string();
    let (account, chain) = (intent.account(), intent.chain().to_string());
    let mismatch = [
        ("intent_fingerprint", &op.intent_fingerprint, &fingerprint),
        ("account", &op.account, &account),
        ("chain", &op.chain, &chain),
    ]
    .into_iter()
    .find(|(_, recorded, computed)| recorded != computed);
    match mismatch {
        None => Ok(()),
        Some((field, recorded, computed)) => Err(Error::BadIntent {
            op_id: op.op_id.clone(),
            reason: format!(
                "the record's {field} is {recorded:?} but its intent gives {computed:?}: \
                 the record was not written by the gateway; nothing is signed"
            ),
        }),
    }
}

fn unix_millis(time: SystemTime) -> i64 {
    time.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The stored signature of an operation that is past RECEIVED; an error for one that can no
/// longer be signed; `None` for one waiting to be signed.
fn already_signed(op: &pb::Operation) -> Result<Option<Signed>> {
    match state_from_proto(op.state()) {
        Some(OperationState::Received) => Ok(None),
        Some(OperationState::Cancelled | OperationState::Rejected) | None => {
            Err(Error::NotSignable {
                op_id: op.op_id.clone(),
                state: op.state().as_str_name().to_owned(),
            })
        }
        Some(_) => {
            let last = op.attempts.last().ok_or_else(|| Error::NotSignable {
                op_id: op.op_id.clone(),
                state: format!("{} without attempts", op.state().as_str_name()),
            })?;
            Ok(Some(Signed {
                tx_id: last.tx_id.clone(),
                attempt: last.number,
                already_signed: true,
            }))
        }
    }
}

#[cfg(test)]
mod fee_cap_tests {
    use super::*;

    #[test]
    fn a_limit_left_empty_limits_nothing() {
        // A window over lamports only: transfers in wei are not held to a limit of 0.
        let policy = KeyPolicy {
            window_secs: 60,
            window_max_lamports: "10".into(),
            ..Default::default()
        };
        assert_eq!(
            check_window(&policy, "wei", U256::from(5u64), U256::from(7u64)),
            Ok(())
        );
        assert!(check_window(&policy, "lamports", U256::from(5u64), U256::from(7u64)).is_err());
    }

    #[test]
    fn the_policy_lowers_the_chains_cap_and_never_raises_it() {
        const GWEI: u128 = 1_000_000_000;
        let chain = 1_000 * GWEI;
        assert_eq!(fee_limits(chain, None, 21_000), FeeLimits::per_gas(chain));
        let policy = KeyPolicy {
            max_fee_per_gas_gwei: 5,
            max_priority_fee_per_gas_gwei: 2,
            ..Default::default()
        };
        assert_eq!(
            fee_limits(chain, Some(&policy), 21_000),
            FeeLimits {
                per_gas: 5 * GWEI,
                priority: 2 * GWEI
            }
        );
        let generous = KeyPolicy {
            max_fee_per_gas_gwei: 5_000,
            ..Default::default()
        };
        assert_eq!(fee_limits(chain, Some(&generous), 21_000).per_gas, chain);
        // At most 21,000 × 3 gwei per transaction: 3 gwei a gas for a transfer, less for a
        // call that may use more gas.
        let total = KeyPolicy {
            max_fee_wei: (21_000 * 3 * GWEI).to_string(),
            ..Default::default()
        };
        assert_eq!(fee_limits(chain, Some(&total), 21_000).per_gas, 3 * GWEI);
        assert_eq!(fee_limits(chain, Some(&total), 63_000).per_gas, GWEI);
        let inflated = Fees::Eip1559 {
            max_fee_per_gas: 10_000 * GWEI,
            max_priority_fee_per_gas: 9_000 * GWEI,
        };
        assert_eq!(
            inflated.limited(fee_limits(chain, Some(&policy), 21_000)),
            Fees::Eip1559 {
                max_fee_per_gas: 5 * GWEI,
                max_priority_fee_per_gas: 2 * GWEI
            }
        );
    }

    #[test]
    fn at_the_cap_only_what_must_outbid_a_pooled_transaction_is_refused() {
        let cap = 100;
        let at_cap = Fees::Eip1559 {
            max_fee_per_gas: 100,
            max_priority_fee_per_gas: 10,
        };
        for kind in [Replacement::FeeBump, Replacement::Cancel] {
            assert_eq!(
                replacement_fees(kind, at_cap, at_cap, None, FeeLimits::per_gas(cap), true),
                None,
                "{kind:?}"
            );
        }
        // A cancel of an operation whose transaction never left the store takes the nonce
        // at the cap: nothing is in a pool to outbid, and its nonce must be used.
        let cancel = replacement_fees(
            Replacement::Cancel,
            at_cap,
            at_cap,
            None,
            FeeLimits::per_gas(cap),
            false,
        )
        .unwrap();
        assert_eq!(cancel.max_per_gas(), cap);
        let fill = replacement_fees(
            Replacement::GapFill,
            at_cap,
            at_cap,
            None,
            FeeLimits::per_gas(cap),
            true,
        )
        .unwrap();
        assert_eq!(fill.max_per_gas(), cap);
        // Below the cap a bump outbids.
        let low = Fees::Eip1559 {
            max_fee_per_gas: 50,
            max_priority_fee_per_gas: 10,
        };
        let bump = replacement_fees(
            Replacement::FeeBump,
            low,
            low,
            None,
            FeeLimits::per_gas(cap),
            true,
        )
        .unwrap();
        assert!(bump.replaces(&low) && bump.max_per_gas() <= cap);
        // Read behind the head it was decided at (a base fee of 20 read, 45 at that head),
        // a bump is priced for that head, within the cap; past the cap's room, none.
        let behind = |floor| {
            replacement_fees(
                Replacement::FeeBump,
                low,
                low,
                Some(floor),
                FeeLimits::per_gas(cap),
                true,
            )
        };
        assert_eq!(behind(45).unwrap().max_per_gas(), 100);
        assert_eq!(behind(20).unwrap().max_per_gas(), bump.max_per_gas());
        assert_eq!(
            replacement_fees(
                Replacement::FeeBump,
                low,
                low,
                Some(44),
                FeeLimits::per_gas(1_000),
                true,
            )
            .unwrap()
            .max_per_gas(),
            98
        );
    }

    #[test]
    fn only_an_endpoint_of_another_chain_refuses_the_start() {
        let serves = EndpointAtStart::of(31337, Ok::<_, String>(31337));
        let another = EndpointAtStart::of(31337, Ok::<_, String>(1));
        let unanswered = EndpointAtStart::of(31337, Err::<u64, _>("connection refused"));
        assert_eq!(serves, EndpointAtStart::Serves);
        assert_eq!(another, EndpointAtStart::ServesAnother(1));
        assert_eq!(
            unanswered,
            EndpointAtStart::Unanswered("connection refused".into())
        );
        assert!(another.refuses_start());
        assert!(!serves.refuses_start() && !unanswered.refuses_start());
        assert_eq!(another.to_string(), "serves chain 1");
    }
}

#[cfg(test)]
mod fresh_tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn callers_at_the_same_moment_share_one_read() {
        let fresh = Arc::new(Fresh::<u64>::default());
        let reads = Arc::new(AtomicU32::new(0));
        let callers = (0..32).map(|_| {
            let (fresh, reads) = (fresh.clone(), reads.clone());
            tokio::spawn(async move {
                fresh
                    .get(|| async {
                        reads.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        Ok(7)
                    })
                    .await
            })
        });
        for answer in futures::future::join_all(callers).await {
            assert_eq!(answer.unwrap().unwrap(), 7);
        }
        assert_eq!(reads.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_failed_read_answers_its_waiters_and_the_next_caller_reads_again() {
        let fresh = Arc::new(Fresh::<u64>::default());
        let reads = Arc::new(AtomicU32::new(0));
        let failing = |fresh: Arc<Fresh<u64>>, reads: Arc<AtomicU32>| async move {
            fresh
                .get(|| async {
                    reads.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    Err(sigcast_jsonrpc::Error::NoEndpoints)
                })
                .await
        };
        let callers = (0..8).map(|_| tokio::spawn(failing(fresh.clone(), reads.clone())));
        for answer in futures::future::join_all(callers).await {
            let error = answer.unwrap().unwrap_err();
            assert!(error.to_string().contains("no RPC endpoint"), "{error}");
        }
        assert_eq!(
            reads.load(Ordering::SeqCst),
            1,
            "one read for all the waiters"
        );
        // A caller after the failure is not answered with it: it reads.
        let value = fresh.get(|| async { Ok(9) }).await.unwrap();
        assert_eq!(value, 9);
    }

    #[tokio::test]
    async fn a_value_read_before_a_caller_asked_since_is_read_again_and_kept() {
        let fresh = Fresh::<u64>::default();
        let reads = AtomicU32::new(0);
        let read = |value: u64| {
            let reads = &reads;
            move || async move {
                reads.fetch_add(1, Ordering::SeqCst);
                Ok(value)
            }
        };
        assert_eq!(fresh.get(read(7)).await.unwrap(), 7);
        assert_eq!(fresh.get(read(8)).await.unwrap(), 7, "fresh for a second");
        let asked = std::time::Instant::now();
        assert_eq!(fresh.get_read_since(asked, read(9)).await.unwrap(), 9);
        assert_eq!(reads.load(Ordering::SeqCst), 2);
        // Read after `asked`: fresh for a caller who asked then, and kept for the others.
        assert_eq!(fresh.get_read_since(asked, read(10)).await.unwrap(), 9);
        assert_eq!(fresh.get(read(11)).await.unwrap(), 9);
        assert_eq!(reads.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_kept_value_is_answered_while_a_read_since_runs() {
        let fresh = Arc::new(Fresh::<u64>::default());
        assert_eq!(fresh.get(|| async { Ok(7) }).await.unwrap(), 7);
        let (started, finish) = (
            Arc::new(tokio::sync::Notify::new()),
            Arc::new(tokio::sync::Notify::new()),
        );
        let forced = {
            let (fresh, started, finish) = (fresh.clone(), started.clone(), finish.clone());
            tokio::spawn(async move {
                fresh
                    .get_read_since(std::time::Instant::now(), || async move {
                        started.notify_one();
                        finish.notified().await;
                        Ok(9)
                    })
                    .await
            })
        };
        started.notified().await;
        // The forced read is under way and cannot end until told: a caller content with the
        // value kept is answered without waiting for it (waiting, it would wait forever).
        let kept = tokio::time::timeout(Duration::from_secs(10), fresh.get(|| async { Ok(8) }))
            .await
            .expect("answered while the other read runs");
        assert_eq!(kept.unwrap(), 7);
        finish.notify_one();
        assert_eq!(forced.await.unwrap().unwrap(), 9);
        assert_eq!(fresh.get(|| async { Ok(10) }).await.unwrap(), 9, "kept");
    }

    #[tokio::test]
    async fn a_count_at_depth_no_endpoint_answers_names_the_setting() {
        // Nothing listens on port 1: the read fails as on a node keeping no state that deep.
        let chain = EvmChain {
            pool: EvmRpc::new(&["http://127.0.0.1:1".into()], Duration::from_secs(1)).unwrap(),
            confirmations: 3,
            tx_type: TxType::Eip1559,
            max_fee_per_gas: 1,
            max_fee_per_gas_gwei: 1,
            fees: Fresh::default(),
            nonces: std::sync::Mutex::new(HashMap::new()),
            verified: std::sync::atomic::AtomicBool::new(true),
            chain_id: 31337,
            served: std::sync::Mutex::new(HashMap::new()),
        };
        let error = chain
            .chain_nonce(Address::ZERO)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("3 blocks deep") && error.contains("`confirmations`"),
            "{error}"
        );
    }
}

#[cfg(test)]
pub(crate) mod replacement_tests {
    use super::*;
    use crate::keys::{KeyHandle, KeystoreKey};
    use sigcast_domain::OpId;

    const GWEI: u128 = 1_000_000_000;

    fn fees(max_gwei: u128) -> Fees {
        Fees::Eip1559 {
            max_fee_per_gas: max_gwei * GWEI,
            max_priority_fee_per_gas: GWEI,
        }
    }

    fn store(dir: &tempfile::TempDir) -> Store {
        Store::open(&sigcast_store::StoreConfig::sqlite(dir.path().join("db"))).unwrap()
    }

    fn stored(store: &Store, op_id: &str) -> pb::Operation {
        let root = store.root().clone();
        store
            .read(|tx| operations::get(tx, &root, op_id))
            .unwrap()
            .unwrap()
    }

    /// Records attempt `number` of `op_id` as sent.
    pub(crate) fn record_sent(store: &Store, op_id: &str, number: u32) {
        record_now(store, op_id, |op, now| {
            sigcast_protocol::record::record_sending(op, number, now)
        });
    }

    /// Applies `change` to `op_id`'s record now, as the broadcaster records what it learns.
    fn record_now(
        store: &Store,
        op_id: &str,
        change: impl Fn(&mut pb::Operation, SystemTime) -> bool,
    ) {
        let (root, now) = (store.root().clone(), SystemTime::now());
        store
            .run(|tx| {
                operations::update(
                    tx,
                    &root,
                    op_id,
                    operations::Guard::NotTerminal,
                    &mut |op| change(op, now),
                    now,
                )
            })
            .unwrap();
    }

    /// An EVM transfer of a fresh key, signed at attempt 1 (at 10 gwei) and sent; a
    /// replacement of its `replaces_attempt`, outbidding `outbids`, at `max_gwei`.
    fn sent_operation(
        store: &Store,
        op_id: &str,
    ) -> impl Fn(Replacement, u32, u32, u128) -> ReplacementEvm {
        let root = store.root().clone();
        let signer = alloy_signer_local::PrivateKeySigner::random();
        let key = KeyHandle::new(KeystoreKey::new(&signer).unwrap());
        let from = EvmAddress::from(signer.address().into_array());
        let intent = Intent::EvmTransfer(EvmTransfer {
            chain_id: 31337,
            from,
            to: EvmAddress::from([9; 20]),
            value: Wei::parse("1000").unwrap(),
        });
        let new = sigcast_proto::new_operation(&OpId::parse(op_id).unwrap(), &intent);
        let now = SystemTime::now();
        store
            .run(|tx| operations::submit(tx, &root, new.clone(), now))
            .unwrap();
        let initial = InitialEvm {
            root: root.clone(),
            op_id: op_id.into(),
            caller: "test".into(),
            now,
            intent: intent.clone(),
            policy: None,
            value: U256::from(1_000u64),
            chain_nonce: AccountNonces {
                head: 0,
                settled: 0,
            },
            gas_limit: TRANSFER_GAS,
            fees: fees(10),
            key: key.clone(),
        };
        store
            .run(|tx| sign_initial_evm(tx, &initial))
            .unwrap()
            .unwrap();
        record_sent(store, op_id, 1);
        let op_id = op_id.to_owned();
        move |kind, replaces_attempt, outbids, max_gwei| ReplacementEvm {
            root: root.clone(),
            op_id: op_id.clone(),
            caller: "test".into(),
            now,
            kind,
            replaces_attempt,
            outbids,
            intent: match kind {
                Replacement::FeeBump => intent.clone(),
                Replacement::Cancel | Replacement::GapFill => Intent::EvmTransfer(EvmTransfer {
                    chain_id: 31337,
                    from,
                    to: from,
                    value: Wei::zero(),
                }),
            },
            params: TxParams {
                nonce: 0,
                gas_limit: TRANSFER_GAS,
                fees: fees(max_gwei),
            },
            key: key.clone(),
        }
    }

    #[test]
    fn a_fee_bump_is_refused_in_its_transaction_once_a_cancel_was_asked_for() {
        // Decided on a record read before the cancel: signed, it would carry the operation's
        // effect after the caller was told it would be cancelled (review, thirteenth session).
        let dir = tempfile::tempdir().unwrap();
        let store = store(&dir);
        let root = store.root().clone();

        let bump = sent_operation(&store, "kept")(Replacement::FeeBump, 1, 1, 11);
        let signed = store
            .run(|tx| sign_replacement_evm(tx, &bump))
            .unwrap()
            .expect("without a cancel, a fee bump is signed");
        assert_eq!((signed.attempt, signed.already_signed), (2, false));

        let replacement = sent_operation(&store, "cancelled");
        let cancel = store
            .run(|tx| operations::cancel(tx, &root, "cancelled", SystemTime::now()))
            .unwrap();
        assert!(matches!(cancel, operations::CancelOutcome::Requested(_)));
        let refused = store
            .run(|tx| sign_replacement_evm(tx, &replacement(Replacement::FeeBump, 1, 1, 11)))
            .unwrap()
            .expect_err("a cancel was asked for");
        assert!(
            refused.to_string().contains("a cancel was asked for"),
            "{refused}"
        );
        assert_eq!(
            stored(&store, "cancelled").attempts.len(),
            1,
            "nothing signed"
        );
        let payload = store
            .read(|tx| accounts::payload(tx, &root, "cancelled", 2))
            .unwrap();
        assert_eq!(payload, None, "nothing stored");
        let cancel = store
            .run(|tx| sign_replacement_evm(tx, &replacement(Replacement::Cancel, 1, 1, 11)))
            .unwrap()
            .expect("the cancel is signed");
        assert_eq!((cancel.attempt, cancel.already_signed), (2, false));
    }

    #[test]
    fn a_gap_fill_is_signed_only_once_every_send_was_refused() {
        // A gap fill asked for an operation whose attempt may land would end it as a cancel
        // nobody asked for (review, fourteenth session).
        let dir = tempfile::tempdir().unwrap();
        let store = store(&dir);
        let replacement = sent_operation(&store, "refused");
        let gap = || replacement(Replacement::GapFill, 1, 1, 11);
        let refused = store
            .run(|tx| sign_replacement_evm(tx, &gap()))
            .unwrap()
            .expect_err("attempt 1 was sent and may land");
        assert!(refused.to_string().contains("gap fill"), "{refused}");
        assert_eq!(
            stored(&store, "refused").attempts.len(),
            1,
            "nothing signed"
        );
        record_now(&store, "refused", |op, now| {
            let refused = sigcast_protocol::SendOutcome::Refused {
                underpriced: false,
                message: "insufficient funds".into(),
            };
            sigcast_protocol::record::record_outcome(op, 1, "http://node:8545", &refused, now);
            true
        });
        let filled = store
            .run(|tx| sign_replacement_evm(tx, &gap()))
            .unwrap()
            .expect("every send refused: the gap is filled");
        assert_eq!((filled.attempt, filled.already_signed), (2, false));
    }

    #[test]
    fn an_attempt_s_stored_bytes_are_never_signed_over() {
        // Unreachable while attempts are numbered where they are stored; if a store held
        // other bytes for the attempt, its record must not point at a payload not stored.
        let dir = tempfile::tempdir().unwrap();
        let store = store(&dir);
        let root = store.root().clone();
        let replacement = sent_operation(&store, "held");
        store
            .run(|tx| accounts::put_payload(tx, &root, "held", 2, b"other bytes"))
            .unwrap();
        let refused = store
            .run(|tx| sign_replacement_evm(tx, &replacement(Replacement::FeeBump, 1, 1, 11)))
            .unwrap()
            .expect_err("attempt 2 holds other bytes");
        assert!(
            matches!(refused, Error::PayloadDiffers { attempt: 2, .. }),
            "{refused}"
        );
        assert_eq!(stored(&store, "held").attempts.len(), 1, "nothing recorded");
        let kept = store
            .read(|tx| accounts::payload(tx, &root, "held", 2))
            .unwrap();
        assert_eq!(kept.as_deref(), Some(&b"other bytes"[..]));
    }

    #[test]
    fn a_cancel_is_signed_only_once_one_was_asked_for() {
        // The signer signs only what the store records: a cancel nobody asked for (a client
        // of the signer other than the broadcaster, or a bug) would end a caller's operation.
        let dir = tempfile::tempdir().unwrap();
        let store = store(&dir);
        let root = store.root().clone();
        let replacement = sent_operation(&store, "kept");
        let refused = store
            .run(|tx| sign_replacement_evm(tx, &replacement(Replacement::Cancel, 1, 1, 11)))
            .unwrap()
            .expect_err("no cancel was asked for");
        assert!(
            refused.to_string().contains("no cancel was asked for"),
            "{refused}"
        );
        assert_eq!(stored(&store, "kept").attempts.len(), 1, "nothing signed");
        store
            .run(|tx| operations::cancel(tx, &root, "kept", SystemTime::now()))
            .unwrap();
        let cancel = store
            .run(|tx| sign_replacement_evm(tx, &replacement(Replacement::Cancel, 1, 1, 11)))
            .unwrap()
            .expect("asked for, the cancel is signed");
        assert_eq!((cancel.attempt, cancel.already_signed), (2, false));
    }

    #[test]
    fn a_replacement_is_priced_from_the_newest_attempt_sent() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(&dir);
        let replacement = sent_operation(&store, "bumped");
        store
            .run(|tx| sign_replacement_evm(tx, &replacement(Replacement::FeeBump, 1, 1, 11)))
            .unwrap()
            .unwrap();
        // The bump never left the store: attempt 1 is what sits in a pool.
        let op = stored(&store, "bumped");
        assert_eq!(priced_against(&op).map(|a| a.number), Some(1));
        assert!(may_sit_in_a_pool(&op));
        // At a cap of 12 gwei, a cancel priced from the unsent bump (11) finds no room; from
        // attempt 1 (10) it does.
        let cap = FeeLimits::per_gas(12 * GWEI);
        let current = fees(1);
        assert_eq!(
            replacement_fees(Replacement::Cancel, fees(11), current, None, cap, true),
            None
        );
        assert!(
            replacement_fees(Replacement::Cancel, fees(10), current, None, cap, true).is_some(),
            "room to outbid attempt 1"
        );

        // Sent since the replacement was priced from attempt 1: refused, nothing signed.
        record_sent(&store, "bumped", 2);
        let root = store.root().clone();
        store
            .run(|tx| operations::cancel(tx, &root, "bumped", SystemTime::now()))
            .unwrap();
        let refused = store
            .run(|tx| sign_replacement_evm(tx, &replacement(Replacement::Cancel, 2, 1, 11)))
            .unwrap()
            .expect_err("attempt 2 was sent");
        assert!(
            refused.to_string().contains("attempt 2 was sent"),
            "{refused}"
        );
        let op = stored(&store, "bumped");
        assert_eq!(op.attempts.len(), 2, "nothing signed");
        assert_eq!(priced_against(&op).map(|a| a.number), Some(2));
        let signed = store
            .run(|tx| sign_replacement_evm(tx, &replacement(Replacement::Cancel, 2, 2, 13)))
            .unwrap()
            .expect("priced from the newest sent");
        assert_eq!(signed.attempt, 3);
    }
}
