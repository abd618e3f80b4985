//! SubmitOperation: idempotency under concurrency, conflicts, and input validation.

use crate::{ALICE, BOB, Rig, transfer};
use prost::Message;
use sigcast_proto::pb;
use sigcast_proto::pb::intent::Kind;
use tonic::Code;
use tonic_types::StatusExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thousand_concurrent_identical_submits_make_one_operation() {
    let rig = Rig::start().await;
    let calls: Vec<_> = (0..1000)
        .map(|_| {
            let mut client = rig.client.clone();
            tokio::spawn(async move { client.submit_operation(transfer("pay-1", "1000")).await })
        })
        .collect();
    let mut responses = Vec::new();
    for call in calls {
        responses.push(
            call.await
                .unwrap()
                .expect("every call succeeds")
                .into_inner(),
        );
    }
    let fresh = responses.iter().filter(|r| !r.replayed).count();
    assert_eq!(fresh, 1, "exactly one call created the operation");
    let first = responses[0].operation.clone().unwrap();
    assert!(
        responses
            .iter()
            .all(|r| r.operation.as_ref() == Some(&first)),
        "every call returns the same operation"
    );
    let listed = rig
        .client
        .clone()
        .list_operations(pb::ListOperationsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.operations, [first], "one stored operation");
}

#[tokio::test]
async fn the_same_op_id_with_another_intent_is_already_exists_and_changes_nothing() {
    let rig = Rig::start().await;
    let mut client = rig.client.clone();
    let created = client
        .submit_operation(transfer("pay-2", "1000"))
        .await
        .unwrap()
        .into_inner();
    let before = rig.snapshot();
    let stored_before = get(&rig, "pay-2").await.encode_to_vec();

    let status = client
        .submit_operation(transfer("pay-2", "1001"))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::AlreadyExists);
    assert!(status.message().contains("pay-2"), "{}", status.message());
    let info = status.get_details_error_info().expect("ErrorInfo detail");
    assert_eq!(info.reason, "OP_ID_CONFLICT");
    assert_eq!(
        info.metadata["stored_fingerprint"],
        created.operation.unwrap().intent_fingerprint
    );
    assert_ne!(
        info.metadata["submitted_fingerprint"],
        info.metadata["stored_fingerprint"]
    );

    assert_eq!(
        get(&rig, "pay-2").await.encode_to_vec(),
        stored_before,
        "stored operation byte-identical"
    );
    assert_eq!(rig.snapshot(), before, "nothing in the store changed");

    // The same intent spelled differently (lowercase address, leading zeros) is a replay.
    let mut respelled = transfer("pay-2", "0001000");
    if let Some(pb::Intent {
        kind: Some(Kind::EvmTransfer(t)),
    }) = respelled.intent.as_mut()
    {
        t.from = ALICE.to_lowercase();
    }
    assert!(
        client
            .submit_operation(respelled)
            .await
            .unwrap()
            .into_inner()
            .replayed
    );
}

async fn get(rig: &Rig, op_id: &str) -> pb::Operation {
    let request = pb::GetOperationRequest {
        op_id: op_id.into(),
    };
    rig.client
        .clone()
        .get_operation(request)
        .await
        .unwrap()
        .into_inner()
        .operation
        .unwrap()
}

fn evm_transfer(chain_id: u64, from: &str, to: &str, value_wei: &str) -> Option<pb::Intent> {
    Some(pb::Intent {
        kind: Some(Kind::EvmTransfer(pb::EvmTransfer {
            chain_id,
            from: from.into(),
            to: to.into(),
            value_wei: value_wei.into(),
        })),
    })
}

fn evm_call(data: Vec<u8>, gas_limit: Option<u64>) -> Option<pb::Intent> {
    Some(pb::Intent {
        kind: Some(Kind::EvmContractCall(pb::EvmContractCall {
            chain_id: 31337,
            from: ALICE.into(),
            to: BOB.into(),
            data,
            value_wei: String::new(),
            gas_limit,
        })),
    })
}

