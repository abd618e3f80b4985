//! Reading what one endpoint shows of an operation's nonce: its head, the account's nonce at
//! that head, and the transaction that used the nonce — from a receipt of one of the
//! operation's attempts, or else from the block in which the account's nonce passed it. A
//! null receipt is never taken for anything: nodes show account state before receipts, and
//! prune their indexes.

use crate::rpc::parse_receipt;
use crate::wire;
use alloy_primitives::{Address, B256};
use serde::Deserialize;
use serde_json::{Value, json};
use sigcast_jsonrpc::{Endpoint, RpcError, quantity};
use sigcast_protocol::{BlockRef, EvmLanded, EvmView};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Blocks below the head past which a transaction the node indexes by hash, without its
/// receipt, is no longer taken for a receipt on its way: its block is searched instead.
const RECEIPT_LAG_LIMIT: u64 = 64;

/// Blocks scanned back from the head for the transaction at a nonce when the endpoint keeps
/// no state for older blocks (a pruned node cannot answer the nonce at a past block).
const SCAN_BLOCKS: u64 = 128;

/// Blocks back from the head walked down for an operation's inclusion (see
/// [`RecentReceipts`]); an inclusion further down is read by its own receipt. A block's list
/// is read only when its header names one of the operation's attempts: a list costs the node
/// its whole block whatever share of it is ours (anvil, 1,428 transfers: 350 CPU-ms, against
/// 0.6 for one receipt), and reading the lists of every recent block, ours or not, made checks
/// that came more than a few blocks late fall back to a receipt each.
const WALK_BLOCKS: u64 = 24;

/// Blocks back from the head whose lists are read when the header does not say which
/// transactions the block holds (no hashes in it): only the newest few, as before the walk
/// read the headers' transactions.
const RECENT_BLOCKS: u64 = 4;

/// How far below the newest block asked for a block's receipts or header are kept.
const KEEP_BLOCKS: u64 = 24;

/// Whole blocks' receipts (`eth_getBlockReceipts`), each block read once per endpoint and
/// kept across passes while it is recent. Under load a block holds many operations' sends,
/// and a node builds one receipt for a whole block's list at a fraction of what it spends on
/// each alone (anvil, a 1,000-transaction block: 0.24 ms a receipt in the list, 0.65 ms
/// alone); kept by block hash, so a reorg reads the new block's. A list that does not hold
/// together (a receipt that does not parse, of another block) is not used: its transactions
/// are read one by one, as without this.
///
/// Replicas checking one chain each read the lists of the same blocks: with
/// [`RecentReceipts::shared_by`], one of them reads a block's list and the others take its
/// outcomes (see [`SharedOutcomes`]).
#[derive(Debug, Default)]
pub struct RecentReceipts {
    /// Blocks' outcomes shared with the other replicas, if any.
    shared: Option<Arc<dyn SharedOutcomes>>,
    /// Per (endpoint, block number, block hash).
    blocks: std::sync::Mutex<HashMap<BlockOf, Arc<tokio::sync::Mutex<Fetch>>>>,
    /// The headers walked, per (endpoint, block hash): a header by hash never changes.
    headers: std::sync::Mutex<HashMap<(String, B256), HeaderSlot>>,
    /// Endpoints that do not serve `eth_getBlockReceipts`.
    unsupported: std::sync::Mutex<HashSet<String>>,
}

/// A block of an endpoint: (endpoint, block number, block hash).
type BlockOf = (String, u64, String);

/// A header walked, once read (those who ask meanwhile wait for the read).
type HeaderSlot = Arc<tokio::sync::Mutex<Option<Arc<Walked>>>>;

/// A header on the walk down from the head: its parent, and the transactions it holds when
/// the header lists them by hash.
#[derive(Debug)]
struct Walked {
    header: wire::LinkedHeader,
    transactions: Option<HashSet<B256>>,
    /// The same in block order, with the digest of that order, when the header names each
    /// transaction once: what outcomes shared between replicas follow.
    order: Option<(Vec<B256>, B256)>,
}

impl Walked {
    fn of(value: &Value) -> Option<Self> {
        let header = wire::LinkedHeader::deserialize(value).ok()?;
        let order: Option<Vec<B256>> = value
            .get("transactions")
            .and_then(Value::as_array)
            .and_then(|hashes| {
                hashes
                    .iter()
                    .map(|hash| hash.as_str()?.parse::<B256>().ok())
                    .collect()
            });
        let transactions: Option<HashSet<B256>> =
            order.as_ref().map(|order| order.iter().copied().collect());
        let order = order
            .filter(|order| {
                transactions
                    .as_ref()
                    .is_some_and(|t| t.len() == order.len())
            })
            .map(|order| {
                let digest = transactions_digest(&order);
                (order, digest)
            });
        Some(Self {
            header,
            transactions,
            order,
        })
    }
}

/// The digest of a block's transaction hashes in block order (keccak-256 of them, one after
/// the other): outcomes are taken only where one's own header gives the same, so an endpoint
/// that lists a block's transactions otherwise than another decides nothing for the replica
/// that reads through the other.
fn transactions_digest(order: &[B256]) -> B256 {
    let mut hasher = alloy_primitives::Keccak256::new();
    for hash in order {
        hasher.update(hash);
    }
    hasher.finalize()
}

/// What [`SharedOutcomes`] answers with.
pub type Answer<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// How a block's transactions executed, as one replica read them from its list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcomes {
    /// The digest of the transactions' hashes in block order, as that replica's header of the
    /// block listed them.
    pub transactions: B256,
    /// Whether each succeeded (or reverted), in that order.
    pub success: Vec<bool>,
}

/// What the replicas checking one chain know of a block's outcomes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shared {
    /// Its outcomes, as a replica read them.
    Known(Outcomes),
    /// Another replica reads its list now.
    Elsewhere,
    /// This replica is to read its list, and publish what it read.
    Claimed,
}

/// Blocks' outcomes shared by the replicas that check one chain's operations (the broadcaster
/// keeps them in the store): one replica reads a block's list from its node, the others take
/// what it read instead of reading the list again. Outcomes are taken only for a block whose
/// header, read by its hash, names each transaction once, in an order whose digest is the
/// outcomes' own: the same transactions in the same order as the replica that read them saw.
pub trait SharedOutcomes: Send + Sync + std::fmt::Debug {
    /// What is known of block `number` with `hash`; when nothing, it is claimed for this
    /// replica to read.
    fn claim(&self, number: u64, hash: B256) -> Answer<'_, Shared>;
    /// The block's outcomes, as this replica read them.
    fn publish(&self, number: u64, hash: B256, outcomes: Outcomes) -> Answer<'_, ()>;
    /// Gives up this replica's claim on the block (its list could not be read here, or not
    /// matched to its header), so that the others read it themselves.
    fn give_up(&self, number: u64, hash: B256) -> Answer<'_, ()>;
    /// Waits before looking again at a block another replica reads.
    fn pause(&self) -> Answer<'_, ()>;
}

/// How many times a block another replica reads is looked at again (each after a
/// [`SharedOutcomes::pause`]) before this replica reads its list itself: that replica may have
/// stopped.
const LOOKS_WHILE_READ_ELSEWHERE: usize = 40;

/// A block's receipts, by transaction hash.
type BlockReceipts = Arc<HashMap<B256, crate::rpc::Receipt>>;

#[derive(Debug, Default)]
enum Fetch {
    #[default]
    NotYet,
    Read(BlockReceipts),
    /// Read, and it does not hold together: not asked for again (its transactions are read
    /// one by one).
    Unusable,
    /// The last read failed at this time: not asked for again for [`RETRY_LIST_AFTER`].
    Failed(std::time::Instant),
}

/// How long a block's list whose read failed is not asked for again: the checks of a pass
/// would otherwise each wait for a read that fails in turn.
const RETRY_LIST_AFTER: std::time::Duration = std::time::Duration::from_secs(2);

impl RecentReceipts {
    /// Recent receipts whose blocks' outcomes are shared with the other replicas through
    /// `shared`.
    pub fn shared_by(shared: Arc<dyn SharedOutcomes>) -> Self {
        Self {
            shared: Some(shared),
            ..Self::default()
        }
    }

