//! The signer checks what it signs, whatever wrote the record: the account and policy come
//! from the intent, a Solana message signs with no held key but the fee payer's unless policy
//! allows it, and value, recipient and window limits hold for lamports too.

use crate::evm::{DEV, recipient as evm_recipient, transfer, wait_terminal};
use crate::solana_ops::{FEE, SOL, balance, key_bytes, recipient, sol_transfer};
use sigcast_domain::IntentRules;
use sigcast_e2e::SolanaNode;
use sigcast_e2e::{Stack, StackOptions};
use sigcast_evm::{EvmRpc, RpcPool};
use sigcast_proto::pb;
use sigcast_proto::sigcast::signer::v1::SignOperationRequest;
use sigcast_store::{Store, StoreConfig, accounts, operations};
use std::time::{Duration, SystemTime};

fn store_of(stack: &Stack) -> Store {
    Store::open(&StoreConfig::sqlite(stack.dir.path().join("sigcast.db"))).unwrap()
}

fn sign_first(op_id: &str) -> SignOperationRequest {
    SignOperationRequest {
        op_id: op_id.into(),
        purpose: 1,
        replaces_attempt: 0,
        ..Default::default()
    }
}

/// What a store writer other than the gateway might record: `request`'s operation, with
/// `tamper` applied to the record around the intent.
fn record_directly(
    store: &Store,
    request: &pb::SubmitOperationRequest,
    tamper: impl Fn(&mut pb::Operation),
) {
    let rules = IntentRules::default();
    let intent = sigcast_proto::intent_from_proto("intent", request.intent.as_ref(), Some(&rules))
        .expect("a valid intent");
    let op_id = sigcast_domain::OpId::parse(&request.op_id).unwrap();
    let mut op = sigcast_proto::new_operation(&op_id, &intent);
    tamper(&mut op);
    let root = store.root().clone();
    store
        .run(|tx| operations::submit(tx, &root, op.clone(), SystemTime::now()).map(|_| ()))
        .unwrap();
}