const SOL_A: &str = "4Nd1mBQtrMJVYVfKf2PJy9NZUZdTAsp7D4xWLs4gDB4T";
const SOL_B: &str = "11111111111111111111111111111111";

fn sol_transfer(cluster: &str, to: &str, lamports: &str) -> Option<pb::Intent> {
    Some(pb::Intent {
        kind: Some(Kind::SolanaTransfer(pb::SolanaTransfer {
            cluster: cluster.into(),
            from: SOL_A.into(),
            to: to.into(),
            lamports: lamports.into(),
        })),
    })
}

#[tokio::test]
async fn malformed_requests_are_invalid_argument_naming_the_field_and_change_nothing() {
    let rig = Rig::start().await;
    let mut client = rig.client.clone();
    client
        .submit_operation(transfer("existing", "1"))
        .await
        .unwrap();
    let ok = || evm_transfer(31337, ALICE, BOB, "1");
    let u256_plus_one =
        "115792089237316195423570985008687907853269984665640564039457584007913129639936";
    let cases: Vec<(&str, String, Option<pb::Intent>, &str)> = vec![
        ("empty op_id", String::new(), ok(), "op_id"),
        ("oversized op_id", "x".repeat(129), ok(), "op_id"),
        ("op_id with a space", "a b".into(), ok(), "op_id"),
        ("op_id with a slash", "a/b".into(), ok(), "op_id"),
        ("op_id with non-ASCII", "zahlung-ä".into(), ok(), "op_id"),
        ("op_id with a NUL", "a\0b".into(), ok(), "op_id"),
        (
            "short address",
            "t1".into(),
            evm_transfer(31337, ALICE, "0x1234", "1"),
            "intent.evm_transfer.to",
        ),
        (
            "address without 0x",
            "t2".into(),
            evm_transfer(31337, &ALICE[2..], BOB, "1"),
            "intent.evm_transfer.from",
        ),
        (
            "bad checksum",
            "t3".into(),
            evm_transfer(
                31337,
                ALICE,
                "0x70997970c51812dc3A010C7d01b50e0d17dc79C8",
                "1",
            ),
            "intent.evm_transfer.to",
        ),
        (
            "non-hex address",
            "t4".into(),
            evm_transfer(
                31337,
                ALICE,
                "0xZZ997970c51812dc3a010c7d01b50e0d17dc79c8",
                "1",
            ),
            "intent.evm_transfer.to",
        ),
        (
            "negative amount",
            "t5".into(),
            evm_transfer(31337, ALICE, BOB, "-1"),
            "intent.evm_transfer.value_wei",
        ),
        (
            "fractional amount",
            "t6".into(),
            evm_transfer(31337, ALICE, BOB, "1.5"),
            "intent.evm_transfer.value_wei",
        ),
        (
            "overflowing amount",
            "t7".into(),
            evm_transfer(31337, ALICE, BOB, u256_plus_one),
            "intent.evm_transfer.value_wei",
        ),
        (
            "hex amount",
            "t8".into(),
            evm_transfer(31337, ALICE, BOB, "0x10"),
            "intent.evm_transfer.value_wei",
        ),
        (
            "word amount",
            "t9".into(),
            evm_transfer(31337, ALICE, BOB, "ten"),
            "intent.evm_transfer.value_wei",
        ),
        (
            "empty amount",
            "t10".into(),
            evm_transfer(31337, ALICE, BOB, ""),
            "intent.evm_transfer.value_wei",
        ),
        (
            "exponent amount",
            "t11".into(),
            evm_transfer(31337, ALICE, BOB, "1e18"),
            "intent.evm_transfer.value_wei",
        ),
        (
            "unknown EVM chain",
            "t12".into(),
            evm_transfer(1, ALICE, BOB, "1"),
            "intent.evm_transfer.chain_id",
        ),
        (
            "unknown Solana cluster",
            "t13".into(),
            sol_transfer("mainnet-beta", SOL_B, "1"),
            "intent.solana_transfer.cluster",
        ),
        (
            "bad pubkey",
            "t14".into(),
            sol_transfer("localnet", "not-base58-0OIl", "1"),
            "intent.solana_transfer.to",
        ),
        (
            "short pubkey",
            "t15".into(),
            sol_transfer("localnet", "1111", "1"),
            "intent.solana_transfer.to",
        ),
        (
            "overflowing lamports",
            "t16".into(),
            sol_transfer("localnet", SOL_B, "18446744073709551616"),
            "intent.solana_transfer.lamports",
        ),
        ("missing intent", "t17".into(), None, "intent"),
        (
            "intent without a kind",
            "t18".into(),
            Some(pb::Intent { kind: None }),
            "intent",
        ),
        (
            "oversized call data",
            "t19".into(),
            evm_call(vec![0xab; 128 * 1024 + 1], None),
            "intent.evm_contract_call.data",
        ),
        (
            "zero gas limit",
            "t20".into(),
            evm_call(vec![1, 2, 3, 4], Some(0)),
            "intent.evm_contract_call.gas_limit",
        ),
        (
            "no instructions",
            "t21".into(),
            Some(pb::Intent {
                kind: Some(Kind::SolanaInstructions(pb::SolanaInstructions {
                    cluster: "localnet".into(),
                    fee_payer: SOL_A.into(),
                    instructions: vec![],
                })),
            }),
            "intent.solana_instructions.instructions",
        ),
    ];
    let before = rig.snapshot();
    for (case, op_id, intent, field) in cases {
        let status = client
            .submit_operation(pb::SubmitOperationRequest {
                op_id: op_id.clone(),
                intent,
            })
            .await
            .expect_err(case);
        assert_eq!(status.code(), Code::InvalidArgument, "{case}: {status:?}");
        let bad_request = status
            .get_details_bad_request()
            .unwrap_or_else(|| panic!("{case}: no BadRequest"));
        let fields: Vec<_> = bad_request
            .field_violations
            .iter()
            .map(|v| v.field.as_str())
            .collect();
        assert_eq!(fields, [field], "{case}");
        assert!(
            status.message().contains(field),
            "{case}: message names the field: {}",
            status.message()
        );
    }
    assert_eq!(
        rig.snapshot(),
        before,
        "no malformed request changed the store"
    );
}

