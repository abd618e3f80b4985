//! GetOperation, ListOperations, WatchOperation and CancelOperation.

use crate::{ALICE, Rig, as_caller, transfer};
use sigcast_proto::pb;
use sigcast_store::operations;
use std::time::SystemTime;
use tokio_stream::StreamExt;
use tonic::Code;
use tonic_types::StatusExt;

#[tokio::test]
async fn unknown_op_ids_are_not_found_and_bad_ones_invalid() {
    let rig = Rig::start().await;
    let mut client = rig.client.clone();
    let status = client
        .get_operation(pb::GetOperationRequest {
            op_id: "nope".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
    assert!(status.message().contains("nope"));
    let status = client
        .get_operation(pb::GetOperationRequest { op_id: "".into() })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    let status = client
        .cancel_operation(pb::CancelOperationRequest {
            op_id: "nope".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
    let status = client
        .watch_operation(pb::WatchOperationRequest {
            op_id: "nope".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
}

#[tokio::test]
async fn list_pages_and_filters() {
    let rig = Rig::start().await;
    let mut client = rig.client.clone();
    for i in 0..12 {
        client
            .submit_operation(transfer(&format!("op-{i:02}"), &i.to_string()))
            .await
            .unwrap();
    }
    client
        .cancel_operation(pb::CancelOperationRequest {
            op_id: "op-05".into(),
        })
        .await
        .unwrap();

    let mut seen = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = client
            .list_operations(pb::ListOperationsRequest {
                page_size: 5,
                page_token,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        seen.extend(page.operations.into_iter().map(|op| op.op_id));
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
    }
    assert_eq!(
        seen,
        (0..12).map(|i| format!("op-{i:02}")).collect::<Vec<_>>()
    );

    let by_account = client
        .list_operations(pb::ListOperationsRequest {
            chain: "eip155:31337".into(),
            account: ALICE.to_lowercase(),
            state: pb::OperationState::Cancelled.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        by_account
            .operations
            .iter()
            .map(|o| o.op_id.as_str())
            .collect::<Vec<_>>(),
        ["op-05"]
    );

    for (request, field) in [
        (
            pb::ListOperationsRequest {
                chain: "bitcoin".into(),
                ..Default::default()
            },
            "chain",
        ),
        (
            pb::ListOperationsRequest {
                account: ALICE.into(),
                ..Default::default()
            },
            "account",
        ),
        (
            pb::ListOperationsRequest {
                page_size: 1001,
                ..Default::default()
            },
            "page_size",
        ),
        (
            pb::ListOperationsRequest {
                page_token: "zz".into(),
                ..Default::default()
            },
            "page_token",
        ),
        (
            pb::ListOperationsRequest {
                page_token: "00".into(),
                ..Default::default()
            },
            "page_token",
        ),
        (
            pb::ListOperationsRequest {
                state: 99,
                ..Default::default()
            },
            "state",
        ),
    ] {
        let status = client.list_operations(request).await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{field}");
        assert!(
            status.message().contains(field),
            "{field}: {}",
            status.message()
        );
    }
}

#[tokio::test]
async fn watch_streams_changes_until_terminal() {
    let rig = Rig::start().await;
    let mut client = rig.client.clone();
    client
        .submit_operation(transfer("watched", "1"))
        .await
        .unwrap();
    let mut stream = client
        .watch_operation(pb::WatchOperationRequest {
            op_id: "watched".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let first = stream.next().await.unwrap().unwrap().operation.unwrap();
    assert_eq!(first.state(), pb::OperationState::Received);

    // Another process (here: another store handle) moves the operation on.
    let store = rig.store();
    let root = store.root().clone();
    store
        .run(|tx| {
            let old = operations::get(tx, &root, "watched")?.unwrap();
            let mut op = old.clone();
            op.set_state(pb::OperationState::Signed);
            op.signing = Some(pb::operation::Signing::Evm(pb::EvmSigning { nonce: 7 }));
            operations::put(tx, &root, Some(&old), &mut op, SystemTime::now())
        })
        .unwrap();
    let second = stream.next().await.unwrap().unwrap().operation.unwrap();
    assert_eq!(second.state(), pb::OperationState::Signed);
    assert_eq!(second.revision, first.revision + 1);

    // Signed: cancel is only requested; then it lands and the watch ends.
    let requested = client
        .cancel_operation(pb::CancelOperationRequest {
            op_id: "watched".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .operation
        .unwrap();
    assert!(requested.cancel_requested);
    assert_eq!(requested.state(), pb::OperationState::Signed);
    let third = stream.next().await.unwrap().unwrap().operation.unwrap();
    assert!(third.cancel_requested);
    store
        .run(|tx| {
            // Sent and confirmed in one transaction: the watch sees only the outcome.
            let old = operations::get(tx, &root, "watched")?.unwrap();
            let mut sent = old.clone();
            sent.set_state(pb::OperationState::Sent);
            operations::put(tx, &root, Some(&old), &mut sent, SystemTime::now())?;
            let mut op = sent.clone();
            op.set_state(pb::OperationState::Confirmed);
            operations::put(tx, &root, Some(&sent), &mut op, SystemTime::now())
        })
        .unwrap();
    let last = stream.next().await.unwrap().unwrap().operation.unwrap();
    assert_eq!(last.state(), pb::OperationState::Confirmed);
    assert!(
        stream.next().await.is_none(),
        "the stream ends after a terminal state"
    );

    let status = client
        .cancel_operation(pb::CancelOperationRequest {
            op_id: "watched".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition);
    assert!(
        status.message().contains("OPERATION_STATE_CONFIRMED"),
        "{}",
        status.message()
    );
}

#[tokio::test]
async fn cancel_before_signing_is_immediate_and_idempotent() {
    let rig = Rig::start().await;
    let mut client = rig.client.clone();
    client
        .submit_operation(transfer("to-cancel", "1"))
        .await
        .unwrap();
    let cancel = pb::CancelOperationRequest {
        op_id: "to-cancel".into(),
    };
    let first = client
        .cancel_operation(cancel.clone())
        .await
        .unwrap()
        .into_inner()
        .operation
        .unwrap();
    assert_eq!(first.state(), pb::OperationState::Cancelled);
    let again = client
        .cancel_operation(cancel)
        .await
        .unwrap()
        .into_inner()
        .operation
        .unwrap();
    assert_eq!(again, first, "a retried cancel returns the same operation");
    // Counted once: the retry changed nothing.
    let cancelled = sigcast_telemetry::metrics::metrics()
        .render()
        .lines()
        .find(|l| l.starts_with("sigcast_operation_transitions_total{") && l.contains("CANCELLED"))
        .map(str::to_owned);
    assert_eq!(
        cancelled.as_deref().and_then(|l| l.rsplit(' ').next()),
        Some("1"),
        "{cancelled:?}"
    );
    // Resubmitting the cancelled op_id replays it; it is not revived.
    let replay = client
        .submit_operation(transfer("to-cancel", "1"))
        .await
        .unwrap()
        .into_inner();
    assert!(replay.replayed);
    assert_eq!(
        replay.operation.unwrap().state(),
        pb::OperationState::Cancelled
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_with_nothing_to_write_is_answered_while_another_process_writes() {
    // A cancel of an operation already cancelled (or terminal, or whose on-chain cancel was
    // asked for) writes nothing: answered from the read, it does not queue behind the store's
    // write lock, held here by another process's transaction (review, fourteenth session).
    let rig = Rig::start_with(|config| config.limits.request_timeout_ms = 1_000).await;
    let mut client = rig.client.clone();
    client
        .submit_operation(transfer("cancelled", "1"))
        .await
        .unwrap();
    let cancel = pb::CancelOperationRequest {
        op_id: "cancelled".into(),
    };
    let first = client.cancel_operation(cancel.clone()).await.unwrap();
    let store = rig.store();
    let (holding, held) = std::sync::mpsc::channel();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let writer = std::thread::spawn(move || {
        store
            .run(|_| {
                let _ = holding.send(());
                let _ = released.recv();
                Ok(())
            })
            .unwrap();
    });
    held.recv().unwrap();
    let again = client.cancel_operation(cancel).await;
    release.send(()).unwrap();
    writer.join().unwrap();
    assert_eq!(
        again
            .map(|r| r.into_inner())
            .map_err(|s| (s.code(), s.message().to_owned())),
        Ok(first.into_inner())
    );
}

#[tokio::test]
async fn watches_beyond_the_limit_are_resource_exhausted_until_one_closes() {
    let rig = Rig::start_with(|c| c.limits.max_watches_per_caller = 2).await;
    let mut client = rig.client.clone();
    client
        .submit_operation(transfer("watched", "1"))
        .await
        .unwrap();
    let watch = || pb::WatchOperationRequest {
        op_id: "watched".into(),
    };
    let mut first = client.watch_operation(watch()).await.unwrap().into_inner();
    let mut second = client.watch_operation(watch()).await.unwrap().into_inner();
    first.next().await.unwrap().unwrap();
    second.next().await.unwrap().unwrap();
    let refused = client.watch_operation(watch()).await.unwrap_err();
    assert_eq!(
        refused.code(),
        tonic::Code::ResourceExhausted,
        "{refused:?}"
    );
    assert!(
        refused
            .message()
            .contains("limits.max_watches_per_caller = 2"),
        "{}",
        refused.message()
    );
    // Closing one gives its place back (once the gateway notices the stream went).
    drop(first);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match client.watch_operation(watch()).await {
            Ok(_) => break,
            Err(status) => {
                assert_eq!(status.code(), tonic::Code::ResourceExhausted);
                assert!(
                    std::time::Instant::now() < deadline,
                    "the place never came back"
                );
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
}

#[tokio::test]
async fn a_list_page_is_held_to_its_byte_limit() {
    let rig = Rig::start_with(|c| c.limits.max_list_response_bytes = 65_536).await;
    let mut client = rig.client.clone();
    // Contract calls with 8 KiB of data: about eight fill the byte limit.
    for i in 0..20 {
        client
            .submit_operation(pb::SubmitOperationRequest {
                op_id: format!("big-{i:02}"),
                intent: Some(pb::Intent {
                    kind: Some(pb::intent::Kind::EvmContractCall(pb::EvmContractCall {
                        chain_id: 31337,
                        from: "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266".into(),
                        to: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8".into(),
                        data: vec![i as u8; 8 * 1024],
                        value_wei: String::new(),
                        gas_limit: Some(100_000),
                    })),
                }),
            })
            .await
            .unwrap();
    }
    let (mut seen, mut token, mut pages) = (Vec::new(), String::new(), 0);
    loop {
        let page = client
            .list_operations(pb::ListOperationsRequest {
                page_size: 1_000,
                page_token: token.clone(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        // The response as it went over the wire: operations and token.
        let bytes = prost::Message::encoded_len(&page);
        assert!(bytes <= 65_536, "a page of {bytes} bytes");
        seen.extend(page.operations.iter().map(|op| op.op_id.clone()));
        pages += 1;
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    let expected: Vec<String> = (0..20).map(|i| format!("big-{i:02}")).collect();
    assert_eq!(
        seen, expected,
        "every operation once, in order, none skipped"
    );
    assert!(pages >= 3, "{pages} pages");
}

/// The concurrent streams the gRPC server at `addr` lets one connection open (its
/// SETTINGS_MAX_CONCURRENT_STREAMS), read after one health check answered.
async fn streams_allowed(addr: std::net::SocketAddr) -> usize {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (client, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    let mut client = client.ready().await.unwrap();
    let request =
        tonic::codegen::http::Request::post(format!("http://{addr}/grpc.health.v1.Health/Check"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .unwrap();
    let (response, mut body) = client.send_request(request, false).unwrap();
    // An empty HealthCheckRequest: uncompressed, length 0.
    body.send_data(tonic::codegen::Bytes::from_static(&[0, 0, 0, 0, 0]), true)
        .unwrap();
    response.await.unwrap();
    client.current_max_send_streams()
}

#[tokio::test]
async fn every_listener_holds_a_connection_to_the_configured_streams() {
    // The health listener is plaintext, for probes; the operator one its own: a client of
    // either opened as many streams as it liked (review, fourteenth session).
    let ports: Vec<std::net::SocketAddr> = (0..2)
        .map(|_| {
            let socket = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            socket.local_addr().unwrap()
        })
        .collect();
    let rig = Rig::start_with(|config| {
        config.limits.max_concurrent_streams = 7;
        config.health_listen = Some(ports[0]);
        config.operator_listen = Some(ports[1]);
    })
    .await;
    let public = rig.addr;
    for addr in [public, ports[0], ports[1]] {
        let mut allowed = 0;
        for _ in 0..50 {
            match tokio::net::TcpStream::connect(addr).await {
                Ok(_) => {
                    allowed = streams_allowed(addr).await;
                    break;
                }
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
            }
        }
        assert_eq!(allowed, 7, "{addr}");
    }
}

/// A page token carries the filter it was issued for: reused with another filter it is
/// INVALID_ARGUMENT, whatever index the listing reads (an authenticated caller's listings all
/// read one index, where a token of another filter once passed and resumed mid-way).
#[tokio::test]
async fn a_page_token_is_refused_under_another_filter() {
    let rig = Rig::start_with(crate::behind_a_mesh).await;
    const A: &str = "spiffe://t/a";
    let mut client = rig.client.clone();
    for i in 0..3 {
        client
            .submit_operation(crate::as_caller(
                A,
                crate::transfer(&format!("op-{i}"), "1"),
            ))
            .await
            .unwrap();
    }
    let received = |page_token: String| pb::ListOperationsRequest {
        state: pb::OperationState::Received.into(),
        page_size: 1,
        page_token,
        ..Default::default()
    };
    let first = client
        .list_operations(crate::as_caller(A, received(String::new())))
        .await
        .unwrap()
        .into_inner();
    assert!(!first.next_page_token.is_empty());
    // Under the filter it was issued for: the next page.
    let next = client
        .list_operations(crate::as_caller(A, received(first.next_page_token.clone())))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(next.operations[0].op_id, "op-1");
    for other in [
        pb::ListOperationsRequest {
            state: pb::OperationState::Cancelled.into(),
            ..received(first.next_page_token.clone())
        },
        pb::ListOperationsRequest {
            chain: "eip155:31337".into(),
            ..received(first.next_page_token.clone())
        },
    ] {
        let status = client
            .list_operations(crate::as_caller(A, other))
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
        assert!(status.message().contains("page_token"), "{status:?}");
    }
}

/// Moves `op_id` on to CONFIRMED in the store, as the signer and the broadcaster would.
fn confirm(rig: &Rig, op_id: &str) {
    let store = rig.store();
    let root = store.root().clone();
    store
        .run(|tx| {
            let mut op = operations::get(tx, &root, op_id)?.unwrap();
            for state in [
                pb::OperationState::Signed,
                pb::OperationState::Sent,
                pb::OperationState::Confirmed,
            ] {
                let old = op.clone();
                op.set_state(state);
                op.signing = Some(pb::operation::Signing::Evm(pb::EvmSigning { nonce: 7 }));
                operations::put(tx, &root, Some(&old), &mut op, SystemTime::now())?;
            }
            Ok(())
        })
        .unwrap();
}

/// `operation_reads_total{from}` as the gateway's metrics show it; the series must exist.
fn reads_from(from: &str) -> u64 {
    let text = sigcast_telemetry::metrics::metrics().render();
    let series = format!("sigcast_operation_reads_total{{from=\"{from}\"}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&series))
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
        .parse()
        .unwrap()
}

#[tokio::test]
async fn a_finished_operation_read_once_is_answered_from_memory_and_only_to_its_caller() {
    let rig = Rig::start_with(crate::behind_a_mesh).await;
    let (a, b) = ("spiffe://t/a", "spiffe://t/b");
    let mut client = rig.client.clone();
    let get = |caller| {
        as_caller(
            caller,
            pb::GetOperationRequest {
                op_id: "paid".into(),
            },
        )
    };
    client
        .submit_operation(as_caller(a, transfer("paid", "10")))
        .await
        .unwrap();
    // Not finished: read from the store each time, and seen moving on.
    let received = client.get_operation(get(a)).await.unwrap().into_inner();
    assert_eq!(
        received.operation.unwrap().state(),
        pb::OperationState::Received
    );
    confirm(&rig, "paid");
    let from_store = reads_from("store");
    let confirmed = client
        .get_operation(get(a))
        .await
        .unwrap()
        .into_inner()
        .operation
        .unwrap();
    assert_eq!(confirmed.state(), pb::OperationState::Confirmed);
    assert_eq!(reads_from("store"), from_store + 1);

    // Read once finished: its replays are answered from memory, the same record.
    let from_memory = reads_from("finished");
    for _ in 0..2 {
        let replay = client
            .submit_operation(as_caller(a, transfer("paid", "10")))
            .await
            .unwrap()
            .into_inner();
        assert!(replay.replayed);
        assert_eq!(replay.operation.as_ref(), Some(&confirmed));
    }
    // Its own conflicting submit is refused as from the store.
    let conflict = client
        .submit_operation(as_caller(a, transfer("paid", "11")))
        .await
        .unwrap_err();
    assert_eq!(conflict.code(), Code::AlreadyExists, "{conflict:?}");
    let info = conflict.get_details_error_info().expect("ErrorInfo");
    assert_eq!(
        info.metadata.get("stored_fingerprint"),
        Some(&confirmed.intent_fingerprint)
    );
    assert_eq!(reads_from("finished"), from_memory + 3);
    assert_eq!(
        reads_from("store"),
        from_store + 1,
        "the store is not read again"
    );

    // Another caller learns of it no more than from the store, which it reads: not found, or
    // taken without its fingerprint.
    let status = client.get_operation(get(b)).await.unwrap_err();
    assert_eq!(status.code(), Code::NotFound, "{status:?}");
    let taken = client
        .submit_operation(as_caller(b, transfer("paid", "10")))
        .await
        .unwrap_err();
    assert_eq!(taken.code(), Code::AlreadyExists, "{taken:?}");
    let info = taken.get_details_error_info().expect("ErrorInfo");
    assert_eq!(info.reason, "OP_ID_CONFLICT");
    assert!(
        !info.metadata.contains_key("stored_fingerprint"),
        "{info:?}"
    );
    assert_eq!(reads_from("finished"), from_memory + 3);
    assert_eq!(reads_from("store"), from_store + 3);

    // Get reads the store: a record rewritten from outside (what an operator's `op get` and
    // `reconcile` exist to see) shows as it is there.
    let store = rig.store();
    let root = store.root().clone();
    store
        .run(|tx| {
            let key = root.pack(&("op", "paid"));
            let raw = tx.get(&key)?.unwrap();
            let mut op = <pb::Operation as prost::Message>::decode(raw.as_slice()).unwrap();
            op.set_state(pb::OperationState::Rejected);
            tx.set(&key, &prost::Message::encode_to_vec(&op))
        })
        .unwrap();
    let rewritten = client.get_operation(get(a)).await.unwrap().into_inner();
    assert_eq!(
        rewritten.operation.unwrap().state(),
        pb::OperationState::Rejected
    );
}
