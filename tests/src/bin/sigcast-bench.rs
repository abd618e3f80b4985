//! `sigcast-bench`: the load generator. Starts anvil (`--block-time 1`) and a sigcast stack
//! (signer, broadcaster, gateway on the embedded store, built in the same profile as this
//! binary), then
//!
//! 1. `--baseline direct`: signs N transfers over K fresh accounts with alloy and sends them
//!    straight to a node, pipelined per account, without any persistence — the ceiling. On EVM
//!    that node is an anvil of its own, started with sigcast's and idle through sigcast's run
//!    as sigcast's is through the baseline's (`--baseline-node shared`: first on sigcast's
//!    node instead);
//! 2. submits N transfers over K other accounts through the gateway at concurrency C and
//!    waits until all are CONFIRMED;
//! 3. times R replayed submits and R gRPC health checks on the same gateway;
//!
//! and prints one table: submit latency p50/p99, time to SENT and to CONFIRMED, mined
//! throughput of each and their ratio, replay vs health p50, each service's peak RSS.
//! `--chain solana` does the same with SOL transfers on the Solana development node (litesvm
//! behind Solana JSON-RPC, a slot every 400 ms, run inside this process): the baseline signs
//! them with ed25519-dalek over a recent blockhash and sends each once.
//! `--watches W` measures something else: the gateway's memory (resident set) with W watch
//! streams open on operations that stay in flight, during a flood of `--lists L` full-page
//! ListOperations calls, and after the watches close; and that one watch past the per-caller
//! limit is refused.
//!
//! Every EVM node it starts keeps its base fee at zero: anvil's `--base-fee 0` (the bench's
//! `--base-fee market` leaves EIP-1559's, which each full block raises by 12.5%). The ratio
//! is meant to show whether sigcast keeps up with the node, and a rising base fee measures
//! something else: the fees each side signed with against the fee its node's history has
//! reached. Transfers signed at twice the base fee plus the tip stop fitting after ten full
//! blocks from anvil's genesis fee, and a node's fee falls by 12.5% with every empty block, so
//! at the market fee the side whose node idled longer, or was not filled first, wins.
//!
//! A benchmark, not a test: it asserts nothing about speed. But a run in which any operation
//! ends other than CONFIRMED with success, or nothing is confirmed for `--stall-secs`, is a
//! failed run: it says which operations and in what state, and exits 1.

use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use futures::StreamExt;
use serde_json::json;
use sigcast_domain::{EvmAddress, EvmTransfer, Intent, Wei};
use sigcast_e2e::{Anvil, SolanaNode, Stack, StackOptions};
use sigcast_evm::{EvmRpc, RpcPool, TxParams, build_transaction};
use sigcast_proto::pb;
use sigcast_proto::sigcast::v1::operation_service_client::OperationServiceClient;
use std::time::{Duration, Instant, SystemTime};

#[derive(Clone, Copy, PartialEq)]
enum ChainKind {
    Evm,
    Solana,
}

/// Which node the EVM baseline sends to.
#[derive(Clone, Copy, PartialEq)]
enum BaselineNode {
    /// A fresh anvil of its own, started beside sigcast's and idle through sigcast's run.
    Own,
    /// sigcast's own anvil, before sigcast's run.
    Shared,
}

/// The base fee of every EVM node the bench starts.
#[derive(Clone, Copy, PartialEq)]
enum BaseFee {
    /// Kept at zero (anvil's `--base-fee 0`).
    Zero,
    /// As EIP-1559 moves it: up 12.5% after each full block.
    Market,
}

/// Every anvil's block time, in seconds.
const BLOCK_TIME: Option<u64> = Some(1);

struct Args {
    chain: ChainKind,
    ops: usize,
    accounts: usize,
    concurrency: usize,
    baseline: bool,
    /// EVM: where the baseline sends.
    baseline_node: BaselineNode,
    /// EVM: the nodes' base fee.
    base_fee: BaseFee,
    replays: usize,
    stall: Duration,
    watches: usize,
    lists: usize,
    replicas: usize,
    stored: usize,
    /// Submits per second, each started on its schedule (open loop); none: as fast as the
    /// concurrency allows.
    rate: Option<f64>,
    /// Print how many operations are in each state at every poll (each second).
    states: bool,
    /// EVM: each side's load starts just after its node mines a block.
    at_block: bool,
}

const USAGE: &str = "usage: sigcast-bench [--chain evm|solana (evm)] [--ops N (2000)] [--accounts K (4)] \
[--concurrency C (64)] [--baseline direct|none (direct)] \
[--baseline-node own|shared (own): EVM baseline on a fresh anvil, or first on sigcast's] \
[--base-fee zero|market (zero): EVM nodes' base fee kept at 0, or per EIP-1559] [--replays R (500)] \
[--stall-secs S (60)] [--replicas N (1): signers and broadcasters each] \
[--stored M (0): settled operations in the store before the run] \
[--rate R: submits per second, paced (as fast as possible)] \
[--states on: operations per state, each second] \
[--start at-block|any (at-block): EVM, each side's load starts just after its node mines a block, or at once] \
| --watches W [--lists L (1000)]";

impl Args {
    /// anvil's arguments beyond the block time, for every node the run starts.
    fn anvil_args(&self) -> Vec<String> {
        match self.base_fee {
            BaseFee::Zero => vec!["--base-fee".into(), "0".into()],
            BaseFee::Market => Vec::new(),
        }
    }
}