#[tokio::test]
async fn every_intent_kind_is_accepted_in_canonical_form() {
    let rig = Rig::start().await;
    let mut client = rig.client.clone();
    let intents = [
        evm_transfer(31337, &ALICE.to_uppercase().replace("0X", "0x"), BOB, "007"),
        evm_call(vec![0xa9, 0x05, 0x9c, 0xbb], Some(60_000)),
        sol_transfer("localnet", SOL_B, "5000"),
        Some(pb::Intent {
            kind: Some(Kind::SolanaInstructions(pb::SolanaInstructions {
                cluster: "localnet".into(),
                fee_payer: SOL_A.into(),
                instructions: vec![pb::SolanaInstruction {
                    program_id: SOL_B.into(),
                    accounts: vec![pb::SolanaAccountMeta {
                        pubkey: SOL_A.into(),
                        is_signer: true,
                        is_writable: true,
                    }],
                    data: vec![2, 0, 0, 0],
                }],
            })),
        }),
    ];
    for (i, intent) in intents.into_iter().enumerate() {
        let op_id = format!("kind-{i}");
        let response = client
            .submit_operation(pb::SubmitOperationRequest {
                op_id: op_id.clone(),
                intent,
            })
            .await
            .unwrap()
            .into_inner();
        let op = response.operation.unwrap();
        assert_eq!(
            (op.op_id.as_str(), op.state()),
            (op_id.as_str(), pb::OperationState::Received)
        );
        assert_eq!(op.intent_fingerprint.len(), 64);
        if i == 0 {
            let Some(Kind::EvmTransfer(t)) = op.intent.unwrap().kind else {
                panic!()
            };
            assert_eq!(
                (t.from.as_str(), t.value_wei.as_str()),
                (ALICE, "7"),
                "stored normalized"
            );
            assert_eq!(op.account, ALICE);
        }
        if i >= 2 {
            assert_eq!(op.chain, "solana:localnet");
            assert_eq!(op.account, SOL_A);
        }
    }
}