/// Nothing of `op_id` was signed: no payload, no audit record, still RECEIVED.
fn assert_nothing_signed(store: &Store, op_id: &str) {
    let root = store.root().clone();
    let (op, payload, audit) = store
        .read(|tx| {
            Ok((
                operations::get(tx, &root, op_id)?,
                accounts::payload(tx, &root, op_id, 1)?,
                accounts::audit_records(tx, &root, op_id)?,
            ))
        })
        .unwrap();
    assert_eq!(op.unwrap().state(), pb::OperationState::Received);
    assert!(payload.is_none(), "{op_id}: a payload was stored");
    assert!(audit.is_empty(), "{op_id}: an audit record was written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_record_naming_another_account_than_its_intent_is_not_signed() {
    // DEV[1] may move 1 wei per operation; DEV[0] has no policy. A record whose intent spends
    // from DEV[1] but whose account field says DEV[0] used to be checked against DEV[0]'s
    // (absent) policy and signed with DEV[1]'s key.
    let mut stack = Stack::start(StackOptions {
        accounts: 2,
        signer_tables: format!(
            "[[policies]]\naccount = \"{}\"\nmax_value_wei = \"1\"\n",
            DEV[1]
        ),
        ..Default::default()
    })
    .await;
    stack.broadcasters[0].kill9(); // the test drives the signer
    let store = store_of(&stack);
    let request = transfer("disguised", DEV[1], &evm_recipient(0), 5_000);
    record_directly(&store, &request, |op| op.account = DEV[0].to_lowercase());
    let mut signer = sigcast_e2e::signer_client(&stack.signer_socket(0))
        .await
        .unwrap();
    let refused = signer
        .sign_operation(sign_first("disguised"))
        .await
        .unwrap_err();
    assert_eq!(
        refused.code(),
        tonic::Code::FailedPrecondition,
        "{refused:?}"
    );
    assert!(
        refused.message().contains("account") && refused.message().contains("not written by"),
        "{}",
        refused.message()
    );
    assert_nothing_signed(&store, "disguised");
    // A record whose fingerprint is not its intent's is refused the same way.
    let request = transfer("refingerprinted", DEV[0], &evm_recipient(0), 5_000);
    record_directly(&store, &request, |op| {
        op.intent_fingerprint = "00".repeat(32);
    });
    let refused = signer
        .sign_operation(sign_first("refingerprinted"))
        .await
        .unwrap_err();
    assert!(
        refused.message().contains("intent_fingerprint"),
        "{}",
        refused.message()
    );
    assert_nothing_signed(&store, "refingerprinted");
    let node = EvmRpc::new(
        std::slice::from_ref(&stack.anvil.url),
        Duration::from_secs(5),
    )
    .unwrap();
    for account in &DEV[..2] {
        assert_eq!(node.nonce(account.parse().unwrap()).await.unwrap(), 0);
    }
}

/// An instruction list paid by `payer` with one System Program transfer of `lamports` from
/// `from` to `to`: `from` must sign.
fn system_transfer(
    op_id: &str,
    payer: &str,
    from: &str,
    to: &str,
    lamports: u64,
) -> pb::SubmitOperationRequest {
    let mut data = 2u32.to_le_bytes().to_vec();
    data.extend_from_slice(&lamports.to_le_bytes());
    let meta = |pubkey: &str, is_signer: bool| pb::SolanaAccountMeta {
        pubkey: pubkey.into(),
        is_signer,
        is_writable: true,
    };
    pb::SubmitOperationRequest {
        op_id: op_id.into(),
        intent: Some(pb::Intent {
            kind: Some(pb::intent::Kind::SolanaInstructions(
                pb::SolanaInstructions {
                    cluster: "localnet".into(),
                    fee_payer: payer.into(),
                    instructions: vec![pb::SolanaInstruction {
                        program_id: "11111111111111111111111111111111".into(),
                        accounts: vec![meta(from, true), meta(to, false)],
                        data,
                    }],
                },
            )),
        }),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_solana_intent_that_makes_another_held_key_sign_is_refused_and_signs_nothing() {
    let node = SolanaNode::start(Duration::from_millis(50)).await;
    let stack = Stack::start(StackOptions {
        accounts: 1,
        solana_rpc: Some(node.url.clone()),
        solana_accounts: 2,
        ..Default::default()
    })
    .await;
    let (payer, victim) = (
        stack.solana_accounts[0].clone(),
        stack.solana_accounts[1].clone(),
    );
    for key in [&payer, &victim] {
        node.airdrop(key_bytes(key), 10 * SOL);
    }
    node.airdrop(key_bytes(&recipient(0)), SOL);
    // The caller of the fee payer's key asks for a transfer out of the other held key.
    let request = system_transfer("drain", &payer, &victim, &recipient(0), 3 * SOL);
    let mut client = stack.client().await;
    let refused = client.submit_operation(request.clone()).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    assert!(
        refused.message().contains(&victim) && refused.message().contains("allowed_co_signers"),
        "{}",
        refused.message()
    );
    let absent = client
        .get_operation(pb::GetOperationRequest {
            op_id: "drain".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(absent.code(), tonic::Code::NotFound, "nothing was recorded");

    // The same operation recorded behind the gateway's back: the signer refuses it too,
    // from the message it would sign, and the broadcaster settles it REJECTED.
    let store = store_of(&stack);
    record_directly(&store, &request, |_| {});
    let done = wait_terminal(&stack, &["drain".into()], Duration::from_secs(60)).await;
    let op = &done["drain"];
    assert_eq!(op.state(), pb::OperationState::Rejected, "{op:?}");
    let error = op.error.as_ref().unwrap();
    assert_eq!(error.reason, "SIGNER_REFUSED");
    assert!(error.message.contains(&victim), "{}", error.message);
    assert!(
        op.attempts.is_empty(),
        "nothing was signed: {:?}",
        op.attempts
    );
    let pool = RpcPool::new(std::slice::from_ref(&node.url), Duration::from_secs(5)).unwrap();
    assert_eq!(balance(&pool, &victim).await, 10 * SOL);
    assert_eq!(balance(&pool, &recipient(0)).await, SOL);

    // A transfer the fee payer makes itself is untouched by the rule.
    client
        .submit_operation(system_transfer("own", &payer, &payer, &recipient(0), SOL))
        .await
        .unwrap();
    let done = wait_terminal(&stack, &["own".into()], Duration::from_secs(60)).await;
    assert_eq!(
        done["own"].state(),
        pb::OperationState::Confirmed,
        "{}",
        stack.logs()
    );
    assert_eq!(balance(&pool, &recipient(0)).await, 2 * SOL);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_co_signer_s_own_limits_hold_for_every_transaction_it_co_signs() {
    let node = SolanaNode::start(Duration::from_millis(50)).await;
    let mut stack = Stack::start(StackOptions {
        accounts: 1,
        solana_rpc: Some(node.url.clone()),
        solana_accounts: 2,
        ..Default::default()
    })
    .await;
    let (payer, friend) = (
        stack.solana_accounts[0].clone(),
        stack.solana_accounts[1].clone(),
    );
    // The fee payer's callers may have `friend` co-sign; `friend` itself may move 2 SOL a
    // transaction and 3 SOL an hour. (The keys are generated at start: the policy follows.)
    stack.add_signer_settings(
        0,
        &format!(
            "[[policies]]\naccount = \"{payer}\"\nallowed_co_signers = [\"{friend}\"]\n\
             [[policies]]\naccount = \"{friend}\"\nmax_lamports = \"{}\"\n\
             window_max_lamports = \"{}\"\nwindow_secs = 3600\n",
            2 * SOL,
            3 * SOL
        ),
    );
    stack.signers[0].restart().await;
    for key in [&payer, &friend] {
        node.airdrop(key_bytes(key), 10 * SOL);
    }
    node.airdrop(key_bytes(&recipient(0)), SOL);
    // Recorded as a gateway with the same policies would accept them; the signer decides.
    let store = store_of(&stack);
    let mut done = std::collections::HashMap::new();
    for (op_id, lamports) in [
        ("over-max", 3 * SOL),
        ("fits", 2 * SOL),
        ("over-window", 2 * SOL),
    ] {
        let request = system_transfer(op_id, &payer, &friend, &recipient(0), lamports);
        record_directly(&store, &request, |_| {});
        done.extend(wait_terminal(&stack, &[op_id.into()], Duration::from_secs(60)).await);
    }
    assert_eq!(
        done["fits"].state(),
        pb::OperationState::Confirmed,
        "{}",
        stack.logs()
    );
    for (op_id, rule) in [
        ("over-max", "max_lamports"),
        ("over-window", "window_max_lamports"),
    ] {
        let op = &done[op_id];
        assert_eq!(op.state(), pb::OperationState::Rejected, "{op:?}");
        let error = op.error.as_ref().unwrap();
        assert_eq!(error.reason, "SIGNER_REFUSED");
        assert!(
            error.message.contains(&friend) && error.message.contains(rule),
            "{op_id}: {}",
            error.message
        );
        assert!(op.attempts.is_empty(), "{op_id}: signed");
    }
    let pool = RpcPool::new(std::slice::from_ref(&node.url), Duration::from_secs(5)).unwrap();
    assert_eq!(balance(&pool, &friend).await, 8 * SOL);
    assert_eq!(balance(&pool, &recipient(0)).await, 3 * SOL);
}

/// An instruction: its program, its accounts as `(key, signer, writable)`, its data.
type Instruction<'a> = (&'a str, &'a [(&'a str, bool, bool)], Vec<u8>);

/// An instruction list paid by `payer`.
fn instruction_list(
    op_id: &str,
    payer: &str,
    instructions: &[Instruction<'_>],
) -> pb::SubmitOperationRequest {
    let instructions = instructions
        .iter()
        .map(|(program, accounts, data)| pb::SolanaInstruction {
            program_id: (*program).into(),
            accounts: accounts
                .iter()
                .map(|(pubkey, is_signer, is_writable)| pb::SolanaAccountMeta {
                    pubkey: (*pubkey).into(),
                    is_signer: *is_signer,
                    is_writable: *is_writable,
                })
                .collect(),
            data: data.clone(),
        })
        .collect();
    pb::SubmitOperationRequest {
        op_id: op_id.into(),
        intent: Some(pb::Intent {
            kind: Some(pb::intent::Kind::SolanaInstructions(
                pb::SolanaInstructions {
                    cluster: "localnet".into(),
                    fee_payer: payer.into(),
                    instructions,
                },
            )),
        }),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn under_lamport_limits_a_key_is_never_made_a_nonce_account_nor_charged_its_caller_s_fee() {
    const SYSTEM: &str = "11111111111111111111111111111111";
    const COMPUTE_BUDGET: &str = "ComputeBudget111111111111111111111111111111";
    let node = SolanaNode::start(Duration::from_millis(50)).await;
    let mut stack_options = StackOptions {
        accounts: 1,
        solana_rpc: Some(node.url.clone()),
        solana_accounts: 1,
        ..Default::default()
    };
    // The signer's policy alone: the gateway accepts, the signer is the authority.
    stack_options.signer_tables =
        "[[policies]]\naccount = \"*\"\nmax_lamports = \"10000\"\n".into();
    let stack = Stack::start(stack_options).await;
    let key = stack.solana_accounts[0].clone();
    let thief = recipient(1);
    node.airdrop(key_bytes(&key), 10 * SOL);
    node.airdrop(key_bytes(&recipient(0)), SOL);
    let le = |kind: u32, rest: &[u8]| [&kind.to_le_bytes()[..], rest].concat();
    // Allocate the wallet's data, then make it a nonce account whose authority is the thief:
    // not one lamport moves, and the whole balance is the thief's to withdraw.
    let nonce_theft = instruction_list(
        "nonce-theft",
        &key,
        &[
            (SYSTEM, &[(&key, true, true)], le(8, &80u64.to_le_bytes())),
            (
                SYSTEM,
                &[
                    (&key, false, true),
                    ("SysvarRecentB1ockHashes11111111111111111111", false, false),
                    ("SysvarRent111111111111111111111111111111111", false, false),
                ],
                le(6, &key_bytes(&thief)),
            ),
        ],
    );
    // A one-lamport transfer with a priority fee of a whole SOL (10^6 units at 10^9
    // micro-lamports each), which the fee payer pays.
    let mut limit = vec![2];
    limit.extend_from_slice(&1_000_000u32.to_le_bytes());
    let mut price = vec![3];
    price.extend_from_slice(&1_000_000_000u64.to_le_bytes());
    let priority_fee = instruction_list(
        "priority-fee",
        &key,
        &[
            (COMPUTE_BUDGET, &[], limit),
            (COMPUTE_BUDGET, &[], price),
            (
                SYSTEM,
                &[(&key, true, true), (&recipient(0), false, true)],
                le(2, &1u64.to_le_bytes()),
            ),
        ],
    );
    let mut client = stack.client().await;
    client.submit_operation(nonce_theft).await.unwrap();
    // A priority fee of its own is refused under any policy, at submit already; recorded
    // behind the gateway's back, by the signer.
    let refused = client
        .submit_operation(priority_fee.clone())
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    assert!(
        refused.message().contains("priority fee"),
        "{}",
        refused.message()
    );
    record_directly(&store_of(&stack), &priority_fee, |_| {});
    let done = wait_terminal(
        &stack,
        &["nonce-theft".into(), "priority-fee".into()],
        Duration::from_secs(60),
    )
    .await;
    for (op_id, rule) in [
        ("nonce-theft", "cannot bound"),
        ("priority-fee", "priority fee"),
    ] {
        let op = &done[op_id];
        assert_eq!(op.state(), pb::OperationState::Rejected, "{op:?}");
        let error = op.error.as_ref().unwrap();
        assert_eq!(error.reason, "SIGNER_REFUSED");
        assert!(error.message.contains(rule), "{op_id}: {}", error.message);
        assert!(op.attempts.is_empty(), "{op_id}: signed");
    }
    let pool = RpcPool::new(std::slice::from_ref(&node.url), Duration::from_secs(5)).unwrap();
    assert_eq!(balance(&pool, &key).await, 10 * SOL, "not a lamport spent");
    // Still a wallet: it pays for a transfer within its limits.
    client
        .submit_operation(sol_transfer("after", &key, &recipient(0), 10_000))
        .await
        .unwrap();
    let after = wait_terminal(&stack, &["after".into()], Duration::from_secs(60)).await;
    assert_eq!(
        after["after"].state(),
        pb::OperationState::Confirmed,
        "{}",
        stack.logs()
    );
    assert_eq!(balance(&pool, &key).await, 10 * SOL - 10_000 - FEE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lamports_are_held_to_the_value_recipient_and_window_limits() {
    let node = SolanaNode::start(Duration::from_millis(50)).await;
    let mut stack_options = StackOptions {
        accounts: 1,
        solana_rpc: Some(node.url.clone()),
        solana_accounts: 1,
        ..Default::default()
    };
    // The policy names the key, which the stack generates: a `*` policy governs it.
    stack_options.signer_tables = format!(
        "[[policies]]\naccount = \"*\"\nmax_lamports = \"10000\"\nwindow_max_lamports = \"15000\"\n\
         window_secs = 3600\nallowed_recipients = [\"{}\"]\n",
        recipient(0)
    );
    let stack = Stack::start(stack_options).await;
    let key = stack.solana_accounts[0].clone();
    node.airdrop(key_bytes(&key), 10 * SOL);
    node.airdrop(key_bytes(&recipient(0)), SOL);
    let mut client = stack.client().await;
    let cases = [
        (sol_transfer("ok", &key, &recipient(0), 9_000), None),
        (
            sol_transfer("too-much", &key, &recipient(0), 10_001),
            Some("max_lamports"),
        ),
        (
            sol_transfer("stranger", &key, &recipient(1), 1),
            Some("allowed_recipients"),
        ),
    ];
    for (request, _) in &cases {
        client.submit_operation(request.clone()).await.unwrap();
    }
    let ids: Vec<String> = cases.iter().map(|(r, _)| r.op_id.clone()).collect();
    let done = wait_terminal(&stack, &ids, Duration::from_secs(60)).await;
    // 9,000 spent of the window's 15,000: 9,000 more is refused, 6,000 is not.
    for (op_id, lamports) in [("over-window", 9_000), ("fits-window", 6_000)] {
        client
            .submit_operation(sol_transfer(op_id, &key, &recipient(0), lamports))
            .await
            .unwrap();
        wait_terminal(&stack, &[op_id.into()], Duration::from_secs(60)).await;
    }
    let window = wait_terminal(
        &stack,
        &["over-window".into(), "fits-window".into()],
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(
        done["ok"].state(),
        pb::OperationState::Confirmed,
        "{}",
        stack.logs()
    );
    assert_eq!(window["fits-window"].state(), pb::OperationState::Confirmed);
    let refused = cases
        .iter()
        .filter_map(|(r, rule)| rule.map(|rule| (&done[&r.op_id], rule)))
        .chain([(&window["over-window"], "window_max_lamports")]);
    for (op, rule) in refused {
        assert_eq!(op.state(), pb::OperationState::Rejected, "{op:?}");
        let error = op.error.as_ref().unwrap();
        assert_eq!(error.reason, "SIGNER_REFUSED");
        assert!(
            error.message.contains(rule),
            "{}: {}",
            op.op_id,
            error.message
        );
        assert!(op.attempts.is_empty(), "{}: signed", op.op_id);
    }
    let pool = RpcPool::new(std::slice::from_ref(&node.url), Duration::from_secs(5)).unwrap();
    assert_eq!(balance(&pool, &recipient(0)).await, SOL + 15_000);
    assert_eq!(balance(&pool, &key).await, 10 * SOL - 15_000 - 2 * FEE);
}

/// A transaction as the node holds it: (maxFeePerGas, maxPriorityFeePerGas), in wei.
async fn fees_of(node: &EvmRpc, tx_id: &str) -> (u128, u128) {
    let tx = node
        .read("eth_getTransactionByHash", serde_json::json!([tx_id]))
        .await
        .unwrap();
    let quantity = |field: &str| {
        u128::from_str_radix(tx[field].as_str().unwrap().trim_start_matches("0x"), 16).unwrap()
    };
    (quantity("maxFeePerGas"), quantity("maxPriorityFeePerGas"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn inflated_fee_quotes_are_held_to_the_chain_cap_and_each_keys_policy() {
    const GWEI: u128 = 1_000_000_000;
    // DEV[0]: at most 5 gwei a gas, 2 as tip. DEV[1]: at most 21,000 × 3 gwei a transaction.
    // DEV[2]: the chain's cap alone (1,000 gwei by default).
    let policies = format!(
        "[[policies]]\naccount = \"{}\"\nmax_fee_per_gas_gwei = 5\nmax_priority_fee_per_gas_gwei = 2\n\
         [[policies]]\naccount = \"{}\"\nmax_fee_wei = \"{}\"\n",
        DEV[0],
        DEV[1],
        21_000 * 3 * GWEI
    );
    let stack = Stack::start(StackOptions {
        accounts: 3,
        signer_proxy: true,
        signer_tables: policies,
        ..Default::default()
    })
    .await;
    // The signer's endpoint quotes fees ten thousand times what anvil does (~1 gwei base,
    // ~1 gwei tip): left alone, a transfer would offer ~30,000 gwei a gas.
    stack
        .signer_proxy
        .as_ref()
        .unwrap()
        .set_inflating_fees(10_000);
    let mut client = stack.client().await;
    for (i, from) in DEV[..3].iter().enumerate() {
        client
            .submit_operation(transfer(
                &format!("inflated-{i}"),
                from,
                &evm_recipient(i),
                1_000,
            ))
            .await
            .unwrap();
    }
    let ids: Vec<String> = (0..3).map(|i| format!("inflated-{i}")).collect();
    let done = wait_terminal(&stack, &ids, Duration::from_secs(90)).await;
    let node = EvmRpc::new(
        std::slice::from_ref(&stack.anvil.url),
        Duration::from_secs(5),
    )
    .unwrap();
    let mut offered = Vec::new();
    for id in &ids {
        let op = &done[id];
        assert_eq!(op.state(), pb::OperationState::Confirmed, "{op:?}");
        assert_eq!(op.attempts.len(), 1, "{op:?}");
        offered.push(fees_of(&node, &op.attempts[0].tx_id).await);
    }
    assert_eq!(offered[0], (5 * GWEI, 2 * GWEI), "the key's own caps");
    assert_eq!(
        offered[1].0,
        3 * GWEI,
        "its most fees per transaction, over 21,000 gas"
    );
    assert_eq!(offered[2].0, 1_000 * GWEI, "the chain's cap");
    assert!(offered.iter().all(|(fee, tip)| tip <= fee));
}