    /// The endpoint's block `hash`, as walked: read by hash (with its transactions' hashes,
    /// which a header read by number through a pass's cache no longer has) once, then kept.
    /// Those who ask while it is read wait for that read: at a new head every check of the
    /// pass asks for the same block, and each copy of its answer holds every transaction's
    /// hash.
    async fn by_hash(&self, endpoint: &impl Endpoint, hash: B256) -> Option<Arc<Walked>> {
        let label = endpoint.label();
        let slot = self
            .headers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry((label.to_owned(), hash))
            .or_default()
            .clone();
        let mut kept = slot.lock().await;
        if let Some(walked) = &*kept {
            return Some(walked.clone());
        }
        let value = endpoint
            .request("eth_getBlockByHash", json!([hash.to_string(), false]))
            .await
            .ok()?;
        let walked = Arc::new(Walked::of(&value).filter(|w| w.header.hash == hash)?);
        *kept = Some(walked.clone());
        drop(kept);
        // Only the recent blocks of each endpoint are kept (a slot being read stays).
        let newest = walked.header.number;
        self.headers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(of, _), slot| {
                of != label
                    || slot.try_lock().map_or(true, |kept| {
                        kept.as_ref()
                            .is_some_and(|w| w.header.number + KEEP_BLOCKS > newest)
                    })
            });
        Some(walked)
    }

    /// The parent of `block` on the endpoint, checked to be the block `block` names.
    async fn parent(&self, endpoint: &impl Endpoint, block: &Walked) -> Option<Arc<Walked>> {
        self.by_hash(endpoint, block.header.parent_hash)
            .await
            .filter(|parent| parent.header.number + 1 == block.header.number)
    }

    /// The receipts of the endpoint's block `walked`, canonical there: read once (those who
    /// ask meanwhile wait for that read), or taken from another replica's reading; `None`
    /// when unreadable.
    async fn block(&self, endpoint: &impl Endpoint, walked: &Walked) -> Option<BlockReceipts> {
        let number = walked.header.number;
        let hash = walked.header.hash.to_string();
        let hash = hash.as_str();
        let label = endpoint.label();
        if self
            .unsupported
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(label)
        {
            return None;
        }
        let slot = {
            let mut blocks = self.blocks.lock().unwrap_or_else(|p| p.into_inner());
            blocks.retain(|(of, kept, _), _| of != label || kept + KEEP_BLOCKS > number);
            blocks
                .entry((label.to_owned(), number, hash.to_owned()))
                .or_default()
                .clone()
        };
        let mut fetch = slot.lock().await;
        match &*fetch {
            Fetch::Read(receipts) => return Some(receipts.clone()),
            Fetch::Unusable => return None,
            Fetch::Failed(at) if at.elapsed() < RETRY_LIST_AFTER => return None,
            _ => {}
        }
        // Only a header that names each of its transactions once can take or give outcomes.
        let Some(shared) = self.shared.as_ref().filter(|_| walked.order.is_some()) else {
            return Self::read_list(endpoint, number, hash, &mut fetch, &self.unsupported).await;
        };
        let mut looks = 0;
        let claimed = loop {
            match shared.claim(number, walked.header.hash).await {
                Shared::Known(outcomes) => {
                    if let Some(receipts) = receipts_of(walked, &outcomes) {
                        *fetch = Fetch::Read(receipts.clone());
                        return Some(receipts);
                    }
                    tracing::warn!(
                        endpoint = label,
                        number,
                        "a block's shared outcomes do not match its transactions: its list is read here"
                    );
                    break false;
                }
                Shared::Claimed => break true,
                Shared::Elsewhere if looks < LOOKS_WHILE_READ_ELSEWHERE => {
                    looks += 1;
                    shared.pause().await;
                }
                Shared::Elsewhere => break false,
            }
        };
        let receipts = Self::read_list(endpoint, number, hash, &mut fetch, &self.unsupported).await;
        // This replica's other checks of the block need not wait for the store.
        drop(fetch);
        match receipts.as_ref().and_then(|r| outcomes_of(walked, r)) {
            Some(outcomes) => shared.publish(number, walked.header.hash, outcomes).await,
            None if claimed => shared.give_up(number, walked.header.hash).await,
            None => {}
        }
        receipts
    }

    /// Reads the endpoint's block `number` (canonical hash `hash`) list from the endpoint,
    /// leaving in `fetch` what became of it.
    async fn read_list(
        endpoint: &impl Endpoint,
        number: u64,
        hash: &str,
        fetch: &mut Fetch,
        unsupported: &std::sync::Mutex<HashSet<String>>,
    ) -> Option<BlockReceipts> {
        let label = endpoint.label();
        match endpoint
            .request("eth_getBlockReceipts", json!([hex(number)]))
            .await
        {
            Ok(value) => match block_receipts(&value, number, hash) {
                Some(receipts) => {
                    *fetch = Fetch::Read(receipts.clone());
                    Some(receipts)
                }
                // No such block (yet): asked again later.
                None if value.is_null() => {
                    *fetch = Fetch::Failed(std::time::Instant::now());
                    None
                }
                None => {
                    tracing::debug!(
                        endpoint = label,
                        number,
                        "a block's receipt list does not hold together: receipts read one by one"
                    );
                    *fetch = Fetch::Unusable;
                    None
                }
            },
            // Method not found, or not allowed here: never asked of this endpoint again.
            Err(RpcError::Node { code, .. }) if code == -32601 || code == -32600 => {
                tracing::info!(
                    endpoint = label,
                    code,
                    "endpoint does not serve eth_getBlockReceipts: receipts read one by one"
                );
                unsupported
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(label.to_owned());
                None
            }
            Err(_) => {
                *fetch = Fetch::Failed(std::time::Instant::now());
                None
            }
        }
    }
}

/// The outcomes of `walked`'s transactions, from its list: if its header names each
/// transaction once and the list holds a receipt for each of them and no other.
fn outcomes_of(walked: &Walked, receipts: &BlockReceipts) -> Option<Outcomes> {
    let (order, digest) = walked.order.as_ref()?;
    if receipts.len() != order.len() {
        return None;
    }
    let success = order
        .iter()
        .map(|tx| receipts.get(tx).map(|receipt| receipt.success))
        .collect::<Option<_>>()?;
    Some(Outcomes {
        transactions: *digest,
        success,
    })
}

/// `walked`'s receipts from outcomes another replica read, if they are of its transactions:
/// the same ones in the same order, one outcome each.
fn receipts_of(walked: &Walked, outcomes: &Outcomes) -> Option<BlockReceipts> {
    let (order, digest) = walked.order.as_ref()?;
    if outcomes.transactions != *digest || outcomes.success.len() != order.len() {
        return None;
    }
    let receipts = order
        .iter()
        .zip(&outcomes.success)
        .map(|(&tx_hash, &success)| {
            let receipt = crate::rpc::Receipt {
                tx_hash,
                block_number: walked.header.number,
                block_hash: walked.header.hash,
                success,
            };
            (tx_hash, receipt)
        });
    Some(Arc::new(receipts.collect()))
}

/// A block's receipt list, if it holds together: every receipt parses and is of the block
/// `number` with `hash`.
fn block_receipts(value: &Value, number: u64, hash: &str) -> Option<BlockReceipts> {
    let mut receipts = HashMap::new();
    for value in value.as_array()? {
        let receipt = parse_receipt(value)?;
        if receipt.block_number != number || receipt.block_hash.to_string() != hash {
            return None;
        }
        receipts.insert(receipt.tx_hash, receipt);
    }
    Some(Arc::new(receipts))
}

fn hex(n: u64) -> String {
    format!("0x{n:x}")
}

fn malformed(endpoint: &impl Endpoint, what: &str, value: &Value) -> RpcError {
    RpcError::Malformed {
        endpoint: endpoint.label().to_owned(),
        message: format!("{what}: {}", sigcast_jsonrpc::quoted(&value.to_string())),
    }
}

fn wire_block(endpoint: &impl Endpoint, value: &Value) -> Result<wire::Block, RpcError> {
    wire::Block::deserialize(value)
        .map_err(|error| malformed(endpoint, &format!("a block ({error})"), value))
}

/// A block's number and hash, from a block object.
fn block_ref(endpoint: &impl Endpoint, value: &Value) -> Result<BlockRef, RpcError> {
    let block = wire::BlockHeader::deserialize(value)
        .map_err(|error| malformed(endpoint, &format!("a block ({error})"), value))?;
    Ok(BlockRef {
        number: block.number,
        hash: block.hash.to_string(),
    })
}

/// The block at `number` (`None` if the endpoint has none), with full transactions if `full`.
async fn block(
    endpoint: &impl Endpoint,
    number: u64,
    full: bool,
) -> Result<Option<Value>, RpcError> {
    let value = endpoint
        .request("eth_getBlockByNumber", json!([hex(number), full]))
        .await?;
    Ok((!value.is_null()).then_some(value))
}

/// The hash of the endpoint's canonical block at `number`, if it answers one.
async fn canonical_hash(endpoint: &impl Endpoint, number: u64) -> Option<String> {
    let value = block(endpoint, number, false).await.ok().flatten()?;
    block_ref(endpoint, &value).ok().map(|b| b.hash)
}

/// The account's transaction count after block `number`.
async fn nonce_at(
    endpoint: &impl Endpoint,
    account: Address,
    number: u64,
) -> Result<u64, RpcError> {
    transaction_count(endpoint, account, hex(number)).await
}

/// The account's transaction count after `block` (a number in hex, or a tag).
async fn transaction_count(
    endpoint: &impl Endpoint,
    account: Address,
    block: String,
) -> Result<u64, RpcError> {
    let value = endpoint
        .request(
            "eth_getTransactionCount",
            // Lowercase hex: a checksummed address costs a Keccak hash per request.
            json!([format!("{account:#x}"), block]),
        )
        .await?;
    quantity(&value).ok_or_else(|| malformed(endpoint, "a transaction count", &value))
}

/// An account's transaction count as one endpoint shows it, at its head and `confirmations`
/// deep (the same for a depth of 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AccountNonces {
    /// At the head: every included transaction, however shallow.
    pub head: u64,
    /// At the block `confirmations - 1` below the head, read against the same head.
    pub settled: u64,
}

/// The account's transaction count as `endpoint` shows it, at its head and `confirmations`
/// deep. A nonce another sender took is skipped when allocating only once it is settled: a
/// transaction shallower than that can still be reorged out and never mined again, and every
/// nonce allocated past its gap would then wait for a transaction nobody sends. An endpoint
/// must keep state that deep (full nodes keep about 128 blocks); one that does not fails
/// the read.
pub async fn account_nonces(
    endpoint: &impl Endpoint,
    account: Address,
    confirmations: u64,
) -> Result<AccountNonces, RpcError> {
    if confirmations <= 1 {
        let count = transaction_count(endpoint, account, "latest".into()).await?;
        return Ok(AccountNonces {
            head: count,
            settled: count,
        });
    }
    let value = endpoint.request("eth_blockNumber", json!([])).await?;
    let head = quantity(&value).ok_or_else(|| malformed(endpoint, "a block number", &value))?;
    Ok(AccountNonces {
        head: nonce_at(endpoint, account, head).await?,
        settled: nonce_at(endpoint, account, head.saturating_sub(confirmations - 1)).await?,
    })
}