#[tokio::test]
async fn a_request_over_the_size_limit_is_refused() {
    let rig = Rig::start().await;
    let before = rig.snapshot();
    let status = rig
        .client
        .clone()
        .submit_operation(pb::SubmitOperationRequest {
            op_id: "huge".into(),
            intent: evm_call(vec![0; 2 * 1024 * 1024], None),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::OutOfRange, "{status:?}");
    assert_eq!(rig.snapshot(), before, "nothing recorded");
}

#[tokio::test]
async fn what_the_key_policy_forbids_is_permission_denied_at_submit_and_not_recorded() {
    let rig = Rig::start_with(|config| {
        config.policies = vec![
            sigcast_domain::policy::KeyPolicy {
                account: ALICE.to_lowercase(),
                max_value_wei: "1000".into(),
                allowed_recipients: vec![BOB.into()],
                ..Default::default()
            },
            sigcast_domain::policy::KeyPolicy {
                account: SOL_A.into(),
                allowed_program_ids: vec![SOL_B.into()],
                ..Default::default()
            },
        ];
    })
    .await;
    let mut client = rig.client.clone();
    assert!(
        client
            .submit_operation(transfer("within", "1000"))
            .await
            .is_ok()
    );
    let before = rig.snapshot();
    let status = client
        .submit_operation(transfer("too-much", "1001"))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::PermissionDenied);
    assert!(
        status.message().contains("max_value_wei"),
        "{}",
        status.message()
    );
    let info = status.get_details_error_info().expect("ErrorInfo");
    assert_eq!(info.reason, "POLICY_DENIED");
    assert_eq!(info.metadata["account"], ALICE);
    assert_eq!(rig.snapshot(), before, "nothing recorded");
    // Another sender has no policy: accepted.
    let mut other = transfer("other-sender", "5000");
    if let Some(pb::Intent {
        kind: Some(Kind::EvmTransfer(t)),
    }) = other.intent.as_mut()
    {
        t.from = BOB.into();
        t.to = ALICE.into();
    }
    assert!(client.submit_operation(other).await.is_ok());
    // A Solana key limited to the System Program may not invoke another program.
    let other_program = pb::SubmitOperationRequest {
        op_id: "sol-other-program".into(),
        intent: Some(pb::Intent {
            kind: Some(Kind::SolanaInstructions(pb::SolanaInstructions {
                cluster: "localnet".into(),
                fee_payer: SOL_A.into(),
                instructions: vec![pb::SolanaInstruction {
                    program_id: SOL_A.into(),
                    accounts: vec![],
                    data: vec![1],
                }],
            })),
        }),
    };
    let status = client.submit_operation(other_program).await.unwrap_err();
    assert_eq!(status.code(), Code::PermissionDenied);
    assert!(
        status.message().contains("allowed_program_ids"),
        "{}",
        status.message()
    );
    assert!(
        client
            .submit_operation(pb::SubmitOperationRequest {
                op_id: "sol-transfer".into(),
                intent: sol_transfer("localnet", SOL_B, "1"),
            })
            .await
            .is_ok(),
        "a SOL transfer invokes the System Program: allowed"
    );
}