/// The value of a flag that takes one of two words: "--flag: a or b, not x" otherwise.
fn one_of<T: Copy>(flag: &str, value: &str, [(a, x), (b, y)]: [(&str, T); 2]) -> Result<T, String> {
    match value {
        v if v == a => Ok(x),
        v if v == b => Ok(y),
        _ => Err(format!("{flag}: {a} or {b}, not {value}")),
    }
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        chain: ChainKind::Evm,
        ops: 2_000,
        accounts: 4,
        concurrency: 64,
        baseline: true,
        baseline_node: BaselineNode::Own,
        base_fee: BaseFee::Zero,
        replays: 500,
        stall: Duration::from_secs(60),
        watches: 0,
        lists: 1_000,
        replicas: 1,
        stored: 0,
        rate: None,
        states: false,
        at_block: true,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--help" || flag == "-h" {
            println!("{USAGE}");
            std::process::exit(0);
        }
        let value = it.next().ok_or(format!("{flag} needs a value\n{USAGE}"))?;
        let number = || {
            value
                .parse::<usize>()
                .map_err(|_| format!("{flag}: not a number: {value}"))
        };
        match flag.as_str() {
            "--ops" => args.ops = number()?,
            "--accounts" => args.accounts = number()?.max(1),
            "--concurrency" => args.concurrency = number()?.max(1),
            "--replays" => args.replays = number()?,
            "--watches" => args.watches = number()?,
            "--lists" => args.lists = number()?,
            "--replicas" => args.replicas = number()?.max(1),
            "--stored" => args.stored = number()?,
            "--rate" => args.rate = Some(number()?.max(1) as f64),
            "--states" => args.states = value == "on",
            "--stall-secs" => args.stall = Duration::from_secs(number()?.max(1) as u64),
            "--chain" => {
                args.chain = one_of(
                    &flag,
                    &value,
                    [("evm", ChainKind::Evm), ("solana", ChainKind::Solana)],
                )?
            }
            "--baseline" => {
                args.baseline = one_of(&flag, &value, [("direct", true), ("none", false)])?
            }
            "--base-fee" => {
                args.base_fee = one_of(
                    &flag,
                    &value,
                    [("zero", BaseFee::Zero), ("market", BaseFee::Market)],
                )?
            }
            "--start" => {
                args.at_block = one_of(&flag, &value, [("at-block", true), ("any", false)])?
            }
            "--baseline-node" => {
                args.baseline_node = one_of(
                    &flag,
                    &value,
                    [("own", BaselineNode::Own), ("shared", BaselineNode::Shared)],
                )?
            }
            _ => return Err(format!("unknown flag {flag}\n{USAGE}")),
        }
    }
    Ok(args)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1_000.0)
}

/// Peak resident set of a process, from /proc (VmHWM), in MiB.
fn peak_rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// Progress: a bar redrawn in place on a terminal; otherwise (a log, CI) a plain line every
/// ten seconds and at the end.
fn progress(label: &str, done: usize, total: usize, started: Instant) {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        static LAST: std::sync::Mutex<Option<Instant>> = std::sync::Mutex::new(None);
        let mut last = LAST.lock().unwrap_or_else(|p| p.into_inner());
        if done >= total || last.is_none_or(|at| at.elapsed() >= Duration::from_secs(10)) {
            eprintln!(
                "{label}: {done}/{total} after {:.0}s",
                started.elapsed().as_secs_f64()
            );
            *last = Some(Instant::now());
        }
        return;
    }
    let width = 30;
    let filled = (done * width)
        .checked_div(total)
        .unwrap_or(width)
        .min(width);
    eprint!(
        "\r{label:<10} [{}{}] {done}/{total} {:.0}s",
        "#".repeat(filled),
        "-".repeat(width - filled),
        started.elapsed().as_secs_f64()
    );
    if done >= total {
        eprintln!();
    }
}

fn recipient(i: usize) -> String {
    format!("0x{:040x}", 0xbe_0000_0000_u64 + i as u64)
}

async fn fund(pool: &RpcPool, account: &str) {
    pool.read("anvil_setBalance", json!([account, "0x3635c9adc5dea00000"]))
        .await
        .expect("anvil_setBalance");
}

/// anvil's head block number.
async fn head(url: &str) -> u64 {
    let pool = RpcPool::new(&[url.to_owned()], Duration::from_secs(10)).unwrap();
    let head = pool
        .read("eth_blockNumber", json!([]))
        .await
        .expect("eth_blockNumber");
    head.as_str()
        .and_then(|hex| u64::from_str_radix(hex.trim_start_matches("0x"), 16).ok())
        .unwrap_or_else(|| panic!("eth_blockNumber answered {head}"))
}