/// The chain id `endpoint` serves (`eth_chainId`): one configured for a chain may serve
/// another since (a load balancer, a DNS name moved).
pub async fn served_chain_id(endpoint: &impl Endpoint) -> Result<u64, RpcError> {
    let value = endpoint.request("eth_chainId", json!([])).await?;
    quantity(&value).ok_or_else(|| malformed(endpoint, "a chain id", &value))
}

/// [`account_nonces`] as the first of `endpoints` (in the order given) that answers them all
/// shows them: one endpoint answers the head and both counts under it. When none does, each
/// one's failure, in order.
pub async fn account_nonces_from_first<E: Endpoint>(
    endpoints: impl IntoIterator<Item = E>,
    account: Address,
    confirmations: u64,
) -> Result<AccountNonces, Vec<RpcError>> {
    let mut errors = Vec::new();
    for endpoint in endpoints {
        match account_nonces(&endpoint, account, confirmations).await {
            Ok(nonces) => return Ok(nonces),
            Err(error) => errors.push(error),
        }
    }
    Err(errors)
}

/// Reads what `endpoint` shows of the account's `nonce`, used by one of `attempts` or not,
/// and links what used it to a block `confirmations - 1` above (its proven depth). Fails only
/// if the head cannot be read; anything else unreadable is left `None`.
pub async fn read_view(
    endpoint: &impl Endpoint,
    account: Address,
    nonce: u64,
    attempts: &[B256],
    recent: Option<&RecentReceipts>,
    confirmations: u64,
) -> Result<EvmView, RpcError> {
    let latest = endpoint
        .request("eth_getBlockByNumber", json!(["latest", false]))
        .await?;
    let head = block_ref(endpoint, &latest)?;
    // Malformed or absent (a chain without EIP-1559): unknown, which prompts nothing.
    let base_fee = crate::base_fee(&latest);
    let account_nonce = nonce_at(endpoint, account, head.number).await.ok();
    let mut landed: Option<EvmLanded> = None;
    // While the account's nonce at the head has not passed ours, no attempt is in a block up
    // to the head: a receipt could only be from a block the head read does not reach yet,
    // and the next read finds it. Most reads of a waiting operation are these, and a receipt
    // costs the node far more than the nonce it shares with the account's other operations.
    let unused = account_nonce.is_some_and(|n| n <= nonce);
    // Under load, first in the recent blocks' whole receipt lists: one read per block for
    // all the operations it holds.
    if let Some(recent) = recent.filter(|_| !unused) {
        // The blocks the head just read descends from, parent by parent (headers by hash do
        // not change), newest first, as far down as needed: a list is taken only for a block
        // of that line. A header read by number earlier in the pass may be of a block reorged
        // out since, and a list kept under its hash would then show an inclusion that is no
        // longer in the chain.
        let mut block = match wire::LinkedHeader::deserialize(&latest) {
            Ok(head) => match recent.by_hash(endpoint, head.hash).await {
                Some(walked) if walked.header.number == head.number => Some(walked),
                // Unreadable by hash: the head as read, without its transactions (not kept).
                _ => Walked::of(&latest).map(Arc::new),
            },
            Err(_) => None,
        };
        let mut looked = 0;
        'blocks: while let Some(walked) = block.take() {
            let header = &walked.header;
            // Only the list of a block that holds one of ours; a header without its
            // transactions' hashes says nothing, so the newest few are read as they are.
            let holds = match &walked.transactions {
                Some(held) => attempts.iter().any(|attempt| held.contains(attempt)),
                None => looked < RECENT_BLOCKS,
            };
            if holds {
                let hash = header.hash.to_string();
                if let Some(receipts) = recent.block(endpoint, &walked).await {
                    for attempt in attempts {
                        if let Some(receipt) = receipts.get(attempt) {
                            landed = Some(EvmLanded {
                                tx: receipt.tx_hash.to_string(),
                                block: BlockRef {
                                    number: header.number,
                                    hash: hash.clone(),
                                },
                                canonical_hash: Some(hash),
                                success: Some(receipt.success),
                                descendant: None,
                            });
                            break 'blocks;
                        }
                    }
                }
                if walked.transactions.is_some() {
                    // Ours is in this block and its list is unreadable: by its own receipt.
                    break;
                }
            }
            looked += 1;
            let deep_enough = match walked.transactions {
                Some(_) => looked >= WALK_BLOCKS,
                None => looked >= RECENT_BLOCKS,
            };
            if !deep_enough && header.number > 0 {
                block = recent.parent(endpoint, &walked).await;
            }
        }
    }
    let found_in_list = landed.is_some();
    for hash in attempts.iter().filter(|_| !unused && !found_in_list) {
        let Ok(value) = endpoint
            .request("eth_getTransactionReceipt", json!([hash.to_string()]))
            .await
        else {
            continue;
        };
        // A receipt of another transaction (a proxy's or a cache's mix-up) is no evidence of
        // ours, and taken for what used our nonce it would settle the operation.
        let Some(receipt) = parse_receipt(&value).filter(|r| r.tx_hash == *hash) else {
            continue;
        };
        let canonical_hash = canonical_hash(endpoint, receipt.block_number).await;
        let seen = EvmLanded {
            tx: receipt.tx_hash.to_string(),
            block: BlockRef {
                number: receipt.block_number,
                hash: receipt.block_hash.to_string(),
            },
            canonical_hash,
            success: Some(receipt.success),
            descendant: None,
        };
        let canonical = seen.is_canonical();
        landed = Some(seen);
        if canonical {
            break;
        }
    }
    let canonical = landed.as_ref().is_some_and(EvmLanded::is_canonical);
    if !canonical && account_nonce.is_some_and(|n| n > nonce) {
        // No receipt, or one from a block no longer canonical here: what used the nonce in
        // the canonical chain? Most often one of ours whose receipt the node has not indexed
        // yet (state shows first): asked by hash, that costs a request per attempt; the search
        // of the blocks (a whole block of transactions read) is left for when it is not.
        if let Some(mut ours) = included(endpoint, account, nonce, attempts).await {
            // A receipt read above for this very inclusion (its header unreadable then) still
            // says how it executed.
            if let Some(seen) = landed
                .as_ref()
                .filter(|l| l.tx == ours.tx && l.block == ours.block)
            {
                ours.success = seen.success;
            }
            // Still no receipt this deep is no indexer lagging: the index may be wrong. The
            // block's own transactions outrank it (once: the search is cached per pass).
            let deep = head.number.saturating_sub(ours.block.number) >= RECEIPT_LAG_LIMIT;
            if deep
                && ours.success.is_none()
                && let Ok(Some(user)) = find_user(endpoint, account, nonce, head.number).await
            {
                ours = user;
            }
            landed = Some(ours);
        } else if let Ok(Some(user)) = find_user(endpoint, account, nonce, head.number).await {
            landed = Some(user);
        }
    }
    // Ours, deep down, still without a receipt by hash: a node that prunes its transaction
    // index (geth's txlookuplimit) never answers one. The block's own list does, each receipt
    // in it checked as of that block.
    if let Some(landed) = landed.as_mut().filter(|l| {
        l.success.is_none() && head.number.saturating_sub(l.block.number) >= RECEIPT_LAG_LIMIT
    }) && let Ok(hash) = landed.tx.parse::<B256>()
        && attempts.contains(&hash)
    {
        landed.success = endpoint
            .request("eth_getBlockReceipts", json!([hex(landed.block.number)]))
            .await
            .ok()
            .and_then(|value| block_receipts(&value, landed.block.number, &landed.block.hash))
            .and_then(|receipts| receipts.get(&hash).map(|r| r.success));
    }
    if let Some(landed) = landed.as_mut().filter(|l| l.is_canonical()) {
        let top = landed.block.number.saturating_add(confirmations.max(1) - 1);
        landed.descendant = if found_in_list {
            // The walk that found it went down from the head, parent by parent.
            Some(head.clone())
        } else if top > landed.block.number && top <= head.number {
            linked_descendant(endpoint, &landed.block, top).await
        } else {
            None
        };
    }
    Ok(EvmView {
        endpoint: endpoint.label().to_owned(),
        head,
        account_nonce,
        base_fee,
        landed,
    })
}

/// The endpoint's block at `top` (read by number), if it links down to `block` parent hash by
/// parent hash: proof, from one chain, that `block` has that many descendants. Nodes behind
/// one URL that each answer from a chain of their own break the link rather than make one: a
/// header by hash is what any node holding it answers. (By hash, a header is kept for the
/// whole pass, whatever head is read meanwhile: the links of many operations share it.)
async fn linked_descendant(
    endpoint: &impl Endpoint,
    block: &BlockRef,
    top: u64,
) -> Option<BlockRef> {
    let header = |value: Value| wire::LinkedHeader::deserialize(&value).ok();
    let first = header(self::block(endpoint, top, false).await.ok()??)?;
    if first.number != top {
        return None;
    }
    let (mut number, mut parent) = (first.number, first.parent_hash);
    while number > block.number.checked_add(1)? {
        let value = endpoint
            .request("eth_getBlockByHash", json!([parent.to_string(), false]))
            .await
            .ok()?;
        let linked = header(value)?;
        if linked.hash != parent || linked.number.checked_add(1) != Some(number) {
            return None;
        }
        (number, parent) = (linked.number, linked.parent_hash);
    }
    parent
        .to_string()
        .eq_ignore_ascii_case(&block.hash)
        .then(|| BlockRef {
            number: top,
            hash: first.hash.to_string(),
        })
}