/// A retry must find its operation whatever the gateway answering it serves now. A replica
/// whose rules changed since the operation was accepted (a chain dropped, a smaller call-data
/// limit, a tighter key policy) answers the stored operation: a refusal saying nothing was
/// recorded would have its caller pay another way while the operation lands.
#[tokio::test]
async fn a_retry_finds_its_operation_after_the_rules_it_was_accepted_under_changed() {
    let then = Rig::start_with(|config| config.chains.evm_chain_ids = vec![1, 31337]).await;
    let mut on_chain_1 = transfer("on-chain-1", "5000");
    if let Some(pb::Intent {
        kind: Some(Kind::EvmTransfer(t)),
    }) = on_chain_1.intent.as_mut()
    {
        t.chain_id = 1;
    }
    let large_call = pb::SubmitOperationRequest {
        op_id: "large-call".into(),
        intent: evm_call(vec![7; 2000], Some(100_000)),
    };
    let mut accepted = Vec::new();
    for request in [on_chain_1.clone(), large_call.clone()] {
        let answer = then.client.clone().submit_operation(request).await.unwrap();
        accepted.push(answer.into_inner().operation.unwrap());
    }

    let store = then.config.store.clone();
    let now = Rig::start_with(move |config| {
        config.store = store;
        config.limits.max_evm_call_data_bytes = 1000;
        config.policies = vec![sigcast_domain::policy::KeyPolicy {
            account: ALICE.into(),
            max_value_wei: "1".into(),
            ..Default::default()
        }];
    })
    .await;
    let before = now.snapshot();
    for (request, stored) in [on_chain_1.clone(), large_call].into_iter().zip(accepted) {
        let answer = now
            .client
            .clone()
            .submit_operation(request)
            .await
            .unwrap_or_else(|status| panic!("{status:?}"))
            .into_inner();
        assert!(answer.replayed);
        assert_eq!(answer.operation.unwrap(), stored);
    }
    // Another intent under a known op_id is still a conflict, not a refusal of its shape.
    let mut changed = on_chain_1.clone();
    if let Some(pb::Intent {
        kind: Some(Kind::EvmTransfer(t)),
    }) = changed.intent.as_mut()
    {
        t.value_wei = "6000".into();
    }
    let status = now
        .client
        .clone()
        .submit_operation(changed)
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::AlreadyExists, "{status:?}");
    assert_eq!(now.snapshot(), before, "nothing recorded");

    // A new operation meets the rules of now.
    on_chain_1.op_id = "on-chain-1-again".into();
    let status = now
        .client
        .clone()
        .submit_operation(on_chain_1)
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(
        status.message().contains("intent.evm_transfer.chain_id"),
        "{status:?}"
    );
    assert_eq!(now.snapshot(), before, "nothing recorded");
}

/// Submits `request` as the mesh-forwarded identity `uri`.
async fn submit_as(
    rig: &Rig,
    uri: &str,
    request: pb::SubmitOperationRequest,
) -> Result<pb::SubmitOperationResponse, tonic::Status> {
    rig.client
        .clone()
        .submit_operation(crate::as_caller(uri, request))
        .await
        .map(tonic::Response::into_inner)
}

/// op_ids are one namespace: another caller's op_id is refused. It is said to be taken only
/// for an intent the caller may submit: one its key policy forbids gets the same refusal
/// whether the op_id exists or not, so that no caller learns of another's operations by
/// trying op_ids (the recommended ones are derived from payment facts).
#[tokio::test]
async fn another_caller_s_op_id_is_said_taken_only_for_an_intent_the_caller_may_submit() {
    let rig = Rig::start_with(|config| {
        crate::behind_a_mesh(config);
        config.policies = vec![sigcast_domain::policy::KeyPolicy {
            account: ALICE.into(),
            max_value_wei: "100".into(),
            ..Default::default()
        }];
    })
    .await;
    let (a, b) = ("spiffe://t/a", "spiffe://t/b");
    submit_as(&rig, a, transfer("pay-1", "10")).await.unwrap();
    let before = rig.snapshot();

    let taken = submit_as(&rig, b, transfer("pay-1", "1000"))
        .await
        .unwrap_err();
    let free = submit_as(&rig, b, transfer("pay-2", "1000"))
        .await
        .unwrap_err();
    assert_eq!(taken.code(), Code::PermissionDenied, "{taken:?}");
    assert_eq!(taken.code(), free.code());
    assert_eq!(
        taken.message().replace("pay-1", "pay-2"),
        free.message(),
        "the same refusal"
    );

    // An intent it may submit: taken, as the contract names a conflict, without the other
    // caller's fingerprint.
    let status = submit_as(&rig, b, transfer("pay-1", "10"))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::AlreadyExists, "{status:?}");
    let info = status.get_details_error_info().expect("ErrorInfo");
    assert_eq!(info.reason, "OP_ID_CONFLICT");
    assert_eq!(
        info.metadata.get("op_id").map(String::as_str),
        Some("pay-1")
    );
    assert!(
        !info.metadata.contains_key("stored_fingerprint"),
        "{info:?}"
    );
    assert_eq!(rig.snapshot(), before, "nothing recorded");
}