/// Returns just after the node at `url` mines its next block (at most 5 s from now, else with
/// a warning): where each side's load starts, so that both windows hold the same whole block
/// period before their first block (BENCHMARKS.md, thirteenth session).
async fn just_after_a_block(url: &str) {
    let rpc = EvmRpc::new(&[url.to_owned()], Duration::from_secs(10)).unwrap();
    let until = Instant::now() + Duration::from_secs(5);
    // The first head answered: a failed read before it does not make every later one wait
    // out the 5 s.
    let mut first = None;
    loop {
        match (first, rpc.block_number().await.ok()) {
            (Some(first), Some(head)) if head != first => return,
            (None, head) => first = head,
            _ => {}
        }
        if Instant::now() >= until {
            eprintln!("no block from {url} in 5 s: the run starts anywhere in its period");
            return;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// How full the blocks `from..=to` are: transactions per block, mean (min–max), over how many
/// blocks, each block's in order, and the base fee they were mined at. A block of anvil's default gas limit holds at
/// most 1,428 transfers: a run whose blocks are full is bounded by the chain, not by who sends.
async fn block_fill(url: &str, from: u64, to: u64) -> String {
    let pool = RpcPool::new(&[url.to_owned()], Duration::from_secs(10)).unwrap();
    // (transactions, base fee in wei; `None` when the block names none) per block.
    let mut blocks = Vec::new();
    for number in from..=to {
        let block = pool
            .read(
                "eth_getBlockByNumber",
                json!([format!("0x{number:x}"), false]),
            )
            .await;
        if let Ok(block) = block {
            let base_fee = sigcast_evm::base_fee(&block);
            blocks.push((
                block["transactions"].as_array().map_or(0, Vec::len),
                base_fee,
            ));
        }
    }
    // The empty blocks at either end (mined while the run set up, or after its last
    // transaction) are no part of it.
    while blocks.last().is_some_and(|&(n, _)| n == 0) {
        blocks.pop();
    }
    let first_used = blocks
        .iter()
        .position(|&(n, _)| n > 0)
        .unwrap_or(blocks.len());
    blocks.drain(..first_used);
    let counts = blocks.iter().map(|&(n, _)| n);
    let (Some(min), Some(max)) = (counts.clone().min(), counts.clone().max()) else {
        return "—".into();
    };
    let mean = counts.sum::<usize>() as f64 / blocks.len() as f64;
    let fees: Option<Vec<u128>> = blocks.iter().map(|&(_, fee)| fee).collect();
    let fees = match fees.as_deref().map(|f| (f.iter().min(), f.iter().max())) {
        Some((Some(0), Some(0))) => "base fee 0 gwei".to_owned(),
        Some((Some(&low), Some(&high))) => format!(
            "base fee {:.3}–{:.3} gwei",
            low as f64 / 1e9,
            high as f64 / 1e9
        ),
        _ => "base fee not given".to_owned(),
    };
    // In order: where a run lost blocks (its start, a stall in the middle, its tail).
    let each: Vec<String> = blocks.iter().map(|&(n, _)| n.to_string()).collect();
    format!(
        "{mean:.0} ({min}–{max}) over {} blocks [{}], {fees}",
        blocks.len(),
        each.join(" ")
    )
}

/// The ceiling: alloy signs, one endpoint receives, nothing is persisted. Returns its mined
/// tx/s and how many transactions it sent again.
///
/// An account whose nonce has not moved for 3 s gets its remaining transactions again,
/// byte-identical, from its current nonce: at the market base fee, anvil has been seen to drop
/// transactions it accepted (most likely for their fee, left behind by the base fee).
async fn direct_baseline(url: &str, args: &Args) -> (f64, usize) {
    let rpc = EvmRpc::new(&[url.to_owned()], Duration::from_secs(10)).unwrap();
    let keys: Vec<PrivateKeySigner> = (0..args.accounts)
        .map(|_| PrivateKeySigner::random())
        .collect();
    for key in &keys {
        fund(&rpc, &key.address().to_string()).await;
    }
    let fees = rpc.eip1559_fees().await.unwrap();
    let per_account: Vec<Vec<usize>> = (0..args.accounts)
        .map(|a| (0..args.ops).filter(|i| i % args.accounts == a).collect())
        .collect();
    if args.at_block {
        just_after_a_block(url).await;
    }
    let started = Instant::now();
    let signed: Vec<Vec<Vec<u8>>> = futures::stream::iter(keys.iter().zip(&per_account))
        .map(|(key, ops)| {
            let rpc = &rpc;
            async move {
                let mut raws = Vec::with_capacity(ops.len());
                for (nonce, i) in ops.iter().enumerate() {
                    let intent = Intent::EvmTransfer(EvmTransfer {
                        chain_id: 31337,
                        from: EvmAddress::from(key.address().into_array()),
                        to: EvmAddress::parse(&recipient(*i)).unwrap(),
                        value: Wei::parse(&(1_000 + i).to_string()).unwrap(),
                    });
                    let unsigned = build_transaction(
                        &intent,
                        TxParams {
                            nonce: nonce as u64,
                            gas_limit: 21_000,
                            fees,
                        },
                    )
                    .unwrap();
                    let signature = key.sign_hash_sync(&unsigned.signature_hash()).unwrap();
                    let raw = unsigned.into_signed(signature).raw;
                    let _ = rpc.send_raw(&raw, 0).await;
                    raws.push(raw);
                }
                raws
            }
        })
        .buffered(args.concurrency)
        .collect()
        .await;
    let mut last_progress: Vec<(u64, Instant)> = vec![(0, Instant::now()); keys.len()];
    let mut resent = 0;
    // The nonces are read once per block, all at once, as soon as the head moves (read every
    // 5 ms): the window ends within milliseconds of the last block. sigcast's ends when its
    // last confirmation is stored; a poll every 250 ms, as before, lengthened the baseline's.
    let mut read_at: Option<u64> = None;
    loop {
        match rpc.block_number().await.ok() {
            Some(head) if read_at == Some(head) => {
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            }
            Some(head) => read_at = Some(head),
            // No head: the nonces at a poll's pace, as before.
            None => tokio::time::sleep(Duration::from_millis(250)).await,
        }
        let nonces =
            futures::future::join_all(keys.iter().map(|key| rpc.nonce(key.address()))).await;
        let mut mined = 0;
        for (a, nonce) in nonces.into_iter().enumerate() {
            let nonce = nonce.unwrap_or(0);
            mined += (nonce as usize).min(signed[a].len());
            if nonce != last_progress[a].0 {
                last_progress[a] = (nonce, Instant::now());
            } else if (nonce as usize) < signed[a].len()
                && last_progress[a].1.elapsed() > Duration::from_secs(3)
            {
                for raw in &signed[a][nonce as usize..] {
                    let _ = rpc.send_raw(raw, 0).await;
                    resent += 1;
                }
                last_progress[a].1 = Instant::now();
            }
        }
        progress("baseline", mined, args.ops, started);
        if mined >= args.ops {
            break;
        }
    }
    (args.ops as f64 / started.elapsed().as_secs_f64(), resent)
}

fn transfer(chain: ChainKind, op_id: &str, from: &str, i: usize) -> pb::SubmitOperationRequest {
    let kind = match chain {
        ChainKind::Evm => pb::intent::Kind::EvmTransfer(pb::EvmTransfer {
            chain_id: 31337,
            from: from.into(),
            to: recipient(i),
            value_wei: (1_000 + i).to_string(),
        }),
        // To the sender's own funded recipient: a new account would need the rent-exempt
        // minimum, far more than these amounts.
        ChainKind::Solana => pb::intent::Kind::SolanaTransfer(pb::SolanaTransfer {
            cluster: "localnet".into(),
            from: from.into(),
            to: solana_recipient(from),
            lamports: (1_000 + i).to_string(),
        }),
    };
    pb::SubmitOperationRequest {
        op_id: op_id.into(),
        intent: Some(pb::Intent { kind: Some(kind) }),
    }
}

/// The account a Solana sender's transfers go to: the sender's key with its first and last
/// bytes flipped (an address of nobody's key, one per sender), funded first.
fn solana_recipient(from: &str) -> String {
    let mut key = key_bytes(from);
    key[0] ^= 0xff;
    key[31] ^= 0xff;
    bs58::encode(key).into_string()
}

fn key_bytes(account: &str) -> [u8; 32] {
    bs58::decode(account)
        .into_vec()
        .expect("base58")
        .try_into()
        .expect("32 bytes")
}

/// A lamport count: one SOL.
const SOL: u64 = 1_000_000_000;

/// Funds a Solana sender (100 SOL) and its recipient (1 SOL, so that transfers to it never
/// leave it below the rent-exempt minimum).
fn fund_solana(node: &SolanaNode, sender: &str) {
    node.airdrop(key_bytes(sender), 100 * SOL);
    node.airdrop(key_bytes(&solana_recipient(sender)), SOL);
}

/// The ceiling on Solana: ed25519-dalek signs SOL transfers of K fresh keys over a recent
/// blockhash, each sent once to the node, nothing persisted; then waits until every signature
/// has a status. Returns landed tx/s.
async fn solana_baseline(node: &SolanaNode, args: &Args) -> f64 {
    use sigcast_solana::{Lifetime, SolanaRpc, assemble, message_bytes, transfer_message};
    let rpc = SolanaRpc::new(std::slice::from_ref(&node.url), Duration::from_secs(10)).unwrap();
    let keys: Vec<ed25519_dalek::SigningKey> = (0..args.accounts)
        .map(|_| ed25519_dalek::SigningKey::from_bytes(&rand::random()))
        .collect();
    for key in &keys {
        fund_solana(
            node,
            &bs58::encode(key.verifying_key().to_bytes()).into_string(),
        );
    }
    let started = Instant::now();
    let blockhash = rpc.latest_blockhash().await.expect("a blockhash").hash;
    let signatures: Vec<String> = futures::stream::iter(0..args.ops)
        .map(|i| {
            let (rpc, key) = (&rpc, &keys[i % args.accounts]);
            async move {
                let from = bs58::encode(key.verifying_key().to_bytes()).into_string();
                let transfer = sigcast_domain::SolanaTransfer {
                    cluster: "localnet".into(),
                    from: sigcast_domain::SolanaPubkey::parse(&from).unwrap(),
                    to: sigcast_domain::SolanaPubkey::parse(&solana_recipient(&from)).unwrap(),
                    lamports: sigcast_domain::Lamports(1_000 + i as u64),
                };
                let message = transfer_message(&transfer, &Lifetime::Blockhash(blockhash), 0);
                let signature = ed25519_dalek::Signer::sign(key, &message_bytes(&message));
                let transaction = assemble(message, &[signature.to_bytes()]);
                let wire = sigcast_solana::wire_bytes(&transaction);
                let _ = rpc.send_transaction(&wire, 0).await;
                bs58::encode(signature.to_bytes()).into_string()
            }
        })
        .buffer_unordered(args.concurrency)
        .collect()
        .await;
    loop {
        let mut landed = 0;
        for chunk in signatures.chunks(256) {
            let statuses = rpc.statuses(chunk).await.unwrap_or_default();
            landed += statuses.iter().filter(|s| s.is_some()).count();
        }
        progress("baseline", landed, args.ops, started);
        if landed >= args.ops {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    args.ops as f64 / started.elapsed().as_secs_f64()
}

fn since(
    t: Option<&prost_types::Timestamp>,
    origin: Option<&prost_types::Timestamp>,
) -> Option<Duration> {
    let at = SystemTime::try_from(*t?).ok()?;
    let from = SystemTime::try_from(*origin?).ok()?;
    at.duration_since(from).ok()
}

/// Each of `replays` submitted, one at a time, beside as many gRPC health checks on the same
/// gateway, both over one connection of their own (so that neither carries the state of
/// another): the sorted latencies of each.
async fn replays_beside_health(
    gateway: std::net::SocketAddr,
    replays: impl Iterator<Item = pb::SubmitOperationRequest>,
) -> (Vec<Duration>, Vec<Duration>) {
    let mut replay = Vec::new();
    let mut health = Vec::new();
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{gateway}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health_client = tonic_health::pb::health_client::HealthClient::new(channel.clone());
    let mut replay_client = OperationServiceClient::new(channel);
    // Each request is made before its timer starts, as the health check's is.
    for request in replays {
        let t = Instant::now();
        let replayed = replay_client
            .submit_operation(request)
            .await
            .unwrap()
            .into_inner()
            .replayed;
        replay.push(t.elapsed());
        assert!(replayed, "a replay must be flagged");
        let t = Instant::now();
        health_client
            .check(tonic_health::pb::HealthCheckRequest::default())
            .await
            .unwrap();
        health.push(t.elapsed());
    }
    replay.sort();
    health.sort();
    (replay, health)
}

/// The run's operations that are not confirmed, by state. Listed by state (the store's state
/// index), so the confirmed ones (soon most of them) and the operations stored before the run
/// (`--stored`, all confirmed) are not read at each poll: listing every operation each second
/// took the cores the run is measuring. That every one of the run's operations is CONFIRMED
/// with success is checked at the end, one by one.
async fn not_confirmed(
    client: &OperationServiceClient<tonic::transport::Channel>,
    chain: &str,
    senders: &std::collections::HashSet<&str>,
) -> std::collections::HashMap<pb::OperationState, Vec<pb::Operation>> {
    let mut ops: std::collections::HashMap<_, Vec<_>> = std::collections::HashMap::new();
    for state in [
        pb::OperationState::Received,
        pb::OperationState::Signed,
        pb::OperationState::Sent,
        pb::OperationState::Rejected,
        pb::OperationState::Cancelled,
    ] {
        let mut page_token = String::new();
        loop {
            let page = client
                .clone()
                .list_operations(pb::ListOperationsRequest {
                    chain: chain.to_owned(),
                    state: state.into(),
                    page_size: 1_000,
                    page_token,
                    ..Default::default()
                })
                .await
                .expect("list operations")
                .into_inner();
            for op in page.operations {
                if senders.contains(op.account.as_str()) {
                    ops.entry(op.state()).or_default().push(op);
                }
            }
            if page.next_page_token.is_empty() {
                break;
            }
            page_token = page.next_page_token;
        }
    }
    ops
}

/// A service's metrics as text (empty when it does not answer).
async fn metrics_text(addr: std::net::SocketAddr) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut text = String::new();
    if let Ok(mut stream) = tokio::net::TcpStream::connect(addr).await {
        let _ = stream
            .write_all(b"GET /metrics HTTP/1.0\r\nHost: sigcast\r\n\r\n")
            .await;
        let _ = stream.read_to_string(&mut text).await;
    }
    text
}

/// The JSON-RPC requests a service made, by method, from its `sigcast_rpc_requests_total`.
async fn node_requests(addr: std::net::SocketAddr) -> Vec<(String, f64)> {
    let text = metrics_text(addr).await;
    text.lines()
        .filter(|line| line.starts_with("sigcast_rpc_requests_total{"))
        .filter_map(|line| {
            let method = line.split("method=\"").nth(1)?.split('"').next()?;
            let result = line.split("result=\"").nth(1)?.split('"').next()?;
            let count = line.rsplit(' ').next()?.parse().ok()?;
            // Those that failed apart, by how.
            Some(match result {
                "ok" => (method.to_owned(), count),
                _ => (format!("{method} {result}"), count),
            })
        })
        .collect()
}

/// A histogram's mean per label value, from a service's metrics: (value, mean, count).
async fn histogram_means(
    addr: std::net::SocketAddr,
    name: &str,
    label: &str,
) -> Vec<(String, f64, f64)> {
    let text = metrics_text(addr).await;
    let sample = |suffix: &str, value: &str| -> Option<f64> {
        let prefix = format!("{name}_{suffix}{{");
        text.lines()
            .filter(|line| line.starts_with(&prefix))
            .find(|line| line.contains(&format!("{label}=\"{value}\"")))
            .and_then(|line| line.rsplit(' ').next()?.parse().ok())
    };
    let mut values: Vec<String> = text
        .lines()
        .filter(|line| line.starts_with(&format!("{name}_count{{")))
        .filter_map(|line| {
            Some(
                line.split(&format!("{label}=\""))
                    .nth(1)?
                    .split('"')
                    .next()?
                    .to_owned(),
            )
        })
        .collect();
    values.dedup();
    values
        .into_iter()
        .filter_map(|value| {
            let (sum, count) = (sample("sum", &value)?, sample("count", &value)?);
            Some((value, sum / count.max(1.0), count))
        })
        .collect()
}

/// CPU time (user + system) a process has used so far, from /proc.
fn cpu_time(pid: u32) -> Duration {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return Duration::ZERO;
    };
    // Fields after the command name (which may hold spaces): utime and stime are the 12th
    // and 13th, in clock ticks.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(vec![], |(_, rest)| rest.split_whitespace().collect());
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i)?.parse::<u64>().ok())
        .sum();
    Duration::from_secs_f64(ticks as f64 / clock_ticks_per_second())
}

fn clock_ticks_per_second() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok()?.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// Fills the store with `count` settled (CONFIRMED) operations of an account the run does not
/// use, 10,000 per transaction, as a store after months of service holds them.
fn fill_store(path: &std::path::Path, chain: &str, count: usize) -> Result<(), String> {
    use sigcast_store::{Store, StoreConfig, operations};
    let store = Store::open(&StoreConfig::sqlite(path.to_owned())).map_err(|e| e.to_string())?;
    let root = store.root().clone();
    let now = SystemTime::now();
    let started = Instant::now();
    let mut done = 0;
    while done < count {
        let chunk = (count - done).min(10_000);
        store
            .run(|tx| {
                for i in done..done + chunk {
                    let mut op = settled_operation(chain, i);
                    operations::put(tx, &root, None, &mut op, now)?;
                }
                Ok(())
            })
            .map_err(|e| e.to_string())?;
        done += chunk;
        progress("stored before the run", done, count, started);
    }
    Ok(())
}

/// A CONFIRMED transfer of about the size of the run's own, as `fill_store` stores it.
fn settled_operation(chain: &str, i: usize) -> pb::Operation {
    let hash = format!("0x{i:064x}");
    let (kind, account) = match chain {
        "solana:localnet" => {
            let account = "Stored1111111111111111111111111111111111111".to_owned();
            let kind = pb::intent::Kind::SolanaTransfer(pb::SolanaTransfer {
                cluster: "localnet".into(),
                from: account.clone(),
                to: solana_recipient(&account),
                lamports: (1_000 + i).to_string(),
            });
            (kind, account)
        }
        _ => {
            let account = "0x000000000000000000000000000000000000dEaD".to_owned();
            let kind = pb::intent::Kind::EvmTransfer(pb::EvmTransfer {
                chain_id: 31337,
                from: account.clone(),
                to: recipient(i),
                value_wei: (1_000 + i).to_string(),
            });
            (kind, account)
        }
    };
    pb::Operation {
        op_id: format!("stored-{i:08}"),
        intent: Some(pb::Intent { kind: Some(kind) }),
        intent_fingerprint: format!("{i:064x}"),
        state: pb::OperationState::Confirmed.into(),
        chain: chain.into(),
        account,
        caller: "bench".into(),
        attempts: vec![pb::Attempt {
            number: 1,
            tx_id: hash.clone(),
            outcome: pb::AttemptOutcome::Accepted.into(),
            ..Default::default()
        }],
        result: Some(pb::TerminalResult {
            tx_id: hash.clone(),
            block_number: i as u64,
            block_hash: hash,
            execution_status: pb::ExecutionStatus::Success.into(),
        }),
        ..Default::default()
    }
}

/// One line per operation: its state, attempts and why.
fn describe(op: &pb::Operation) -> String {
    let attempts: Vec<String> = op
        .attempts
        .iter()
        .map(|a| {
            format!(
                "#{}{} {}",
                a.number,
                if a.reason.is_empty() {
                    String::new()
                } else {
                    format!(" {}", a.reason)
                },
                a.outcome()
                    .as_str_name()
                    .trim_start_matches("ATTEMPT_OUTCOME_")
            )
        })
        .collect();
    format!(
        "{} {} [{}] {}",
        op.op_id,
        op.state()
            .as_str_name()
            .trim_start_matches("OPERATION_STATE_"),
        attempts.join(", "),
        op.error
            .as_ref()
            .map_or(String::new(), |e| format!("{}: {}", e.reason, e.message))
    )
}

#[tokio::main]
async fn main() {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            std::process::exit(2);
        }
    };
    // `run` owns the stack: it is stopped (anvil and the services killed) before exiting.
    let result = match args.watches {
        0 => run(args).await,
        _ => gateway_memory(args).await,
    };
    if let Err(failure) = result {
        eprintln!("\nFAILED RUN: {failure}");
        std::process::exit(1);
    }
}

