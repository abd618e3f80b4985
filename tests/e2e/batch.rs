//! SignOperations: many first signatures in one call and one store transaction, each answered
//! as SignOperation answers it alone. A refusal inside the transaction leaves no write of its
//! own and refuses no other operation; a malformed call signs nothing.

use crate::evm::{DEV, recipient, transfer};
use sigcast_e2e::{Stack, StackOptions};
use sigcast_proto::pb;
use sigcast_proto::sigcast::signer::v1::{
    SignOperationRequest, SignOperationsItem, SignOperationsRequest, SignOperationsResult,
    SignPurpose, sign_operations_result,
};
use sigcast_store::{Store, StoreConfig, accounts, operations};
use tonic_types::StatusExt;

fn item(op_id: &str) -> SignOperationsItem {
    SignOperationsItem {
        request: Some(SignOperationRequest {
            op_id: op_id.into(),
            purpose: SignPurpose::Initial.into(),
            replaces_attempt: 0,
            ..Default::default()
        }),
        traceparent: String::new(),
    }
}

/// First signatures of `ids`, asked of the stack's signer in one SignOperations call.
async fn sign_first(stack: &Stack, ids: &[String]) -> Vec<SignOperationsResult> {
    sigcast_e2e::signer_client(&stack.signer_socket(0))
        .await
        .unwrap()
        .sign_operations(SignOperationsRequest {
            items: ids.iter().map(|id| item(id)).collect(),
        })
        .await
        .unwrap()
        .into_inner()
        .results
}

fn assert_all_signed(results: &[SignOperationsResult]) {
    assert!(
        results
            .iter()
            .all(|r| matches!(r.result, Some(sign_operations_result::Result::Signed(_)))),
        "{results:?}"
    );
}