/// A call without an identity on a gateway that authenticates callers is UNAUTHENTICATED, the
/// code gRPC clients and their interceptors act on (refresh a credential, a sidecar's
/// certificate), not PERMISSION_DENIED, which says the identity was read and refused.
#[tokio::test]
async fn a_call_without_an_identity_is_unauthenticated() {
    let rig = Rig::start_with(|config| {
        crate::behind_a_mesh(config);
    })
    .await;
    let before = rig.snapshot();
    let mut client = rig.client.clone();
    let submit = client
        .submit_operation(transfer("anonymous", "1"))
        .await
        .unwrap_err();
    let get = client
        .get_operation(pb::GetOperationRequest {
            op_id: "anonymous".into(),
        })
        .await
        .unwrap_err();
    let mut operator =
        sigcast_proto::sigcast::operator::v1::operator_service_client::OperatorServiceClient::connect(
            format!("http://{}", rig.addr),
        )
        .await
        .unwrap();
    let audit = operator
        .get_audit_trail(sigcast_proto::sigcast::operator::v1::GetAuditTrailRequest {
            op_id: "anonymous".into(),
        })
        .await
        .unwrap_err();
    for status in [submit, get, audit] {
        assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
        assert!(status.message().contains("no identity"), "{status:?}");
        let info = status.get_details_error_info().expect("ErrorInfo");
        assert_eq!(info.reason, "CALLER_UNIDENTIFIED");
    }
    assert_eq!(rig.snapshot(), before, "nothing recorded");
    // With one, the same call is answered.
    submit_as(&rig, "spiffe://t/a", transfer("anonymous", "1"))
        .await
        .unwrap();
}

/// A caller taken out of `[[callers]]` after a submit, retrying it: its own operation is
/// answered (a refusal saying nothing was recorded would have it pay another way while the
/// operation lands). Anything new it asks is refused, and another caller's op_id tells it
/// nothing.
#[tokio::test]
async fn a_caller_taken_out_of_the_table_has_its_retry_answered_and_nothing_else() {
    let rule = |identity: &str| sigcast_domain::callers::CallerRule {
        identity: identity.into(),
        accounts: vec!["*".into()],
        chains: Vec::new(),
        intent_kinds: Vec::new(),
        may_cancel: true,
    };
    let (a, b) = ("spiffe://t/a", "spiffe://t/b");
    let then = Rig::start_with(|config| {
        crate::behind_a_mesh(config);
        config.callers = vec![rule(a), rule(b)];
    })
    .await;
    let accepted = submit_as(&then, a, transfer("pay-a", "10")).await.unwrap();
    submit_as(&then, b, transfer("pay-b", "10")).await.unwrap();
    let store = then.config.store.clone();
    let now = Rig::start_with(move |config| {
        config.store = store;
        crate::behind_a_mesh(config);
        config.callers = vec![rule(b)];
    })
    .await;
    let before = now.snapshot();
    let retry = submit_as(&now, a, transfer("pay-a", "10"))
        .await
        .unwrap_or_else(|status| panic!("{status:?}"));
    assert!(retry.replayed);
    assert_eq!(retry.operation, accepted.operation);
    for (op_id, value) in [("pay-new", "10"), ("pay-b", "10"), ("pay-a", "11")] {
        let status = submit_as(&now, a, transfer(op_id, value))
            .await
            .unwrap_err();
        let expected = match op_id {
            // Its own operation with another intent: the conflict, as to any retry.
            "pay-a" => Code::AlreadyExists,
            _ => Code::PermissionDenied,
        };
        assert_eq!(status.code(), expected, "{op_id}: {status:?}");
    }
    assert_eq!(now.snapshot(), before, "nothing recorded");
}