/// Resident set of a process now, from /proc (VmRSS), in MiB.
fn rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// The gateway's memory with `args.watches` watches open and under `args.lists` full-page
/// lists, on operations kept in flight (no broadcaster runs).
async fn gateway_memory(args: Args) -> Result<(), String> {
    eprintln!("starting anvil and the stack…");
    let mut stack = Stack::start(StackOptions {
        accounts: 1,
        block_time: BLOCK_TIME,
        anvil_args: args.anvil_args(),
        ..Default::default()
    })
    .await;
    stack.broadcasters[0].kill9(); // nothing moves on: every watch stays open
    let pid = stack.gateway.pid();
    let rss = || rss_mib(pid).unwrap_or(f64::NAN);
    let client = stack.client().await;
    let from = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266";
    let submitted: Vec<_> = futures::stream::iter(0..args.watches)
        .map(|i| {
            let mut client = client.clone();
            async move {
                client
                    .submit_operation(pb::SubmitOperationRequest {
                        op_id: format!("watched-{i:05}"),
                        intent: Some(pb::Intent {
                            kind: Some(pb::intent::Kind::EvmTransfer(pb::EvmTransfer {
                                chain_id: 31337,
                                from: from.into(),
                                to: recipient(i),
                                value_wei: "1".into(),
                            })),
                        }),
                    })
                    .await
            }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    if let Some(Err(status)) = submitted.iter().find(|r| r.is_err()) {
        return Err(format!("a submit failed: {status:?}"));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle = rss();
    let mut streams = Vec::with_capacity(args.watches);
    for i in 0..args.watches {
        let mut stream = client
            .clone()
            .watch_operation(pb::WatchOperationRequest {
                op_id: format!("watched-{i:05}"),
            })
            .await
            .map_err(|s| format!("watch {i}: {s:?}"))?
            .into_inner();
        stream
            .next()
            .await
            .ok_or("a watch ended at once")?
            .map_err(|s| format!("watch {i}: {s:?}"))?;
        streams.push(stream);
    }
    let one_more = client
        .clone()
        .watch_operation(pb::WatchOperationRequest {
            op_id: "watched-00000".into(),
        })
        .await;
    let past_limit = match one_more {
        Err(status) => format!("{:?}", status.code()),
        Ok(_) => "accepted".into(),
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let watching = rss();
    let listed: Vec<usize> = futures::stream::iter(0..args.lists)
        .map(|_| {
            let mut client = client.clone();
            async move {
                client
                    .list_operations(pb::ListOperationsRequest {
                        page_size: 1_000,
                        ..Default::default()
                    })
                    .await
                    .map(|r| r.into_inner().operations.len())
                    .unwrap_or(0)
            }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    let flooded = rss();
    let peak = peak_rss_mib(pid).unwrap_or(f64::NAN);
    drop(streams);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let closed = rss();
    println!("gateway memory (resident set, MiB)");
    println!("| moment | MiB |\n|---|---|");
    println!(
        "| {} operations stored, no watch | {idle:.1} |",
        args.watches
    );
    println!("| {} watches open | {watching:.1} |", args.watches);
    println!(
        "| and {} lists of {} operations each, 64 at once | {flooded:.1} |",
        listed.len(),
        listed.iter().max().unwrap_or(&0)
    );
    println!("| watches closed | {closed:.1} |");
    println!("| peak | {peak:.1} |");
    println!("one watch past the per-caller limit: {past_limit}");
    Ok(())
}

async fn run(args: Args) -> Result<(), String> {
    eprintln!(
        "starting the node and the stack ({} generated keys)…",
        args.accounts
    );
    // The Solana development node, in this process, when the run is on Solana.
    let solana = match args.chain {
        ChainKind::Solana => Some(SolanaNode::start(Duration::from_millis(400)).await),
        ChainKind::Evm => None,
    };
    // The EVM baseline's own node, started with the same arguments just before the stack's and
    // left running, idle, through sigcast's run, as sigcast's idles through the baseline's:
    // each side has a node of its own, as old as the other's, and shares the two cores with
    // the other's idle node. (`--baseline-node shared`: sigcast's node, after the baseline.)
    let baseline_anvil = match (args.chain, args.baseline, args.baseline_node) {
        (ChainKind::Evm, true, BaselineNode::Own) => {
            let dir = tempfile::tempdir()
                .map_err(|e| format!("a directory for the baseline's node: {e}"))?;
            let anvil_args = args.anvil_args();
            let anvil_args: Vec<&str> = anvil_args.iter().map(String::as_str).collect();
            let anvil = Anvil::start_with(BLOCK_TIME, dir.path(), &anvil_args);
            Some((anvil, dir))
        }
        _ => None,
    };
    let stack = Stack::start(match &solana {
        None => StackOptions {
            block_time: BLOCK_TIME,
            accounts: 0,
            generated_evm_keys: args.accounts,
            replicas: args.replicas,
            anvil_args: args.anvil_args(),
            ..Default::default()
        },
        Some(node) => StackOptions {
            accounts: 1,
            solana_rpc: Some(node.url.clone()),
            solana_accounts: args.accounts,
            replicas: args.replicas,
            ..Default::default()
        },
    })
    .await;
    let senders: Vec<String> = match &solana {
        None => {
            let pool = RpcPool::new(
                std::slice::from_ref(&stack.anvil.url),
                Duration::from_secs(10),
            )
            .unwrap();
            for account in &stack.evm_accounts {
                fund(&pool, account).await;
            }
            stack.evm_accounts.clone()
        }
        Some(node) => {
            for account in &stack.solana_accounts {
                fund_solana(node, account);
            }
            stack.solana_accounts.clone()
        }
    };

    let baseline_node = baseline_anvil
        .as_ref()
        .map_or(&stack.anvil, |(anvil, _)| anvil);
    let node_before = cpu_time(baseline_node.pid());
    let baseline_from = match solana {
        None => head(&baseline_node.url).await + 1,
        Some(_) => 0,
    };
    // The baseline's throughput and, on EVM, how many transactions it sent again.
    let (baseline, baseline_resent) = match (&solana, args.baseline) {
        (_, false) => (None, None),
        (None, true) => {
            let (throughput, resent) = direct_baseline(&baseline_node.url, &args).await;
            (Some(throughput), Some(resent))
        }
        (Some(node), true) => (Some(solana_baseline(node, &args).await), None),
    };
    // What the node spent per baseline transfer (anvil's own process; the Solana node runs
    // inside this one, so there it is not told apart).
    let node_per_baseline_op = cpu_time(baseline_node.pid()).saturating_sub(node_before);
    let baseline_blocks = match (&solana, baseline) {
        (None, Some(_)) => Some(
            block_fill(
                &baseline_node.url,
                baseline_from,
                head(&baseline_node.url).await,
            )
            .await,
        ),
        _ => None,
    };

    let chain = match args.chain {
        ChainKind::Evm => "eip155:31337",
        ChainKind::Solana => "solana:localnet",
    };
    let db = stack.dir.path().join("sigcast.db");
    if args.stored > 0 {
        fill_store(&db, chain, args.stored)?;
    }
    let store_bytes = || {
        ["", "-wal"]
            .iter()
            .filter_map(|suffix| std::fs::metadata(format!("{}{suffix}", db.display())).ok())
            .map(|m| m.len())
            .sum::<u64>()
    };
    // What each process has used before the run: the run's CPU is what it adds.
    let mut processes: Vec<(String, u32)> = vec![
        ("gateway".into(), stack.gateway.pid()),
        ("node".into(), stack.anvil.pid()),
    ];
    for (i, signer) in stack.signers.iter().enumerate() {
        processes.push((format!("signer-{i}"), signer.pid()));
    }
    for (i, broadcaster) in stack.broadcasters.iter().enumerate() {
        processes.push((format!("broadcaster-{i}"), broadcaster.pid()));
    }
    if args.at_block && args.chain == ChainKind::Evm {
        just_after_a_block(&stack.anvil.url).await;
    }
    let cpu_before: Vec<Duration> = processes.iter().map(|(_, pid)| cpu_time(*pid)).collect();
    let bytes_before = store_bytes();

    // sigcast: submit everything at concurrency C (at `--rate`, each submit on its schedule),
    // then wait for every confirmation.
    let client = stack.client().await;
    let ids: Vec<String> = (0..args.ops).map(|i| format!("bench-{i:06}")).collect();
    let started = Instant::now();
    let submitted = std::sync::atomic::AtomicUsize::new(0);
    let mut submit_latency: Vec<Duration> = futures::stream::iter(ids.iter().enumerate())
        .map(|(i, id)| {
            let mut client = client.clone();
            let from = senders[i % args.accounts].clone();
            let submitted = &submitted;
            async move {
                if let Some(rate) = args.rate {
                    let due = started + Duration::from_secs_f64(i as f64 / rate);
                    tokio::time::sleep_until(due.into()).await;
                }
                let t = Instant::now();
                client
                    .submit_operation(transfer(args.chain, id, &from, i))
                    .await
                    .expect("submit");
                let n = submitted.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                if n.is_multiple_of(500) || n == args.ops {
                    progress("submitted", n, args.ops, started);
                }
                t.elapsed()
            }
        })
        .buffer_unordered(args.concurrency)
        .collect()
        .await;
    submit_latency.sort();
    let mut rss_peak_in_flight = Vec::new();
    let mut last_progress = (0, Instant::now());
    let senders_set: std::collections::HashSet<&str> = senders.iter().map(String::as_str).collect();
    // The gateway's CPU includes this generator's polls: each measured (the gateway has
    // nothing else to do once the submits are in) and taken out.
    let mut polls_cpu = Duration::ZERO;
    loop {
        let gateway_before = cpu_time(stack.gateway.pid());
        let mut ops = not_confirmed(&client, chain, &senders_set).await;
        polls_cpu += cpu_time(stack.gateway.pid()).saturating_sub(gateway_before);
        let pending: usize = ops.values().map(Vec::len).sum();
        let confirmed = args.ops.saturating_sub(pending);
        if args.states {
            let mut counts: Vec<(pb::OperationState, usize)> =
                ops.iter().map(|(state, ops)| (*state, ops.len())).collect();
            counts.sort();
            let counts: Vec<String> = counts
                .iter()
                .map(|(state, n)| {
                    let name = state.as_str_name().trim_start_matches("OPERATION_STATE_");
                    format!("{name} {n}")
                })
                .collect();
            eprintln!(
                "states after {:.1}s: {}, not listed (confirmed) {confirmed}",
                started.elapsed().as_secs_f64(),
                counts.join(", ")
            );
        }
        // Anything terminal but a confirmation fails the run.
        let mut failed: Vec<pb::Operation> = ops
            .remove(&pb::OperationState::Rejected)
            .unwrap_or_default();
        failed.extend(
            ops.remove(&pb::OperationState::Cancelled)
                .unwrap_or_default(),
        );
        if !failed.is_empty() {
            let lines: Vec<String> = failed.iter().take(50).map(describe).collect();
            return Err(format!(
                "{} of {} operations ended other than CONFIRMED:\n{}",
                failed.len(),
                args.ops,
                lines.join("\n")
            ));
        }
        progress("confirmed", confirmed, args.ops, started);
        if confirmed != last_progress.0 {
            last_progress = (confirmed, Instant::now());
        } else if last_progress.1.elapsed() >= args.stall {
            let stuck: Vec<pb::Operation> = ops.into_values().flatten().collect();
            let lines: Vec<String> = stuck.iter().take(50).map(describe).collect();
            return Err(format!(
                "no operation confirmed for {} s; {confirmed} of {} confirmed, {} not terminal:\n{}",
                args.stall.as_secs(),
                args.ops,
                stuck.len(),
                lines.join("\n")
            ));
        }
        if rss_peak_in_flight.is_empty() {
            // Peak memory with (nearly) everything in flight.
            rss_peak_in_flight = [&stack.gateway, &stack.signers[0], &stack.broadcasters[0]]
                .iter()
                .map(|s| peak_rss_mib(s.pid()).unwrap_or(0.0))
                .collect();
        }
        if pending == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let cpu_after: Vec<Duration> = processes.iter().map(|(_, pid)| cpu_time(*pid)).collect();
    let bytes_stored = store_bytes().saturating_sub(bytes_before);
    let mut cpu_per_op: Vec<(String, f64)> = Vec::new();
    for (((name, _), before), after) in processes.iter().zip(&cpu_before).zip(&cpu_after) {
        let mut used = after.saturating_sub(*before);
        if name == "gateway" {
            used = used.saturating_sub(polls_cpu);
        }
        let service = name.split('-').next().unwrap_or(name).to_owned();
        let ms = used.as_secs_f64() * 1_000.0 / args.ops as f64;
        match cpu_per_op.iter_mut().find(|(s, _)| *s == service) {
            Some((_, total)) => *total += ms,
            None => cpu_per_op.push((service, ms)),
        }
    }

    // Replays of finished operations beside health checks, before anything has read them
    // finished (the waits above only listed the others): the first replay of each is read
    // from the store, the gateway then keeps it, and a replay again is answered from memory.
    let distinct = args.replays.min(ids.len());
    let replay_of = |i: usize| transfer(args.chain, &ids[i], &senders[i % args.accounts], i);
    let (replay_stored, health_stored) =
        replays_beside_health(stack.gateway.addr, (0..distinct).map(replay_of)).await;
    let (replay_again, health_again) = replays_beside_health(
        stack.gateway.addr,
        (0..distinct).cycle().take(args.replays).map(replay_of),
    )
    .await;

    // Per-operation timings from the operations themselves.
    let mut to_sent = Vec::new();
    let mut to_confirmed = Vec::new();
    let mut first_created: Option<SystemTime> = None;
    let mut landed_in: Option<(u64, u64)> = None;
    let mut last_confirmed: Option<SystemTime> = None;
    // Every operation of the run, read once: each must be CONFIRMED with success (the polls
    // above only listed the others).
    let mut failed = Vec::new();
    for chunk in ids.chunks(200) {
        for id in chunk {
            let op = match client
                .clone()
                .get_operation(pb::GetOperationRequest { op_id: id.clone() })
                .await
            {
                Ok(response) => response.into_inner().operation.unwrap_or_default(),
                Err(status) => {
                    failed.push(format!("{id}: {:?} {}", status.code(), status.message()));
                    continue;
                }
            };
            let succeeded = op.result.as_ref().map(|r| r.execution_status())
                == Some(pb::ExecutionStatus::Success);
            if op.state() != pb::OperationState::Confirmed || !succeeded {
                failed.push(describe(&op));
                continue;
            }
            if let Some(d) = since(
                op.attempts.first().and_then(|a| a.send_time.as_ref()),
                op.create_time.as_ref(),
            ) {
                to_sent.push(d);
            }
            if let Some(d) = since(op.update_time.as_ref(), op.create_time.as_ref()) {
                to_confirmed.push(d);
            }
            let created = op.create_time.and_then(|t| SystemTime::try_from(t).ok());
            let updated = op.update_time.and_then(|t| SystemTime::try_from(t).ok());
            first_created = first_created.min(created).or(created).or(first_created);
            last_confirmed = last_confirmed.max(updated);
            if let Some(block) = op.result.as_ref().map(|r| r.block_number) {
                landed_in = Some(landed_in.map_or((block, block), |(first, last)| {
                    (first.min(block), last.max(block))
                }));
            }
        }
    }
    if !failed.is_empty() {
        return Err(format!(
            "{} of {} operations did not end CONFIRMED with success:\n{}",
            failed.len(),
            args.ops,
            failed
                .iter()
                .take(50)
                .cloned()
                .collect::<Vec<_>>()
                .join("\n")
        ));
    }
    to_sent.sort();
    to_confirmed.sort();
    let window = last_confirmed
        .zip(first_created)
        .and_then(|(l, f)| l.duration_since(f).ok())
        .unwrap_or(started.elapsed());
    let throughput = args.ops as f64 / window.as_secs_f64();

    let rss_end: Vec<f64> = [&stack.gateway, &stack.signers[0], &stack.broadcasters[0]]
        .iter()
        .map(|s| peak_rss_mib(s.pid()).unwrap_or(0.0))
        .collect();

    println!("\n| measure | value |\n|---|---|");
    println!(
        "| operations / accounts / concurrency | {} / {} / {} |",
        args.ops, args.accounts, args.concurrency
    );
    if let Some(rate) = args.rate {
        println!("| submits paced at | {rate:.0} per second |");
    }
    println!(
        "| submit latency p50 / p99 | {} / {} |",
        ms(percentile(&submit_latency, 0.5)),
        ms(percentile(&submit_latency, 0.99))
    );
    println!(
        "| time to SENT p50 / p99 | {} / {} |",
        ms(percentile(&to_sent, 0.5)),
        ms(percentile(&to_sent, 0.99))
    );
    println!(
        "| time to CONFIRMED p50 / p99 | {} / {} |",
        ms(percentile(&to_confirmed, 0.5)),
        ms(percentile(&to_confirmed, 0.99))
    );
    println!("| sigcast mined throughput | {throughput:.1} tx/s |");
    if let (None, Some((first, last))) = (&solana, landed_in) {
        println!(
            "| transactions per block and their base fee, sigcast's blocks / the baseline's (at most 1,428 transfers fit one) | {} / {} |",
            block_fill(&stack.anvil.url, first, last).await,
            baseline_blocks.as_deref().unwrap_or("—")
        );
    }
    if let Some(baseline) = baseline {
        println!("| direct baseline mined throughput | {baseline:.1} tx/s |");
        if let Some(resent) = baseline_resent {
            println!(
                "| direct baseline: transactions sent again after its account stalled 3 s | {resent} |"
            );
        }
        println!(
            "| **ratio sigcast / baseline** | **{:.2}** |",
            throughput / baseline
        );
    }
    // Where the gateway answered its reads of one operation, as its metrics count them.
    let reads = metrics_text(stack.metrics_addr("gateway")).await;
    let reads_from = |from: &str| {
        let series = format!("sigcast_operation_reads_total{{from=\"{from}\"}} ");
        reads
            .lines()
            .find_map(|line| line.strip_prefix(&series))
            .unwrap_or("missing")
            .to_owned()
    };
    println!(
        "| gateway reads of one operation, from memory / from the store | {} / {} |",
        reads_from("finished"),
        reads_from("store")
    );
    for (what, replay, health) in [
        ("again, from memory", &replay_again, &health_again),
        ("first, from the store", &replay_stored, &health_stored),
    ] {
        if replay.is_empty() {
            continue;
        }
        let (r50, h50) = (percentile(replay, 0.5), percentile(health, 0.5));
        println!(
            "| replay p50 / health-check p50 ({what}, {}) | {:.1} µs / {:.1} µs |",
            replay.len(),
            r50.as_secs_f64() * 1e6,
            h50.as_secs_f64() * 1e6
        );
        println!(
            "| **ratio replay / health** ({what}) | **{:.2}** |",
            r50.as_secs_f64() / h50.as_secs_f64().max(1e-9)
        );
    }
    println!(
        "| peak RSS gateway / signer / broadcaster (all in flight) | {:.0} / {:.0} / {:.0} MiB |",
        rss_peak_in_flight[0], rss_peak_in_flight[1], rss_peak_in_flight[2]
    );
    println!(
        "| peak RSS gateway / signer / broadcaster (end) | {:.0} / {:.0} / {:.0} MiB |",
        rss_end[0], rss_end[1], rss_end[2]
    );
    let cpu: Vec<String> = cpu_per_op
        .iter()
        .map(|(service, ms)| format!("{service} {ms:.3}"))
        .collect();
    println!(
        "| CPU-ms per operation, from the first submit to the last confirmation{} | {} |",
        match args.replicas {
            1 => String::new(),
            n => format!(" ({n} replicas summed)"),
        },
        cpu.join(" / ")
    );
    if args.baseline && args.chain == ChainKind::Evm {
        println!(
            "| node CPU-ms per direct baseline transfer | {:.3} |",
            node_per_baseline_op.as_secs_f64() * 1_000.0 / args.ops as f64
        );
    }
    let mut requests: std::collections::BTreeMap<String, f64> = Default::default();
    for (name, _) in processes
        .iter()
        .filter(|(n, _)| n != "node" && n != "gateway")
    {
        for (method, count) in node_requests(stack.metrics_addr(name)).await {
            *requests.entry(method).or_default() += count;
        }
    }
    let requests: Vec<String> = requests
        .iter()
        .map(|(method, count)| format!("{method} {:.3} ({count})", count / args.ops as f64))
        .collect();
    println!(
        "| node requests per operation (signers and broadcasters) | {} |",
        requests.join(", ")
    );
    let stages: Vec<String> = histogram_means(
        stack.metrics_addr("broadcaster-0"),
        "sigcast_broadcaster_pass_seconds",
        "stage",
    )
    .await
    .iter()
    .map(|(stage, mean, _)| format!("{stage} {:.0} ms", mean * 1_000.0))
    .collect();
    println!(
        "| broadcaster-0's mean pass stage (over the whole run) | {} |",
        stages.join(", ")
    );
    // Where the signing stage waits: the signer's calls as it serves them, and each
    // service's node reads.
    let mean_ms = |means: Vec<(String, f64, f64)>| -> String {
        means
            .iter()
            .map(|(what, mean, count)| format!("{what} {:.1} ms ({count})", mean * 1_000.0))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "| signer-0's mean call, as served | {} |",
        mean_ms(
            histogram_means(
                stack.metrics_addr("signer-0"),
                "sigcast_grpc_server_duration_seconds",
                "method",
            )
            .await
        )
    );
    println!(
        "| signer-0's mean SignOperations stage | {} |",
        mean_ms(
            histogram_means(
                stack.metrics_addr("signer-0"),
                "sigcast_signer_batch_seconds",
                "stage",
            )
            .await
        )
    );
    for service in ["signer-0", "broadcaster-0"] {
        println!(
            "| {service}'s mean JSON-RPC latency by method | {} |",
            mean_ms(
                histogram_means(
                    stack.metrics_addr(service),
                    "sigcast_rpc_duration_seconds",
                    "method",
                )
                .await
            )
        );
    }
    println!(
        "| store growth per operation (file and WAL; {} stored before) | {:.0} bytes |",
        args.stored,
        bytes_stored as f64 / args.ops as f64
    );
    Ok(())
}