/// The first of `attempts` the endpoint shows, by hash, in a block of its canonical chain (as
/// the account's transaction at `nonce`); its receipt is not read here.
async fn included(
    endpoint: &impl Endpoint,
    account: Address,
    nonce: u64,
    attempts: &[B256],
) -> Option<EvmLanded> {
    for hash in attempts {
        let Ok(value) = endpoint
            .request("eth_getTransactionByHash", json!([hash.to_string()]))
            .await
        else {
            continue;
        };
        let Ok(tx) = wire::IncludedTx::deserialize(&value) else {
            continue;
        };
        let (Some(number), Some(block_hash)) = (tx.block_number, tx.block_hash) else {
            continue; // pending
        };
        if tx.hash != *hash || tx.from != account || tx.nonce != nonce {
            continue;
        }
        let block = BlockRef {
            number,
            hash: block_hash.to_string(),
        };
        if canonical_hash(endpoint, number).await.as_ref() == Some(&block.hash) {
            return Some(EvmLanded {
                tx: hash.to_string(),
                canonical_hash: Some(block.hash.clone()),
                block,
                success: None,
                descendant: None,
            });
        }
    }
    None
}

/// The transaction of `account` at `nonce` in the endpoint's canonical chain up to `head`:
/// found in the block where the account's nonce passed it (by a galloping then binary search
/// over the nonce at past blocks), or, where the endpoint keeps no past state, by scanning the
/// last [`SCAN_BLOCKS`] blocks.
pub async fn find_user(
    endpoint: &impl Endpoint,
    account: Address,
    nonce: u64,
    head: u64,
) -> Result<Option<EvmLanded>, RpcError> {
    let number = match first_block_past(endpoint, account, nonce, head).await {
        Ok(Some(number)) => number,
        Ok(None) => return Ok(None),
        Err(_) => return scan(endpoint, account, nonce, head).await,
    };
    in_block(endpoint, account, nonce, number).await
}

/// The first block after which the account's nonce is past `nonce`, searching back from
/// `head` (whose nonce is past it).
async fn first_block_past(
    endpoint: &impl Endpoint,
    account: Address,
    nonce: u64,
    head: u64,
) -> Result<Option<u64>, RpcError> {
    if nonce_at(endpoint, account, head).await? <= nonce {
        return Ok(None);
    }
    // Gallop back: recent blocks are the likeliest, and the only ones a pruned node keeps.
    let (mut past, mut step) = (head, 1u64);
    let not_past = loop {
        let probe = past.saturating_sub(step);
        if nonce_at(endpoint, account, probe).await? <= nonce {
            break probe;
        }
        if probe == 0 {
            return Ok(Some(0)); // used in the genesis block
        }
        past = probe;
        step = step.saturating_mul(2);
    };
    // Invariant: nonce_at(not_past) <= nonce < nonce_at(past).
    let mut low = not_past;
    while past - low > 1 {
        let middle = low + (past - low) / 2;
        if nonce_at(endpoint, account, middle).await? <= nonce {
            low = middle;
        } else {
            past = middle;
        }
    }
    Ok(Some(past))
}

/// The account's transaction at `nonce` in block `number`, if it is there.
async fn in_block(
    endpoint: &impl Endpoint,
    account: Address,
    nonce: u64,
    number: u64,
) -> Result<Option<EvmLanded>, RpcError> {
    let Some(value) = block(endpoint, number, true).await? else {
        return Ok(None);
    };
    let wire = wire_block(endpoint, &value)?;
    let block = BlockRef {
        number: wire.number,
        hash: wire.hash.to_string(),
    };
    // Each transaction read alone: one of a shape not read here (an L2's deposit) leaves the
    // others readable.
    let found = wire
        .transactions
        .iter()
        .flatten()
        .filter_map(|tx| wire::Tx::deserialize(tx).ok())
        .find(|tx| tx.from == account && tx.nonce == nonce);
    let Some(wire::Tx { hash, .. }) = found else {
        return Ok(None);
    };
    let success = endpoint
        .request("eth_getTransactionReceipt", json!([hash.to_string()]))
        .await
        .ok()
        .and_then(|value| parse_receipt(&value))
        .filter(|r| r.block_hash.to_string() == block.hash && r.tx_hash == hash)
        .map(|r| r.success);
    Ok(Some(EvmLanded {
        tx: hash.to_string(),
        canonical_hash: Some(block.hash.clone()),
        block,
        success,
        descendant: None,
    }))
}