/// The nonce an operation was signed at, and its state.
fn signed_at(store: &Store, op_id: &str) -> (pb::OperationState, Option<u64>, usize) {
    let root = store.root().clone();
    let (op, audit) = store
        .read(|tx| {
            Ok((
                operations::get(tx, &root, op_id)?.expect("recorded"),
                accounts::audit_records(tx, &root, op_id)?,
            ))
        })
        .unwrap();
    let nonce = match op.signing {
        Some(pb::operation::Signing::Evm(evm)) => Some(evm.nonce),
        _ => None,
    };
    (op.state(), nonce, audit.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_is_signed_in_order_and_a_refusal_inside_it_touches_no_other_operation() {
    // DEV[0] may move 2,500 wei an hour: two of its four transfers are refused inside the
    // transaction (its rolling window), after others were written in it.
    let mut stack = Stack::start(StackOptions {
        accounts: 2,
        signer_tables: format!(
            "[[policies]]\naccount = \"{}\"\nwindow_max_value_wei = \"2500\"\nwindow_secs = 3600\n",
            DEV[0]
        ),
        ..Default::default()
    })
    .await;
    stack.broadcasters[0].kill9(); // the test drives the signer
    let mut client = stack.client().await;
    // 1,000 signed; 2,000 refused (3,000 in the hour); 500 signed at the next nonce, which
    // only holds if the refused one's spend and nonce were rolled back; 1,500 refused.
    let ids = ["b-0", "b-1", "b-2", "b-3"];
    for (id, value) in ids.iter().zip([1_000, 2_000, 500, 1_500]) {
        client
            .submit_operation(transfer(id, DEV[0], &recipient(0), value))
            .await
            .unwrap();
    }
    client
        .submit_operation(transfer("other", DEV[1], &recipient(1), 1_000))
        .await
        .unwrap();
    let mut signer = sigcast_e2e::signer_client(&stack.signer_socket(0))
        .await
        .unwrap();
    let mut asked: Vec<SignOperationsItem> = ids.iter().map(|id| item(id)).collect();
    asked.insert(2, item("other"));
    let order: Vec<String> = asked
        .iter()
        .map(|i| i.request.as_ref().unwrap().op_id.clone())
        .collect();
    let results = signer
        .sign_operations(SignOperationsRequest {
            items: asked.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .results;
    let answered: Vec<&str> = results.iter().map(|r| r.op_id.as_str()).collect();
    assert_eq!(answered, order, "one answer per item, in the order asked");
    let outcome = |op_id: &str| -> &sign_operations_result::Result {
        results
            .iter()
            .find(|r| r.op_id == op_id)
            .and_then(|r| r.result.as_ref())
            .unwrap()
    };
    for signed in ["b-0", "b-2", "other"] {
        assert!(
            matches!(outcome(signed), sign_operations_result::Result::Signed(s) if s.attempt == 1 && !s.already_signed),
            "{signed}: {:?}",
            outcome(signed)
        );
    }
    for refused in ["b-1", "b-3"] {
        let sign_operations_result::Result::Error(error) = outcome(refused) else {
            panic!("{refused} was signed past the window's limit");
        };
        // The status SignOperation answers alone: a refusal of the operation, with its reason.
        let status = tonic::Status::with_details(
            tonic::Code::from(error.code),
            error.message.clone(),
            error.details.clone().into(),
        );
        assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
        assert_eq!(
            status.get_details_error_info().map(|i| i.reason).as_deref(),
            Some("POLICY_DENIED"),
            "{status:?}"
        );
    }
    let store = Store::open(&StoreConfig::sqlite(stack.dir.path().join("sigcast.db"))).unwrap();
    // Nonces in the order asked, one each, with a payload and an audit record; nothing of the
    // refused ones (their spends and nonces were rolled back with them).
    assert_eq!(
        signed_at(&store, "b-0"),
        (pb::OperationState::Signed, Some(0), 1)
    );
    assert_eq!(
        signed_at(&store, "b-2"),
        (pb::OperationState::Signed, Some(1), 1)
    );
    assert_eq!(
        signed_at(&store, "other"),
        (pb::OperationState::Signed, Some(0), 1)
    );
    for refused in ["b-1", "b-3"] {
        assert_eq!(
            signed_at(&store, refused),
            (pb::OperationState::Received, None, 0)
        );
    }
    let root = store.root().clone();
    let next = store
        .read(|tx| {
            let account = operations::get(tx, &root, "b-0")?
                .expect("recorded")
                .account;
            accounts::next_nonce(tx, &root, "eip155:31337", &account)
        })
        .unwrap();
    assert_eq!(next, Some(2), "the refused operations allocated no nonce");

    // Asked again, the same answers: the signed ones as already signed, at the same hashes.
    let again = signer
        .sign_operations(SignOperationsRequest { items: asked })
        .await
        .unwrap()
        .into_inner()
        .results;
    for (first, second) in results.iter().zip(&again) {
        match (&first.result, &second.result) {
            (
                Some(sign_operations_result::Result::Signed(a)),
                Some(sign_operations_result::Result::Signed(b)),
            ) => {
                assert_eq!((&a.tx_id, a.attempt), (&b.tx_id, b.attempt));
                assert!(b.already_signed, "{}: signed twice", second.op_id);
            }
            (
                Some(sign_operations_result::Result::Error(a)),
                Some(sign_operations_result::Result::Error(b)),
            ) => assert_eq!(a.code, b.code),
            other => panic!(
                "{}: a different answer the second time: {other:?}",
                first.op_id
            ),
        }
    }
    // And SignOperation alone agrees.
    let alone = signer
        .sign_operation(SignOperationRequest {
            op_id: "b-2".into(),
            purpose: SignPurpose::Initial.into(),
            replaces_attempt: 0,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let sign_operations_result::Result::Signed(batched) = outcome("b-2") else {
        unreachable!()
    };
    assert_eq!(
        (alone.tx_id.as_str(), alone.already_signed),
        (batched.tx_id.as_str(), true)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_malformed_batch_is_refused_whole_and_signs_nothing() {
    let mut stack = Stack::start(StackOptions {
        accounts: 1,
        ..Default::default()
    })
    .await;
    stack.broadcasters[0].kill9();
    let mut client = stack.client().await;
    client
        .submit_operation(transfer("whole", DEV[0], &recipient(0), 1_000))
        .await
        .unwrap();
    let mut signer = sigcast_e2e::signer_client(&stack.signer_socket(0))
        .await
        .unwrap();
    let mut unknown_purpose = item("whole");
    if let Some(request) = unknown_purpose.request.as_mut() {
        request.purpose = 99;
    }
    let bad_floor = |text: &str| {
        let mut bad = item("whole");
        if let Some(request) = bad.request.as_mut() {
            request.purpose = SignPurpose::FeeBump.into();
            request.min_base_fee_per_gas = text.into();
        }
        bad
    };
    let cases: Vec<(Vec<SignOperationsItem>, &str)> = vec![
        (vec![item("whole"), item("whole")], "items[1].request.op_id"),
        (
            vec![bad_floor("0x10")],
            "items[0].request.min_base_fee_per_gas",
        ),
        (
            vec![item("whole"), bad_floor("-1")],
            "items[1].request.min_base_fee_per_gas",
        ),
        (
            vec![bad_floor(&"9".repeat(40))],
            "items[0].request.min_base_fee_per_gas",
        ),
        (vec![item("whole"), item("")], "items[1].request.op_id"),
        (
            vec![
                item("whole"),
                SignOperationsItem {
                    request: None,
                    traceparent: String::new(),
                },
            ],
            "items[1].request",
        ),
        (vec![unknown_purpose], "items[0].request.purpose"),
        (
            (0..257).map(|i| item(&format!("many-{i}"))).collect(),
            "items: at most 256",
        ),
    ];
    for (items, field) in cases {
        let refused = signer
            .sign_operations(SignOperationsRequest { items })
            .await
            .unwrap_err();
        assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
        assert!(
            refused.message().starts_with(field),
            "{field}: {}",
            refused.message()
        );
    }
    // One call alone: the same rule, the field named.
    let refused = signer
        .sign_operation(bad_floor("+5").request.unwrap())
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
    assert!(
        refused.message().starts_with("min_base_fee_per_gas"),
        "{}",
        refused.message()
    );
    let store = Store::open(&StoreConfig::sqlite(stack.dir.path().join("sigcast.db"))).unwrap();
    assert_eq!(
        signed_at(&store, "whole"),
        (pb::OperationState::Received, None, 0)
    );
    // An empty call answers nothing.
    let empty = signer
        .sign_operations(SignOperationsRequest { items: vec![] })
        .await
        .unwrap()
        .into_inner();
    assert!(empty.results.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn signatures_made_together_read_fees_and_the_account_nonce_once() {
    // Found by the load generator: 64 first signatures of one account, asked at once, read
    // the fees and the account's nonce from the node once each (the once-a-second cache was
    // read by all of them before any filled it): half a fee read per operation under load,
    // on the node that must also take the sends.
    let mut stack = Stack::start(StackOptions {
        accounts: 1,
        ..Default::default()
    })
    .await;
    stack.broadcasters[0].kill9();
    let mut client = stack.client().await;
    let ids: Vec<String> = (0..64).map(|i| format!("herd-{i:02}")).collect();
    for id in &ids {
        client
            .submit_operation(transfer(id, DEV[0], &recipient(0), 1_000))
            .await
            .unwrap();
    }
    let results = sign_first(&stack, &ids).await;
    assert_all_signed(&results);
    let samples = crate::observability::scrape(stack.metrics_addr("signer-0")).await;
    for method in ["eth_maxPriorityFeePerGas", "eth_getTransactionCount"] {
        let reads = crate::observability::total(
            &samples,
            "sigcast_rpc_requests_total",
            &[&format!("method=\"{method}\"")],
        );
        assert!(
            reads <= 2.0,
            "{method} read {reads} times for 64 signatures"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_too_large_for_one_transaction_is_signed_all_the_same() {
    // Found in review: 48 contract calls of 128 KiB each write more than a transaction may
    // hold (10 MB, as FoundationDB allows); the batch failed whole, every pass, and the
    // account's first signatures never came, where one by one each fits.
    let mut stack = Stack::start(StackOptions {
        accounts: 1,
        ..Default::default()
    })
    .await;
    stack.broadcasters[0].kill9();
    let mut client = stack.client().await;
    let ids: Vec<String> = (0..48).map(|i| format!("large-{i:02}")).collect();
    for (i, id) in ids.iter().enumerate() {
        let call = pb::EvmContractCall {
            chain_id: 31337,
            from: DEV[0].into(),
            to: recipient(0),
            data: vec![u8::try_from(i).unwrap(); 128 * 1024],
            value_wei: String::new(),
            gas_limit: Some(3_000_000),
        };
        client
            .submit_operation(pb::SubmitOperationRequest {
                op_id: id.clone(),
                intent: Some(pb::Intent {
                    kind: Some(pb::intent::Kind::EvmContractCall(call)),
                }),
            })
            .await
            .unwrap();
    }
    let results = sign_first(&stack, &ids).await;
    let store = Store::open(&StoreConfig::sqlite(stack.dir.path().join("sigcast.db"))).unwrap();
    for (i, (id, result)) in ids.iter().zip(&results).enumerate() {
        assert!(
            matches!(
                result.result,
                Some(sign_operations_result::Result::Signed(_))
            ),
            "{id}: {:?}",
            result.result
        );
        // In the order asked.
        assert_eq!(
            signed_at(&store, id),
            (pb::OperationState::Signed, Some(i as u64), 1)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn solana_signatures_made_together_read_one_blockhash() {
    // Found by the load generator's per-method counts: every SOL transfer's signature read
    // the cluster's latest blockhash on its own, one read per operation on the node.
    let node = sigcast_e2e::SolanaNode::start(std::time::Duration::from_millis(400)).await;
    let mut stack = Stack::start(StackOptions {
        accounts: 1,
        solana_rpc: Some(node.url.clone()),
        solana_accounts: 1,
        ..Default::default()
    })
    .await;
    stack.broadcasters[0].kill9();
    let from = stack.solana_accounts[0].clone();
    let mut client = stack.client().await;
    let ids: Vec<String> = (0..32).map(|i| format!("sol-herd-{i:02}")).collect();
    for (i, id) in ids.iter().enumerate() {
        client
            .submit_operation(crate::solana_ops::sol_transfer(
                id,
                &from,
                &crate::solana_ops::recipient(0),
                1_000 + i as u64,
            ))
            .await
            .unwrap();
    }
    let results = sign_first(&stack, &ids).await;
    assert_all_signed(&results);
    let samples = crate::observability::scrape(stack.metrics_addr("signer-0")).await;
    let reads = crate::observability::total(
        &samples,
        "sigcast_rpc_requests_total",
        &["method=\"getLatestBlockhash\""],
    );
    assert!(
        reads <= 2.0,
        "getLatestBlockhash read {reads} times for 32 signatures"
    );
}