/// The last resort of a node without past state: the account's transaction at `nonce` in
/// one of the last [`SCAN_BLOCKS`] blocks.
async fn scan(
    endpoint: &impl Endpoint,
    account: Address,
    nonce: u64,
    head: u64,
) -> Result<Option<EvmLanded>, RpcError> {
    for number in (head.saturating_sub(SCAN_BLOCKS - 1)..=head).rev() {
        if let Some(found) = in_block(endpoint, account, nonce, number).await? {
            return Ok(Some(found));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    const ACCOUNT: &str = "0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266";

    fn block_hash(number: u64) -> String {
        format!("0x{number:064x}")
    }

    /// A node at block 10 whose account nonce is 6, the nonce passing 5 in block 7; it has no
    /// receipt yet. Asked by hash for ours, it answers `by_hash`; block 7 itself holds
    /// `in_block_7` at nonce 5. Records every request.
    struct StateBeforeReceipts {
        by_hash: Value,
        in_block_7: B256,
        head: u64,
        /// The account's nonce is unreadable.
        no_state: bool,
        /// Block 7's receipt list is served (`eth_getBlockReceipts`), its index by hash pruned.
        lists: bool,
        asked: Mutex<Vec<String>>,
    }

    impl Endpoint for StateBeforeReceipts {
        fn label(&self) -> &str {
            "http://node:8545"
        }

        async fn request(&self, method: &str, params: Value) -> Result<Value, RpcError> {
            self.asked.lock().unwrap().push(format!("{method}{params}"));
            let number = |tag: &Value| match tag.as_str() {
                Some("latest") => self.head,
                Some(hex) => u64::from_str_radix(&hex[2..], 16).unwrap(),
                None => unreachable!(),
            };
            Ok(match method {
                "eth_getBlockByNumber" => {
                    let n = number(&params[0]);
                    let txs = if n == 7 && params[1] == json!(true) {
                        json!([{"hash": self.in_block_7.to_string(), "from": ACCOUNT, "nonce": "0x5"}])
                    } else {
                        json!([])
                    };
                    json!({"number": hex(n), "hash": block_hash(n), "transactions": txs})
                }
                "eth_getTransactionCount" if self.no_state => {
                    return Err(RpcError::Node {
                        endpoint: self.label().to_owned(),
                        code: -32000,
                        message: "missing trie node".into(),
                    });
                }
                "eth_getTransactionCount" => {
                    json!(hex(if number(&params[1]) >= 7 { 6 } else { 5 }))
                }
                "eth_getTransactionReceipt" => Value::Null,
                "eth_getTransactionByHash" => self.by_hash.clone(),
                "eth_blockNumber" => json!(hex(self.head)),
                "eth_getBlockReceipts" if self.lists && params[0] == json!(hex(7)) => {
                    json!([{"transactionHash": self.in_block_7.to_string(), "blockNumber": hex(7),
                            "blockHash": block_hash(7), "status": "0x1"}])
                }
                "eth_getBlockReceipts" => {
                    return Err(RpcError::Node {
                        endpoint: self.label().to_owned(),
                        code: -32601,
                        message: "the method eth_getBlockReceipts does not exist".into(),
                    });
                }
                other => unreachable!("{other}"),
            })
        }
    }

    fn by_hash(tx: B256, nonce: &str, block: &str) -> Value {
        json!({
            "hash": tx.to_string(), "from": ACCOUNT, "nonce": nonce,
            "blockNumber": hex(7), "blockHash": block
        })
    }

    fn tx(byte: &str) -> B256 {
        format!("0x{}", byte.repeat(32)).parse().unwrap()
    }

    /// How a node under load answers a block's receipt list.
    #[derive(Clone, Copy, PartialEq)]
    enum Lists {
        /// As it should.
        Served,
        /// Each receipt names another block hash than the block's own.
        OfAnotherBlock,
        /// Method not found.
        Unsupported,
    }

    /// A node at block 10 where our transaction at nonce 5 landed in block 9 (the account's
    /// nonce 6 from there), with a receipt of its own and one in block 9's list. Once
    /// `reorged`, blocks 9 and up are others (block 11 the head), and block 9 holds another
    /// transaction of the account at nonce 5 instead of ours.
    struct Loaded {
        ours: B256,
        lists: Lists,
        reorged: std::sync::atomic::AtomicBool,
        asked: Mutex<Vec<String>>,
        /// The head before a reorg (10 unless said).
        head: u64,
        /// Whether headers list their transactions' hashes (as nodes do).
        hashes: bool,
        /// Headers of blocks below this are not served by hash (pruned, or a backend behind a
        /// balancer that does not have them).
        by_hash_from: u64,
        /// How ours executed (`0x1` unless said).
        ours_status: &'static str,
        /// Whether, once `reorged`, it still answers ours's receipt from the old block 9 (a
        /// receipt index behind its chain).
        stale_receipts: bool,
        /// Whether it answers a receipt of another transaction whatever hash is asked for (a
        /// proxy's or a cache's mix-up).
        mixed_receipts: bool,
    }

    impl Loaded {
        fn new(lists: Lists) -> Self {
            Self {
                ours: tx("ab"),
                lists,
                reorged: Default::default(),
                asked: Mutex::default(),
                head: 10,
                hashes: false,
                by_hash_from: 0,
                ours_status: "0x1",
                stale_receipts: false,
                mixed_receipts: false,
            }
        }

        fn reorged(&self) -> bool {
            self.reorged.load(std::sync::atomic::Ordering::SeqCst)
        }

        fn hash(&self, n: u64) -> String {
            block_hash(if self.reorged() && n >= 9 { n + 100 } else { n })
        }

        fn header(&self, n: u64) -> Value {
            let parent = self.hash(n.saturating_sub(1));
            let mut header = json!({"number": hex(n), "hash": self.hash(n), "parentHash": parent});
            if self.hashes {
                // Every block holds another sender's transfer; block 9 holds ours too.
                let mut held = vec![tx(&format!("{:02x}", (0xe0 + n) % 0x100)).to_string()];
                if n == 9 && !self.reorged() {
                    held.push(self.ours.to_string());
                }
                header["transactions"] = json!(held);
            }
            header
        }
    }

    impl Endpoint for Loaded {
        fn label(&self) -> &str {
            "http://loaded:8545"
        }

        async fn request(&self, method: &str, params: Value) -> Result<Value, RpcError> {
            self.asked.lock().unwrap().push(method.to_owned());
            tokio::task::yield_now().await; // others' reads interleave
            let head = if self.reorged() { 11 } else { self.head };
            let number = |tag: &Value| match tag.as_str() {
                Some("latest") => head,
                Some(hex) => u64::from_str_radix(&hex[2..], 16).unwrap(),
                None => unreachable!(),
            };
            let theirs = tx("cd");
            let receipt = |tx: B256, block: &str| {
                let status = if tx == self.ours {
                    self.ours_status
                } else {
                    "0x1"
                };
                json!({"transactionHash": tx.to_string(), "blockNumber": hex(9),
                       "blockHash": block, "status": status})
            };
            Ok(match method {
                "eth_getBlockByNumber" => {
                    let n = number(&params[0]);
                    let mut block = self.header(n);
                    if n == 9 && params[1] == json!(true) {
                        let user = if self.reorged() { theirs } else { self.ours };
                        block["transactions"] =
                            json!([{"hash": user.to_string(), "from": ACCOUNT, "nonce": "0x5"}]);
                    }
                    block
                }
                "eth_getBlockByHash" => (self.by_hash_from..=head)
                    .find(|n| json!(self.hash(*n)) == params[0])
                    .map_or(Value::Null, |n| self.header(n)),
                "eth_getTransactionCount" => {
                    json!(hex(if number(&params[1]) >= 9 { 6 } else { 5 }))
                }
                "eth_getBlockReceipts" => match (self.lists, number(&params[0])) {
                    (Lists::Unsupported, _) => {
                        return Err(RpcError::Node {
                            endpoint: self.label().to_owned(),
                            code: -32601,
                            message: "method not found".into(),
                        });
                    }
                    (Lists::Served, 9) if self.reorged() => json!([receipt(theirs, &self.hash(9))]),
                    // With the other sender's first, as its header lists them.
                    (Lists::Served, 9) if self.hashes => json!([
                        receipt(tx("e9"), &self.hash(9)),
                        receipt(self.ours, &self.hash(9))
                    ]),
                    (Lists::Served, 9) => json!([receipt(self.ours, &self.hash(9))]),
                    (Lists::OfAnotherBlock, 9) => json!([receipt(self.ours, &block_hash(99))]),
                    _ => json!([]),
                },
                "eth_getTransactionReceipt" if self.reorged() && self.stale_receipts => {
                    receipt(self.ours, &block_hash(9))
                }
                "eth_getTransactionReceipt" if self.reorged() => Value::Null,
                "eth_getTransactionReceipt" if self.mixed_receipts => {
                    receipt(tx("99"), &self.hash(9))
                }
                "eth_getTransactionReceipt" => receipt(self.ours, &self.hash(9)),
                "eth_getTransactionByHash" => Value::Null,
                other => unreachable!("{other}"),
            })
        }
    }

    fn node_of(cache: &sigcast_jsonrpc::PassCache<Loaded>) -> &Loaded {
        cache.inner()
    }

    fn asked_for(node: &Loaded, method: &str) -> usize {
        node.asked
            .lock()
            .unwrap()
            .iter()
            .filter(|m| *m == method)
            .count()
    }

    /// What `node` shows of our operation at nonce 5 (its one attempt, `tx("ab")`), with the
    /// lists and headers kept in `recent` across checks.
    async fn check_ours(node: &impl Endpoint, recent: &RecentReceipts) -> EvmView {
        read_view(
            node,
            ACCOUNT.parse().unwrap(),
            5,
            &[tx("ab")],
            Some(recent),
            1,
        )
        .await
        .unwrap()
    }

    /// `view` found ours in block 9, canonical there, executed with success.
    fn assert_ours_in_block_9(view: EvmView) {
        assert_ours_in_block_9_executed(view, true);
    }

    /// `view` found ours in block 9, canonical there, executed with `success` or reverted.
    fn assert_ours_in_block_9_executed(view: EvmView, success: bool) {
        let landed = view.landed.expect("ours, in block 9");
        assert_eq!(landed.tx, tx("ab").to_string());
        assert_eq!(landed.block.number, 9);
        assert_eq!(landed.block.hash, block_hash(9));
        assert_eq!(landed.canonical_hash, Some(block_hash(9)));
        assert_eq!(landed.success, Some(success));
    }

    /// What the replicas' [`SharedOutcomes`] hold of a block (the store, in the broadcaster).
    #[derive(Debug, Clone, PartialEq)]
    enum OnBoard {
        Reading(u8),
        Outcomes(Outcomes),
    }

    /// Blocks' outcomes shared by replicas, kept in memory.
    #[derive(Debug, Default)]
    struct Board {
        blocks: Mutex<HashMap<B256, OnBoard>>,
        /// Claims asked for, by any replica.
        claims: std::sync::atomic::AtomicUsize,
        /// Pauses taken by replicas waiting for another's reading.
        pauses: std::sync::atomic::AtomicUsize,
        /// Published at the first pause: another replica's reading, done while one waits.
        published_at_pause: Mutex<Option<(B256, Outcomes)>>,
    }

    impl Board {
        fn with(block: B256, on_board: OnBoard) -> Arc<Self> {
            let board = Self::default();
            board.blocks.lock().unwrap().insert(block, on_board);
            Arc::new(board)
        }

        fn of(&self, block: B256) -> Option<OnBoard> {
            self.blocks.lock().unwrap().get(&block).cloned()
        }

        fn claims(&self) -> usize {
            self.claims.load(std::sync::atomic::Ordering::SeqCst)
        }

        fn pauses(&self) -> usize {
            self.pauses.load(std::sync::atomic::Ordering::SeqCst)
        }
    }

    /// One replica's view of the board.
    #[derive(Debug)]
    struct Replica {
        board: Arc<Board>,
        id: u8,
    }

    impl SharedOutcomes for Replica {
        fn claim(&self, _: u64, hash: B256) -> Answer<'_, Shared> {
            Box::pin(async move {
                self.board
                    .claims
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let mut blocks = self.board.blocks.lock().unwrap();
                match blocks.get(&hash) {
                    None => {
                        blocks.insert(hash, OnBoard::Reading(self.id));
                        Shared::Claimed
                    }
                    Some(OnBoard::Reading(id)) if *id == self.id => Shared::Claimed,
                    Some(OnBoard::Reading(_)) => Shared::Elsewhere,
                    Some(OnBoard::Outcomes(outcomes)) => Shared::Known(outcomes.clone()),
                }
            })
        }

        fn publish(&self, _: u64, hash: B256, outcomes: Outcomes) -> Answer<'_, ()> {
            Box::pin(async move {
                let mut blocks = self.board.blocks.lock().unwrap();
                if !matches!(blocks.get(&hash), Some(OnBoard::Outcomes(_))) {
                    blocks.insert(hash, OnBoard::Outcomes(outcomes));
                }
            })
        }

        fn give_up(&self, _: u64, hash: B256) -> Answer<'_, ()> {
            Box::pin(async move {
                let mut blocks = self.board.blocks.lock().unwrap();
                if blocks.get(&hash) == Some(&OnBoard::Reading(self.id)) {
                    blocks.remove(&hash);
                }
            })
        }

        fn pause(&self) -> Answer<'_, ()> {
            Box::pin(async move {
                self.board
                    .pauses
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if let Some((hash, outcomes)) = self.board.published_at_pause.lock().unwrap().take()
                {
                    let mut blocks = self.board.blocks.lock().unwrap();
                    blocks.insert(hash, OnBoard::Outcomes(outcomes));
                }
            })
        }
    }

    fn replica(board: &Arc<Board>, id: u8) -> RecentReceipts {
        RecentReceipts::shared_by(Arc::new(Replica {
            board: board.clone(),
            id,
        }))
    }

    /// Head 16, ours reverted in block 9 after another sender's transfer, headers naming
    /// their transactions.
    fn reverted_in_block_9() -> Loaded {
        Loaded {
            head: 16,
            hashes: true,
            ours_status: "0x0",
            ..Loaded::new(Lists::Served)
        }
    }

    fn block_9() -> B256 {
        block_hash(9).parse().unwrap()
    }

    /// Outcomes of `order` (transactions' hashes in block order).
    fn outcomes(order: &[B256], success: &[bool]) -> Outcomes {
        Outcomes {
            transactions: transactions_digest(order),
            success: success.to_vec(),
        }
    }

    /// Block 9's outcomes as its header lists them: the other sender's transfer, then ours,
    /// reverted.
    fn block_9_outcomes() -> Outcomes {
        outcomes(&[tx("e9"), tx("ab")], &[true, false])
    }

    #[tokio::test]
    async fn one_replica_reads_a_block_s_list_and_another_takes_its_outcomes() {
        let board = Arc::new(Board::default());
        let (first, second) = (reverted_in_block_9(), reverted_in_block_9());
        assert_ours_in_block_9_executed(check_ours(&first, &replica(&board, 1)).await, false);
        assert_eq!(asked_for(&first, "eth_getBlockReceipts"), 1);
        assert_eq!(
            board.of(block_9()),
            Some(OnBoard::Outcomes(block_9_outcomes())),
            "in block order: the other sender's, then ours"
        );
        // The other replica, through its own node: ours, as reverted, and nothing of its
        // node's but the walk.
        assert_ours_in_block_9_executed(check_ours(&second, &replica(&board, 2)).await, false);
        assert_eq!(asked_for(&second, "eth_getBlockReceipts"), 0);
        assert_eq!(asked_for(&second, "eth_getTransactionReceipt"), 0);
    }

    #[tokio::test]
    async fn a_block_another_replica_reads_is_waited_for_and_read_here_if_nothing_comes() {
        // Its outcomes come while this replica waits: taken.
        let board = Board::with(block_9(), OnBoard::Reading(1));
        *board.published_at_pause.lock().unwrap() = Some((block_9(), block_9_outcomes()));
        let node = reverted_in_block_9();
        assert_ours_in_block_9_executed(check_ours(&node, &replica(&board, 2)).await, false);
        assert_eq!(board.pauses(), 1);
        assert_eq!(asked_for(&node, "eth_getBlockReceipts"), 0);
        // They never come (that replica stopped): after its looks, read here and published.
        let board = Board::with(block_9(), OnBoard::Reading(1));
        let node = reverted_in_block_9();
        assert_ours_in_block_9_executed(check_ours(&node, &replica(&board, 2)).await, false);
        assert_eq!(board.pauses(), LOOKS_WHILE_READ_ELSEWHERE);
        assert_eq!(asked_for(&node, "eth_getBlockReceipts"), 1);
        assert_eq!(
            board.of(block_9()),
            Some(OnBoard::Outcomes(block_9_outcomes()))
        );
    }

    #[tokio::test]
    async fn outcomes_of_other_transactions_or_another_order_are_not_taken() {
        // Of block 9's two transactions listed the other way round, one of them only, or a
        // third besides: whose outcome is whose? The list is read here, and the outcomes on
        // the board are left as they are (published once).
        let (theirs, ours) = (tx("e9"), tx("ab"));
        for wrong in [
            outcomes(&[ours, theirs], &[false, true]),
            outcomes(&[ours], &[false]),
            outcomes(&[theirs, ours, tx("77")], &[true, false, true]),
            // The right transactions, one outcome short.
            Outcomes {
                success: vec![true],
                ..block_9_outcomes()
            },
        ] {
            let board = Board::with(block_9(), OnBoard::Outcomes(wrong.clone()));
            let node = reverted_in_block_9();
            assert_ours_in_block_9_executed(check_ours(&node, &replica(&board, 2)).await, false);
            assert_eq!(asked_for(&node, "eth_getBlockReceipts"), 1);
            assert_eq!(board.of(block_9()), Some(OnBoard::Outcomes(wrong)));
        }
    }

    #[tokio::test]
    async fn a_replica_whose_node_s_list_does_not_hold_together_gives_its_claim_up() {
        let board = Arc::new(Board::default());
        let node = Loaded {
            head: 16,
            hashes: true,
            ours_status: "0x0",
            ..Loaded::new(Lists::OfAnotherBlock)
        };
        // Read by its own receipt, and the others are not left waiting for this replica.
        assert_ours_in_block_9_executed(check_ours(&node, &replica(&board, 1)).await, false);
        assert_eq!(asked_for(&node, "eth_getBlockReceipts"), 1);
        assert_eq!(board.claims(), 1);
        assert_eq!(board.of(block_9()), None);
    }

    #[tokio::test]
    async fn a_header_without_its_transactions_neither_takes_nor_gives_outcomes() {
        // Headers without hashes: outcomes in block order cannot be matched to transactions.
        let board = Board::with(block_9(), OnBoard::Outcomes(block_9_outcomes()));
        let node = Loaded::new(Lists::Served);
        assert_ours_in_block_9(check_ours(&node, &replica(&board, 2)).await);
        assert_eq!(
            asked_for(&node, "eth_getBlockReceipts"),
            2,
            "blocks 10 and 9"
        );
        assert_eq!(board.claims(), 0, "nothing asked of the other replicas");
        assert_eq!(board.blocks.lock().unwrap().len(), 1, "nothing published");
    }

    /// A header of block 9 listing `transactions`, and receipts of `listed` in its list.
    fn header_and_list(transactions: &[B256], listed: &[(B256, bool)]) -> (Walked, BlockReceipts) {
        let header = json!({
            "number": hex(9), "hash": block_hash(9), "parentHash": block_hash(8),
            "transactions": transactions.iter().map(B256::to_string).collect::<Vec<_>>(),
        });
        let receipts = listed.iter().map(|&(tx_hash, success)| {
            let receipt = crate::rpc::Receipt {
                tx_hash,
                block_number: 9,
                block_hash: block_9(),
                success,
            };
            (tx_hash, receipt)
        });
        (Walked::of(&header).unwrap(), Arc::new(receipts.collect()))
    }

    #[test]
    fn outcomes_are_given_and_taken_only_for_a_header_naming_each_transaction_once() {
        let (a, b, c) = (tx("0a"), tx("0b"), tx("0c"));
        // As listed: given in the header's order, and taken back as the same receipts.
        let (walked, list) = header_and_list(&[b, a], &[(a, true), (b, false)]);
        let given = outcomes_of(&walked, &list).expect("outcomes");
        assert_eq!(given, outcomes(&[b, a], &[false, true]));
        assert_eq!(receipts_of(&walked, &given), Some(list));
        // A list with a receipt the header does not name, or without one it names.
        for listed in [&[(a, true), (b, true), (c, true)][..], &[(a, true)]] {
            let (walked, list) = header_and_list(&[a, b], listed);
            assert_eq!(outcomes_of(&walked, &list), None, "{listed:?}");
        }
        // A header naming one transaction twice (a list of two would match its length):
        // neither given nor taken.
        let (walked, list) = header_and_list(&[a, a], &[(a, true), (b, false)]);
        assert_eq!(outcomes_of(&walked, &list), None);
        assert_eq!(
            receipts_of(&walked, &outcomes(&[a, a], &[true, false])),
            None
        );
    }

    #[tokio::test]
    async fn under_load_an_inclusion_is_read_from_its_block_s_receipt_list_once_per_block() {
        let node = Loaded::new(Lists::Served);
        let recent = RecentReceipts::default();
        let checks = (0..8).map(|_| check_ours(&node, &recent));
        for view in futures::future::join_all(checks).await {
            assert_ours_in_block_9(view);
        }
        // Blocks 10 and 9, once each for the eight; no receipt of its own.
        assert_eq!(asked_for(&node, "eth_getBlockReceipts"), 2);
        assert_eq!(asked_for(&node, "eth_getTransactionReceipt"), 0);
        // Kept for the next pass.
        check_ours(&node, &recent).await;
        assert_eq!(asked_for(&node, "eth_getBlockReceipts"), 2);
    }

    #[tokio::test]
    async fn only_the_list_of_the_block_holding_ours_is_read_however_late_the_check() {
        // Head 16, ours in block 9, 7 deep: a check that comes late, as under load. The
        // lists of the blocks above (another sender's each) cost the node their whole block
        // and say nothing of ours; a receipt of its own costs more than its share of a list.
        let node = Loaded {
            head: 16,
            hashes: true,
            ..Loaded::new(Lists::Served)
        };
        let recent = RecentReceipts::default();
        // Eight checks of one pass at once, then one of the next pass.
        let mut views = futures::future::join_all((0..8).map(|_| check_ours(&node, &recent))).await;
        views.push(check_ours(&node, &recent).await);
        for view in views {
            assert_ours_in_block_9(view);
        }
        assert_eq!(
            asked_for(&node, "eth_getBlockReceipts"),
            1,
            "block 9's only"
        );
        assert_eq!(asked_for(&node, "eth_getTransactionReceipt"), 0);
        // Blocks 16 down to 9 by hash (with their transactions), each once for the eight
        // checks at once, and kept: the next pass's check asked for none of them again.
        assert_eq!(asked_for(&node, "eth_getBlockByHash"), 8);
    }

    #[tokio::test]
    async fn an_inclusion_below_the_walk_or_past_the_headers_served_is_read_by_its_receipt() {
        // Ours in block 9. Head 9 + WALK_BLOCKS: the walk goes down WALK_BLOCKS headers and
        // stops above it. Head 16 with headers by hash only from block 12: the walk stops
        // where they end. Either way no list is read (none of the blocks walked holds ours),
        // and ours is read by its own receipt.
        for (head, by_hash_from, walked) in [(9 + WALK_BLOCKS, 0, WALK_BLOCKS), (16, 12, 5)] {
            let node = Loaded {
                head,
                hashes: true,
                by_hash_from,
                ..Loaded::new(Lists::Served)
            };
            assert_ours_in_block_9(check_ours(&node, &RecentReceipts::default()).await);
            assert_eq!(asked_for(&node, "eth_getBlockReceipts"), 0, "head {head}");
            assert_eq!(
                asked_for(&node, "eth_getTransactionReceipt"),
                1,
                "head {head}"
            );
            // Every header walked is served but the one asked past the served ones.
            let asked = asked_for(&node, "eth_getBlockByHash");
            assert_eq!(
                asked,
                walked as usize + usize::from(by_hash_from > 0),
                "head {head}"
            );
        }
    }

    #[tokio::test]
    async fn ours_in_a_block_whose_list_is_unusable_is_read_by_its_receipt_and_no_other_list() {
        // Head 16, ours in block 9, headers with their transactions' hashes: the walk finds
        // ours in block 9 by its header, and that block's list does not hold together or is
        // not served. Ours is read by its own receipt; no other block's list is read instead.
        for lists in [Lists::OfAnotherBlock, Lists::Unsupported] {
            let node = Loaded {
                head: 16,
                hashes: true,
                ..Loaded::new(lists)
            };
            let recent = RecentReceipts::default();
            for _ in 0..2 {
                assert_ours_in_block_9(check_ours(&node, &recent).await);
            }
            assert_eq!(
                asked_for(&node, "eth_getBlockReceipts"),
                1,
                "block 9's, once"
            );
            assert_eq!(asked_for(&node, "eth_getTransactionReceipt"), 2);
            // The walk stopped at block 9 (headers 16 down to 9, kept for the second read).
            assert_eq!(asked_for(&node, "eth_getBlockByHash"), 8);
        }
    }

    #[tokio::test]
    async fn through_a_pass_cache_a_walk_with_headers_naming_their_transactions_follows_a_reorg() {
        // As `a_list_kept_for_a_block_reorged_out_is_not_taken_for_the_chain`, with headers
        // that name their transactions, read through the pass's cache (which keeps the head
        // read by number without them, so the walk reads it again by hash). Before the reorg
        // ours is found in block 9's list, the only list read. After it, block 9 (now 109)
        // holds another transaction of the account: the walk follows the new head's parents
        // by hash, not the headers kept from before, so no block of the new chain is taken
        // for holding ours. (A list kept under the old hash is the older test's case.)
        let node = sigcast_jsonrpc::PassCache::new(Loaded {
            hashes: true,
            ..Loaded::new(Lists::Served)
        });
        let recent = RecentReceipts::default();
        assert_ours_in_block_9(check_ours(&node, &recent).await);
        assert_eq!(asked_for(node_of(&node), "eth_getBlockReceipts"), 1);
        assert_eq!(asked_for(node_of(&node), "eth_getTransactionReceipt"), 0);
        node_of(&node)
            .reorged
            .store(true, std::sync::atomic::Ordering::SeqCst);
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let after = check_ours(&node, &recent).await;
        assert_eq!(after.head.number, 11);
        let landed = after.landed.expect("the nonce's user");
        assert_eq!(landed.tx, tx("cd").to_string(), "{landed:?}");
        assert_eq!(landed.block.hash, block_hash(109));
        assert_eq!(
            asked_for(node_of(&node), "eth_getBlockReceipts"),
            1,
            "no block of the new chain holds ours: no list read"
        );
    }

    #[tokio::test]
    async fn a_list_kept_for_a_block_reorged_out_is_not_taken_for_the_chain() {
        // Found in review: within one pass, block 9's header (by number) and its list were
        // kept from before a reorg; the list still showed ours, under the old hash that the
        // pass's header also said, and the operation would settle on a block no longer in the
        // chain (there, another transaction of the account used the nonce).
        let node = sigcast_jsonrpc::PassCache::new(Loaded::new(Lists::Served));
        let recent = RecentReceipts::default();
        assert_ours_in_block_9(check_ours(&node, &recent).await);
        assert_eq!(
            asked_for(node_of(&node), "eth_getTransactionReceipt"),
            0,
            "read from the list"
        );
        // The reorg; the head read is kept for 250 ms, the rest for the whole pass.
        node_of(&node)
            .reorged
            .store(true, std::sync::atomic::Ordering::SeqCst);
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let after = check_ours(&node, &recent).await;
        assert_eq!(after.head.number, 11);
        // What the chain now holds at the nonce: the account's other transaction, in the new
        // block 9.
        let landed = after.landed.expect("the nonce's user");
        assert_eq!(landed.tx, tx("cd").to_string(), "{landed:?}");
        assert_eq!(landed.block.hash, block_hash(109));
    }

    #[tokio::test]
    async fn a_block_kept_by_number_from_before_a_reorg_does_not_make_a_stale_receipt_canonical() {
        // Found in review: within one pass, block 9's header read by number was kept from
        // before a reorg. A receipt the node still answered from the old block 9 then matched
        // it, and the view showed ours included in a chain whose block 9 holds another
        // transaction of the account at the nonce (with one confirmation, CONFIRMED).
        let node = sigcast_jsonrpc::PassCache::new(Loaded {
            stale_receipts: true,
            ..Loaded::new(Lists::Served)
        });
        let by_receipt = |node| async move {
            read_view(node, ACCOUNT.parse().unwrap(), 5, &[tx("ab")], None, 1)
                .await
                .unwrap()
        };
        assert_ours_in_block_9(by_receipt(&node).await);
        node_of(&node)
            .reorged
            .store(true, std::sync::atomic::Ordering::SeqCst);
        // The head read is kept for 250 ms.
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let after = by_receipt(&node).await;
        assert_eq!(after.head.number, 11);
        let landed = after.landed.expect("the nonce's user");
        assert_eq!(landed.tx, tx("cd").to_string(), "{landed:?}");
        assert_eq!(landed.block.hash, block_hash(109));
    }

    #[tokio::test]
    async fn a_receipt_list_that_does_not_hold_together_or_is_not_served_is_not_used() {
        for lists in [Lists::OfAnotherBlock, Lists::Unsupported] {
            let node = Loaded::new(lists);
            let recent = RecentReceipts::default();
            for _ in 0..2 {
                // Read from its own receipt instead, in block 9 as the header says.
                assert_ours_in_block_9(check_ours(&node, &recent).await);
            }
            assert_eq!(asked_for(&node, "eth_getTransactionReceipt"), 2);
            if lists == Lists::Unsupported {
                assert_eq!(
                    asked_for(&node, "eth_getBlockReceipts"),
                    1,
                    "an endpoint without the method is not asked again"
                );
            }
        }
    }

    #[tokio::test]
    async fn a_nonce_taken_above_the_confirmation_depth_is_not_yet_settled() {
        // Head 10; the account's nonce passed 5 in block 7.
        let node = StateBeforeReceipts {
            by_hash: Value::Null,
            in_block_7: tx("cd"),
            head: 10,
            no_state: false,
            lists: false,
            asked: Mutex::default(),
        };
        let account: Address = ACCOUNT.parse().unwrap();
        let read = |confirmations| account_nonces(&node, account, confirmations);
        let nonces = |head, settled| AccountNonces { head, settled };
        assert_eq!(read(0).await.unwrap(), nonces(6, 6));
        assert_eq!(read(1).await.unwrap(), nonces(6, 6));
        // Block 7 is 4 deep: settled at 4, not at 5.
        assert_eq!(read(4).await.unwrap(), nonces(6, 6));
        assert_eq!(read(5).await.unwrap(), nonces(6, 5));
        assert_eq!(read(100).await.unwrap(), nonces(6, 5), "clamped at genesis");
        assert_eq!(
            node.asked.lock().unwrap().last().unwrap(),
            &format!("eth_getTransactionCount[\"{ACCOUNT}\",\"0x0\"]")
        );
        let unreadable = StateBeforeReceipts {
            no_state: true,
            ..node
        };
        assert!(account_nonces(&unreadable, account, 3).await.is_err());
    }

    #[tokio::test]
    async fn no_receipt_is_asked_for_while_the_account_nonce_has_not_passed_ours() {
        let ours = tx("ab");
        let node = |no_state| StateBeforeReceipts {
            by_hash: Value::Null,
            in_block_7: tx("cd"),
            head: 10,
            no_state,
            lists: false,
            asked: Mutex::default(),
        };
        // Nonce 6 is the account's next at the head: nothing of ours can be at or below it.
        let waiting = node(false);
        let view = read_view(&waiting, ACCOUNT.parse().unwrap(), 6, &[ours], None, 1)
            .await
            .unwrap();
        assert_eq!((view.account_nonce, view.landed), (Some(6), None));
        let asked = waiting.asked.lock().unwrap().clone();
        assert!(
            !asked
                .iter()
                .any(|a| a.starts_with("eth_getTransactionReceipt")),
            "{asked:?}"
        );
        // Without the account's state, nothing says so: the receipt is asked for.
        let stateless = node(true);
        read_view(&stateless, ACCOUNT.parse().unwrap(), 6, &[ours], None, 1)
            .await
            .unwrap();
        let asked = stateless.asked.lock().unwrap().clone();
        assert!(
            asked
                .iter()
                .any(|a| a.starts_with("eth_getTransactionReceipt")),
            "{asked:?}"
        );
    }

    #[tokio::test]
    async fn ours_found_by_hash_before_its_receipt_spares_reading_whole_blocks() {
        let ours = tx("ab");
        let node = StateBeforeReceipts {
            by_hash: by_hash(ours, "0x5", &block_hash(7)),
            in_block_7: ours,
            head: 10,
            no_state: false,
            lists: false,
            asked: Mutex::default(),
        };
        let view = read_view(&node, ACCOUNT.parse().unwrap(), 5, &[ours], None, 1)
            .await
            .unwrap();
        let landed = view.landed.expect("ours, in block 7");
        assert_eq!(landed.tx, ours.to_string());
        assert_eq!(landed.block.number, 7);
        assert_eq!(
            landed.canonical_hash.as_deref(),
            Some(block_hash(7).as_str())
        );
        assert_eq!(
            landed.success, None,
            "no receipt read: nothing settles on it"
        );
        let asked = node.asked.lock().unwrap();
        assert!(
            !asked.iter().any(|a| a.ends_with(",true]")),
            "no whole block read: {asked:?}"
        );
    }

    #[tokio::test]
    async fn an_answer_by_hash_that_does_not_hold_leaves_the_search_to_find_the_nonce_s_user() {
        let (ours, foreign) = (tx("ab"), tx("cd"));
        for (case, answer) in [
            (
                "a block no longer canonical",
                by_hash(ours, "0x5", &format!("0x{}", "ee".repeat(32))),
            ),
            (
                "pending",
                json!({"hash": ours.to_string(), "from": ACCOUNT, "nonce": "0x5", "blockNumber": null, "blockHash": null}),
            ),
            ("another nonce", by_hash(ours, "0x4", &block_hash(7))),
            ("unknown", Value::Null),
            (
                "another transaction",
                by_hash(tx("99"), "0x5", &block_hash(7)),
            ),
        ] {
            let node = StateBeforeReceipts {
                by_hash: answer,
                in_block_7: foreign,
                head: 10,
                no_state: false,
                lists: false,
                asked: Mutex::default(),
            };
            let view = read_view(&node, ACCOUNT.parse().unwrap(), 5, &[ours], None, 1)
                .await
                .unwrap();
            let landed = view.landed.expect("the nonce's user, found in block 7");
            assert_eq!(landed.tx, foreign.to_string(), "{case}");
        }
    }

    #[tokio::test]
    async fn an_inclusion_by_hash_still_without_receipt_deep_down_is_checked_in_its_block() {
        let (ours, foreign) = (tx("ab"), tx("cd"));
        for (head, expected) in [(10, ours), (7 + RECEIPT_LAG_LIMIT, foreign)] {
            // The index says ours is in block 7; block 7 itself holds another transaction.
            let node = StateBeforeReceipts {
                by_hash: by_hash(ours, "0x5", &block_hash(7)),
                in_block_7: foreign,
                head,
                no_state: false,
                lists: false,
                asked: Mutex::default(),
            };
            let view = read_view(&node, ACCOUNT.parse().unwrap(), 5, &[ours], None, 1)
                .await
                .unwrap();
            assert_eq!(
                view.landed.unwrap().tx,
                expected.to_string(),
                "head {head}: an index shallowly ahead of receipts is taken, deep down the block decides"
            );
        }
    }

    #[tokio::test]
    async fn ours_in_its_block_deep_down_with_its_index_pruned_is_read_from_the_block_s_list() {
        // A node that prunes its transaction index (geth's txlookuplimit) answers no receipt
        // by hash, ever: the block's own list says how ours executed.
        let ours = tx("ab");
        let node = StateBeforeReceipts {
            by_hash: Value::Null,
            in_block_7: ours,
            head: 7 + RECEIPT_LAG_LIMIT,
            no_state: false,
            lists: true,
            asked: Mutex::default(),
        };
        let view = read_view(&node, ACCOUNT.parse().unwrap(), 5, &[ours], None, 1)
            .await
            .unwrap();
        let landed = view.landed.expect("ours, in block 7");
        assert_eq!((landed.tx, landed.success), (ours.to_string(), Some(true)));
    }

    #[tokio::test]
    async fn a_receipt_of_another_transaction_is_no_evidence_of_ours() {
        // Asked for ours, the node answers another transaction's receipt: taken for what used
        // our nonce, it would settle the operation REJECTED while ours may land (review,
        // fourteenth session). Ours is found in its block instead.
        let node = Loaded {
            mixed_receipts: true,
            ..Loaded::new(Lists::Unsupported)
        };
        let view = read_view(&node, ACCOUNT.parse().unwrap(), 5, &[tx("ab")], None, 1)
            .await
            .unwrap();
        let landed = view.landed.expect("ours, from its block");
        assert_eq!(landed.tx, tx("ab").to_string());
        assert_eq!(landed.success, None, "its receipt was never answered");
    }

    /// Two nodes behind one URL, each request answered by one that can: node A at block 10,
    /// where ours (nonce 5) landed in block 9; node B on another chain from block 9 on, at
    /// block 20, where another transaction of the account took nonce 5 in block 11. The head
    /// and the account's nonce come from B; receipts, and blocks up to 10 by number, from A;
    /// a block by hash from the node that holds it.
    struct Balanced {
        ours: B256,
        /// Node A alone answers, its chain grown to block 20 over ours (one honest node).
        one_node: bool,
    }

    impl Balanced {
        fn hash(chain: &str, n: u64) -> String {
            match n {
                ..9 => block_hash(n),
                _ => format!("0x{chain}{n:062x}"),
            }
        }

        fn header(chain: &str, n: u64) -> Value {
            json!({"number": hex(n), "hash": Self::hash(chain, n),
                   "parentHash": Self::hash(chain, n.saturating_sub(1)), "transactions": []})
        }
    }

    impl Endpoint for Balanced {
        fn label(&self) -> &str {
            "http://balanced:8545"
        }

        async fn request(&self, method: &str, params: Value) -> Result<Value, RpcError> {
            let number = |tag: &Value| match tag.as_str() {
                Some("latest") => 20,
                Some(hex) => u64::from_str_radix(&hex[2..], 16).unwrap(),
                None => unreachable!(),
            };
            Ok(match method {
                "eth_getBlockByNumber" if self.one_node => match number(&params[0]) {
                    n @ ..=20 => Self::header("aa", n),
                    _ => Value::Null,
                },
                "eth_getTransactionCount" if self.one_node => {
                    json!(hex(if number(&params[1]) >= 9 { 6 } else { 5 }))
                }
                "eth_getBlockByNumber" => match number(&params[0]) {
                    n @ ..=10 => Self::header("aa", n),
                    n @ ..=20 => Self::header("bb", n),
                    _ => Value::Null,
                },
                "eth_getBlockByHash" => {
                    let hash = params[0].as_str().unwrap();
                    (0..=20)
                        .flat_map(|n| [("aa", n), ("bb", n)])
                        .filter(|(chain, n)| match self.one_node {
                            true => *chain == "aa",
                            false => *chain == "bb" || *n <= 10,
                        })
                        .find(|(chain, n)| Self::hash(chain, *n) == hash)
                        .map_or(Value::Null, |(chain, n)| Self::header(chain, n))
                }
                "eth_getTransactionCount" => {
                    json!(hex(if number(&params[1]) >= 11 { 6 } else { 5 }))
                }
                "eth_getTransactionReceipt" if params[0] == json!(self.ours.to_string()) => {
                    json!({"transactionHash": self.ours.to_string(), "blockNumber": hex(9),
                           "blockHash": Self::hash("aa", 9), "status": "0x1"})
                }
                "eth_getTransactionReceipt" => Value::Null,
                other => unreachable!("{other}"),
            })
        }
    }

    #[tokio::test]
    async fn a_depth_assembled_from_two_nodes_behind_one_url_settles_nothing() {
        use sigcast_proto::pb;
        let ours = tx("ab");
        let op = pb::Operation {
            op_id: "op".into(),
            state: pb::OperationState::Sent.into(),
            chain: "eip155:1".into(),
            account: ACCOUNT.into(),
            signing: Some(pb::operation::Signing::Evm(pb::EvmSigning { nonce: 5 })),
            attempts: vec![pb::Attempt {
                number: 1,
                tx_id: ours.to_string(),
                outcome: pb::AttemptOutcome::Accepted.into(),
                sends: 1,
                may_land: true,
                ..Default::default()
            }],
            ..Default::default()
        };
        let rules = sigcast_protocol::Rules {
            confirmations: 3,
            ..Default::default()
        };
        let decided = |view: EvmView| {
            sigcast_protocol::decide(
                &op,
                &sigcast_protocol::Evidence::Evm(vec![view]),
                std::time::SystemTime::now(),
                &rules,
            )
        };
        let behind_one_url = Balanced {
            ours,
            one_node: false,
        };
        let view = read_view(
            &behind_one_url,
            ACCOUNT.parse().unwrap(),
            5,
            &[ours],
            None,
            3,
        )
        .await
        .unwrap();
        // Block 9 by number is node A's: ours looks canonical, eleven blocks under B's head.
        let landed = view.landed.clone().expect("ours, by its receipt");
        assert_eq!(
            landed.canonical_hash.as_deref(),
            Some(landed.block.hash.as_str())
        );
        let action = decided(view);
        assert!(
            !matches!(action, sigcast_protocol::Action::Settle(_)),
            "settled on a depth no chain has: {action:?}"
        );
        // One node whose chain grew over ours links it, and settles.
        let one_node = Balanced {
            ours,
            one_node: true,
        };
        let view = read_view(&one_node, ACCOUNT.parse().unwrap(), 5, &[ours], None, 3)
            .await
            .unwrap();
        let descendant = view.landed.as_ref().and_then(|l| l.descendant.clone());
        assert_eq!(descendant.map(|d| d.number), Some(11));
        assert!(
            matches!(decided(view), sigcast_protocol::Action::Settle(_)),
            "a proven depth settles"
        );
    }
}
