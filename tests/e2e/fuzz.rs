//! The gateway's API under generated input: every request message of every public and operator
//! RPC (nested Solana instructions, extreme integers, unicode, empty and oversized fields) and
//! random bytes as protobuf, sent through the real gateway process. What a caller can rely on:
//! no call ends in INTERNAL, UNKNOWN or a dropped connection; every refusal is INVALID_ARGUMENT
//! (OUT_OF_RANGE for a message over the size limit) naming the field; a refused submit stores
//! nothing; an accepted one is found again and replays on a second submit.
//!
//! `SIGCAST_FUZZ_CASES` sets the cases per property (CI: 256). A failure is shrunk to a
//! smallest case and kept in `e2e/fuzz.proptest-regressions`, which is replayed first on every
//! run; the cases in `CORPUS` run every time.

use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence, TestCaseError, TestRunner};
use sigcast_e2e::GatewayProcess;
use sigcast_proto::pb;
use sigcast_proto::sigcast::operator::v1::GetAuditTrailRequest;
use sigcast_proto::sigcast::operator::v1::operator_service_client::OperatorServiceClient;
use sigcast_proto::sigcast::v1::operation_service_client::OperationServiceClient;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tonic::Code;
use tonic::transport::Channel;
use tonic_types::StatusExt;

const DEV_ACCOUNT: &str = "0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266";
const CHECKSUMMED: &str = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";
const SYSTEM_PROGRAM: &str = "11111111111111111111111111111111";
const MAX_U256: &str =
    "115792089237316195423570985008687907853269984665640564039457584007913129639935";
const MAX_U256_PLUS_ONE: &str =
    "115792089237316195423570985008687907853269984665640564039457584007913129639936";

fn cases() -> u32 {
    std::env::var("SIGCAST_FUZZ_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(256)
}

fn runner() -> TestRunner {
    TestRunner::new(Config {
        cases: cases(),
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "e2e/fuzz.proptest-regressions",
        ))),
        // Each case is a few gRPC calls to a live process; shrinking a failure needs no more.
        max_shrink_iters: 200,
        ..Config::default()
    })
}

/// Text a caller might send: nothing, what the rules admit, any unicode, control characters,
/// and long strings.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "[A-Za-z0-9._:-]{1,140}",
        any::<String>(),
        "\\PC{0,200}",
        "[\\x00-\\x1f\\u{200b}\\u{feff}\\u{202e}]{1,8}",
        (1usize..5_000).prop_map(|n| "9".repeat(n)),
    ]
}

fn op_id() -> impl Strategy<Value = String> {
    prop_oneof![12 => "fz-[A-Za-z0-9._:-]{4,40}", 1 => "[A-Za-z0-9._:-]{120,130}", 2 => text()]
}

fn evm_address() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => Just(DEV_ACCOUNT.to_owned()),
        6 => Just(CHECKSUMMED.to_owned()),
        6 => any::<[u8; 20]>().prop_map(|a| format!("0x{}", hex::encode(a))),
        1 => Just(CHECKSUMMED.to_lowercase().replace("0x7", "0X7")),
        1 => "0x[0-9a-fA-F]{0,44}",
        1 => text(),
    ]
}

fn amount() -> impl Strategy<Value = String> {
    prop_oneof![
        30 => "[0-9]{1,19}",
        3 => "[0-9]{70,90}",
        1 => Just(MAX_U256.to_owned()),
        1 => Just(MAX_U256_PLUS_ONE.to_owned()),
        1 => Just("18446744073709551616".to_owned()), // 2^64: over any lamport amount
        1 => "-[0-9]{1,5}",
        1 => "0x[0-9a-f]{1,10}",
        1 => "[0-9]{1,3}\\.[0-9]{1,3}",
        1 => "[\u{0660}-\u{0669}]{1,4}", // Arabic-Indic digits
        1 => text(),
    ]
}

fn chain_id() -> impl Strategy<Value = u64> {
    prop_oneof![20 => Just(31337u64), 1 => any::<u64>(), 1 => Just(0u64), 1 => Just(u64::MAX)]
}

fn cluster() -> impl Strategy<Value = String> {
    prop_oneof![20 => Just("localnet".to_owned()), 1 => text()]
}

fn pubkey() -> impl Strategy<Value = String> {
    prop_oneof![
        30 => any::<[u8; 32]>().prop_map(|k| bs58::encode(k).into_string()),
        10 => Just(SYSTEM_PROGRAM.to_owned()),
        1 => any::<[u8; 33]>().prop_map(|k| bs58::encode(k).into_string()),
        1 => "[1-9A-HJ-NP-Za-km-z]{0,50}",
        1 => text(),
    ]
}

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..max)
}

fn instruction() -> impl Strategy<Value = pb::SolanaInstruction> {
    // Mostly not signers: a key other than the fee payer's is refused as a co-signer.
    let meta = (pubkey(), proptest::bool::weighted(0.1), any::<bool>()).prop_map(
        |(pubkey, is_signer, is_writable)| pb::SolanaAccountMeta {
            pubkey,
            is_signer,
            is_writable,
        },
    );
    (pubkey(), proptest::collection::vec(meta, 0..8), bytes(300)).prop_map(
        |(program_id, accounts, data)| pb::SolanaInstruction {
            program_id,
            accounts,
            data,
        },
    )
}

fn intent() -> impl Strategy<Value = Option<pb::Intent>> {
    use pb::intent::Kind;
    let evm_transfer = (chain_id(), evm_address(), evm_address(), amount()).prop_map(
        |(chain_id, from, to, value_wei)| {
            Kind::EvmTransfer(pb::EvmTransfer {
                chain_id,
                from,
                to,
                value_wei,
            })
        },
    );
    let evm_call = (
        chain_id(),
        evm_address(),
        evm_address(),
        bytes(2_000),
        prop_oneof![Just(String::new()), amount()],
        proptest::option::of(any::<u64>()),
    )
        .prop_map(|(chain_id, from, to, data, value_wei, gas_limit)| {
            Kind::EvmContractCall(pb::EvmContractCall {
                chain_id,
                from,
                to,
                data,
                value_wei,
                gas_limit,
            })
        });
    let sol_transfer =
        (cluster(), pubkey(), pubkey(), amount()).prop_map(|(cluster, from, to, lamports)| {
            Kind::SolanaTransfer(pb::SolanaTransfer {
                cluster,
                from,
                to,
                lamports,
            })
        });
    let sol_instructions = (
        cluster(),
        pubkey(),
        prop_oneof![
            3 => proptest::collection::vec(instruction(), 0..6),
            1 => proptest::collection::vec(instruction(), 60..70),
        ],
    )
        .prop_map(|(cluster, fee_payer, instructions)| {
            Kind::SolanaInstructions(pb::SolanaInstructions {
                cluster,
                fee_payer,
                instructions,
            })
        });
    proptest::option::weighted(
        0.95,
        prop_oneof![evm_transfer, evm_call, sol_transfer, sol_instructions]
            .prop_map(|kind| pb::Intent { kind: Some(kind) }),
    )
}

/// Requests that once found something, or sit on an edge, run on every run.
fn corpus() -> Vec<pb::SubmitOperationRequest> {
    let transfer = |op_id: &str, value: &str| pb::SubmitOperationRequest {
        op_id: op_id.to_owned(),
        intent: Some(pb::Intent {
            kind: Some(pb::intent::Kind::EvmTransfer(pb::EvmTransfer {
                chain_id: 31337,
                from: DEV_ACCOUNT.to_owned(),
                to: CHECKSUMMED.to_owned(),
                value_wei: value.to_owned(),
            })),
        }),
    };
    vec![
        transfer("corpus-max-u256", MAX_U256),
        transfer("corpus-max-u256-plus-one", MAX_U256_PLUS_ONE),
        transfer("corpus-leading-zeros", "000000000000000000000000000001"),
        transfer("corpus-arabic-digits", "\u{0661}\u{0662}"),
        transfer("corpus-nul", "1\u{0}"),
        transfer(&"x".repeat(128), "1"),
        transfer(&"x".repeat(129), "1"),
        transfer("corpus-\u{200b}zero-width", "1"),
        // Over the 1 MiB request limit: OUT_OF_RANGE before anything is parsed.
        transfer("corpus-oversized", &"1".repeat(1_100_000)),
        pb::SubmitOperationRequest {
            op_id: "corpus-65-instructions".into(),
            intent: Some(pb::Intent {
                kind: Some(pb::intent::Kind::SolanaInstructions(
                    pb::SolanaInstructions {
                        cluster: "localnet".into(),
                        fee_payer: SYSTEM_PROGRAM.into(),
                        instructions: vec![
                            pb::SolanaInstruction {
                                program_id: SYSTEM_PROGRAM.into(),
                                accounts: vec![],
                                data: vec![],
                            };
                            65
                        ],
                    },
                )),
            }),
        },
        // Hundreds of broken fields: the refusal must still fit in the trailers a client
        // accepts (it once did not, and the connection died with an h2 COMPRESSION_ERROR).
        pb::SubmitOperationRequest {
            op_id: "corpus-64-broken-instructions".into(),
            intent: Some(pb::Intent {
                kind: Some(pb::intent::Kind::SolanaInstructions(
                    pb::SolanaInstructions {
                        cluster: "localnet".into(),
                        fee_payer: SYSTEM_PROGRAM.into(),
                        instructions: vec![
                            pb::SolanaInstruction {
                                program_id: "not base58 0OIl".into(),
                                accounts: vec![
                                    pb::SolanaAccountMeta {
                                        pubkey: "\u{feff}".into(),
                                        is_signer: true,
                                        is_writable: true,
                                    };
                                    8
                                ],
                                data: vec![],
                            };
                            64
                        ],
                    },
                )),
            }),
        },
        pb::SubmitOperationRequest {
            op_id: "corpus-empty-intent".into(),
            intent: Some(pb::Intent { kind: None }),
        },
    ]
}

/// The fields a refusal may name: a path into the request (list indexes in brackets).
fn is_request_field(field: &str) -> bool {
    let top = [
        "op_id",
        "intent",
        "chain",
        "account",
        "state",
        "page_size",
        "page_token",
    ];
    let mut parts = field.split('.');
    let Some(first) = parts.next() else {
        return false;
    };
    top.contains(&first)
        && parts.all(|part| {
            let name = part.split('[').next().unwrap_or_default();
            !name.is_empty()
                && name.chars().all(|c| c.is_ascii_lowercase() || c == '_')
                && part[name.len()..].split_terminator(']').all(|index| {
                    index
                        .strip_prefix('[')
                        .is_some_and(|i| i.parse::<u32>().is_ok())
                })
        })
}

/// A refusal as a caller must be able to read it: INVALID_ARGUMENT with a BadRequest naming
/// fields of the request, each named in the message too; or OUT_OF_RANGE for a message over
/// the size limit.
fn check_refusal(status: &tonic::Status) -> Result<(), TestCaseError> {
    match status.code() {
        Code::OutOfRange => {
            prop_assert!(
                status.message().contains("message length too large")
                    || status.message().contains("bytes"),
                "OUT_OF_RANGE that does not say what was too large: {status:?}"
            );
        }
        Code::InvalidArgument => {
            let Some(bad) = status.get_details_bad_request() else {
                return Err(TestCaseError::fail(format!(
                    "INVALID_ARGUMENT without a BadRequest detail: {status:?}"
                )));
            };
            prop_assert!(!bad.field_violations.is_empty(), "{status:?}");
            for violation in &bad.field_violations {
                let undecodable = status.message().contains("not a valid protobuf encoding");
                prop_assert!(
                    is_request_field(&violation.field)
                        || (undecodable && violation.field.is_empty()),
                    "violation names no field of the request: {violation:?}"
                );
                prop_assert!(
                    status.message().contains(&violation.field),
                    "message does not name {}: {}",
                    violation.field,
                    status.message()
                );
            }
        }
        code => {
            return Err(TestCaseError::fail(format!(
                "refused with {code:?}, not INVALID_ARGUMENT/OUT_OF_RANGE: {status:?}"
            )));
        }
    }
    Ok(())
}

/// Calls that the fault of the service would end in: never acceptable.
fn is_service_fault(code: Code) -> bool {
    matches!(
        code,
        Code::Internal | Code::Unknown | Code::Unavailable | Code::DataLoss | Code::Unimplemented
    )
}

struct Api {
    runtime: tokio::runtime::Runtime,
    gateway: GatewayProcess,
    client: OperationServiceClient<Channel>,
    operator: OperatorServiceClient<Channel>,
    channel: Channel,
    /// Accepted op_ids and the fingerprint of their stored intent.
    accepted: Mutex<HashMap<String, String>>,
    /// How many calls of each kind ended how, printed at the end (a run that accepts nothing,
    /// or refuses nothing, tests less than it seems).
    outcomes: Mutex<std::collections::BTreeMap<String, usize>>,
}

impl Api {
    fn start() -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let gateway = runtime.block_on(GatewayProcess::start(
            "[chains]\nevm_chain_ids = [31337]\nsolana_clusters = [\"localnet\"]\n",
        ));
        let channel = runtime.block_on(async {
            Channel::from_shared(format!("http://{}", gateway.addr))
                .unwrap()
                .timeout(Duration::from_secs(30))
                .connect()
                .await
                .unwrap()
        });
        Self {
            client: OperationServiceClient::new(channel.clone())
                .max_decoding_message_size(64 * 1024 * 1024)
                .max_encoding_message_size(64 * 1024 * 1024),
            operator: OperatorServiceClient::new(channel.clone()),
            channel,
            runtime,
            gateway,
            accepted: Mutex::new(HashMap::new()),
            outcomes: Mutex::default(),
        }
    }

    fn count(&self, call: &str, outcome: Result<(), Code>) {
        let key = match outcome {
            Ok(()) => format!("{call} OK"),
            Err(code) => format!("{call} {code:?}"),
        };
        *self.outcomes.lock().unwrap().entry(key).or_default() += 1;
    }

    /// How many operations are stored.
    async fn stored(&self) -> usize {
        let mut client = self.client.clone();
        let (mut count, mut token) = (0, String::new());
        loop {
            let page = client
                .list_operations(pb::ListOperationsRequest {
                    page_size: 1000,
                    page_token: token,
                    ..Default::default()
                })
                .await
                .expect("list")
                .into_inner();
            count += page.operations.len();
            if page.next_page_token.is_empty() {
                return count;
            }
            token = page.next_page_token;
        }
    }

    fn submit(&self, request: pb::SubmitOperationRequest) -> Result<(), TestCaseError> {
        self.runtime.block_on(async {
            let before = self.stored().await;
            let mut client = self.client.clone();
            let answer = client.submit_operation(request.clone()).await;
            let after = self.stored().await;
            self.count(
                "submit",
                answer.as_ref().map(|_| ()).map_err(tonic::Status::code),
            );
            match answer {
                Ok(response) => {
                    let response = response.into_inner();
                    let operation = response.operation.expect("an operation");
                    prop_assert_eq!(&operation.op_id, &request.op_id);
                    let stored_before = self.accepted.lock().unwrap().get(&request.op_id).cloned();
                    if response.replayed {
                        prop_assert_eq!(
                            stored_before.as_ref(),
                            Some(&operation.intent_fingerprint),
                            "a replay of an op_id this run never had accepted"
                        );
                        prop_assert_eq!(after, before);
                    } else {
                        prop_assert!(stored_before.is_none(), "{} accepted twice", request.op_id);
                        prop_assert_eq!(after, before + 1, "an accepted submit stores one");
                        self.accepted
                            .lock()
                            .unwrap()
                            .insert(request.op_id.clone(), operation.intent_fingerprint.clone());
                    }
                    // The same request again is the same operation, and stores nothing.
                    let again = client
                        .submit_operation(request.clone())
                        .await
                        .map_err(|s| TestCaseError::fail(format!("resubmit refused: {s:?}")))?
                        .into_inner();
                    prop_assert!(again.replayed);
                    prop_assert_eq!(
                        again.operation.map(|o| o.intent_fingerprint),
                        Some(operation.intent_fingerprint)
                    );
                    prop_assert_eq!(self.stored().await, after);
                }
                Err(status) if status.code() == Code::AlreadyExists => {
                    prop_assert!(
                        self.accepted.lock().unwrap().contains_key(&request.op_id),
                        "ALREADY_EXISTS for an op_id never accepted: {status:?}"
                    );
                    prop_assert_eq!(after, before, "a conflicting submit stored something");
                }
                // What the signer would refuse (a Solana message needing another key's
                // signature), refused before anything is stored.
                Err(status) if status.code() == Code::PermissionDenied => {
                    prop_assert_eq!(
                        status.get_details_error_info().map(|i| i.reason),
                        Some("POLICY_DENIED".to_owned()),
                        "{:?}",
                        status
                    );
                    prop_assert_eq!(after, before, "a denied submit stored something");
                }
                Err(status) => {
                    check_refusal(&status)?;
                    prop_assert_eq!(after, before, "a refused submit stored something");
                }
            }
            Ok(())
        })
    }

    /// Get, Watch, Cancel and the audit trail of `op_id`: found, NOT_FOUND, or refused.
    fn by_op_id(&self, op_id: String) -> Result<(), TestCaseError> {
        self.runtime.block_on(async {
            let known = self.accepted.lock().unwrap().contains_key(&op_id);
            let expect = |what: &str, status: Option<tonic::Status>| -> Result<(), TestCaseError> {
                self.count(what, status.as_ref().map_or(Ok(()), |s| Err(s.code())));
                match status {
                    None => prop_assert!(
                        known,
                        "{what} of {op_id:?} found an operation never accepted"
                    ),
                    Some(s) if s.code() == Code::NotFound => {
                        prop_assert!(!known, "{what}: NOT_FOUND for an accepted op_id")
                    }
                    // A cancel of an operation already settled or cancelled.
                    Some(s) if s.code() == Code::FailedPrecondition && known => {}
                    Some(s) => check_refusal(&s)?,
                }
                Ok(())
            };
            let mut client = self.client.clone();
            let get = client
                .get_operation(pb::GetOperationRequest {
                    op_id: op_id.clone(),
                })
                .await;
            expect("get", get.err())?;
            let watch = client
                .watch_operation(pb::WatchOperationRequest {
                    op_id: op_id.clone(),
                })
                .await;
            let first = match watch {
                Ok(stream) => {
                    let mut stream = stream.into_inner();
                    tokio::time::timeout(Duration::from_secs(10), stream.message())
                        .await
                        .map_err(|_| TestCaseError::fail("a watch sent nothing in 10 s"))?
                        .err()
                }
                Err(status) => Some(status),
            };
            expect("watch", first)?;
            let audit = self
                .operator
                .clone()
                .get_audit_trail(GetAuditTrailRequest {
                    op_id: op_id.clone(),
                })
                .await;
            expect("audit trail", audit.err())?;
            let cancel = client
                .cancel_operation(pb::CancelOperationRequest {
                    op_id: op_id.clone(),
                })
                .await;
            expect("cancel", cancel.err())?;
            Ok(())
        })
    }

    fn list(&self, request: pb::ListOperationsRequest) -> Result<(), TestCaseError> {
        self.runtime.block_on(async {
            let answer = self.client.clone().list_operations(request.clone()).await;
            self.count(
                "list",
                answer.as_ref().map(|_| ()).map_err(tonic::Status::code),
            );
            match answer {
                Ok(page) => {
                    let page = page.into_inner();
                    let size = match request.page_size {
                        0 => 100,
                        n => n as usize,
                    };
                    prop_assert!(page.operations.len() <= size);
                }
                Err(status) => check_refusal(&status)?,
            }
            Ok(())
        })
    }

    /// `bytes` as the request message of `method`; unary or server streaming.
    fn raw(&self, method: &'static str, bytes: Vec<u8>) -> Result<(), TestCaseError> {
        self.runtime.block_on(async {
            let mut grpc = tonic::client::Grpc::new(self.channel.clone());
            grpc.ready().await.expect("channel ready");
            let path = tonic::codegen::http::uri::PathAndQuery::from_static(method);
            let status = if method.ends_with("WatchOperation") {
                match grpc
                    .server_streaming(tonic::Request::new(bytes), path, RawCodec)
                    .await
                {
                    Ok(stream) => {
                        tokio::time::timeout(Duration::from_secs(10), stream.into_inner().message())
                            .await
                            .map_err(|_| TestCaseError::fail("a watch sent nothing in 10 s"))?
                            .err()
                    }
                    Err(status) => Some(status),
                }
            } else {
                grpc.unary(tonic::Request::new(bytes), path, RawCodec)
                    .await
                    .err()
            };
            self.count(
                &format!("bytes to {}", method.rsplit('/').next().unwrap_or(method)),
                status.as_ref().map_or(Ok(()), |s| Err(s.code())),
            );
            if let Some(status) = status {
                prop_assert!(
                    !is_service_fault(status.code()),
                    "{method}: random bytes answered {status:?}"
                );
                if matches!(status.code(), Code::InvalidArgument | Code::OutOfRange) {
                    check_refusal(&status)?;
                }
            }
            Ok(())
        })
    }
}

/// Sends and receives message bytes as they are.
#[derive(Debug, Clone, Copy)]
struct RawCodec;

impl tonic::codec::Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawCodec;
    type Decoder = RawCodec;
    fn encoder(&mut self) -> Self {
        RawCodec
    }
    fn decoder(&mut self) -> Self {
        RawCodec
    }
}

impl tonic::codec::Encoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn encode(
        &mut self,
        item: Vec<u8>,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        use prost::bytes::BufMut;
        dst.put_slice(&item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Vec<u8>>, tonic::Status> {
        use prost::bytes::Buf;
        let mut out = vec![0; src.remaining()];
        src.copy_to_slice(&mut out);
        Ok(Some(out))
    }
}

fn ok_or_panic(
    result: Result<(), proptest::test_runner::TestError<impl std::fmt::Debug>>,
    api: &Api,
) {
    if let Err(error) = result {
        panic!("{error}\n--- gateway log ---\n{}", api.gateway.log());
    }
}

#[test]
fn generated_requests_to_every_rpc_are_answered_by_the_contract_and_store_nothing_refused() {
    // Unoptimized, proptest's nested strategies need more than a test thread's 2 MiB stack.
    std::thread::Builder::new()
        .stack_size(64 * 1024 * 1024)
        .spawn(fuzz_every_rpc)
        .unwrap()
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
}

fn fuzz_every_rpc() {
    let api = Api::start();

    for request in corpus() {
        if let Err(error) = api.submit(request.clone()) {
            panic!("corpus case {:.80}: {error}", request.op_id);
        }
    }

    let submits = (op_id(), intent())
        .prop_map(|(op_id, intent)| pb::SubmitOperationRequest { op_id, intent });
    ok_or_panic(runner().run(&submits, |request| api.submit(request)), &api);

    // Op_ids drawn like the submits', and the ones accepted above.
    let accepted: Vec<String> = api.accepted.lock().unwrap().keys().cloned().collect();
    let known = proptest::sample::select(accepted);
    let op_ids = prop_oneof![op_id(), known];
    ok_or_panic(runner().run(&op_ids, |op_id| api.by_op_id(op_id)), &api);

    let lists = (
        prop_oneof![
            4 => Just(String::new()),
            4 => Just("eip155:31337".to_owned()),
            4 => Just("solana:localnet".to_owned()),
            1 => text()
        ],
        prop_oneof![8 => Just(String::new()), 1 => evm_address(), 1 => pubkey()],
        prop_oneof![8 => 0i32..7, 1 => any::<i32>()],
        prop_oneof![8 => 0u32..1_001, 1 => any::<u32>()],
        prop_oneof![8 => Just(String::new()), 1 => "[0-9a-f]{0,64}", 1 => text()],
    )
        .prop_map(
            |(chain, account, state, page_size, page_token)| pb::ListOperationsRequest {
                chain,
                account,
                state,
                page_size,
                page_token,
            },
        );
    ok_or_panic(runner().run(&lists, |request| api.list(request)), &api);

    let methods = proptest::sample::select(vec![
        "/sigcast.v1.OperationService/SubmitOperation",
        "/sigcast.v1.OperationService/GetOperation",
        "/sigcast.v1.OperationService/WatchOperation",
        "/sigcast.v1.OperationService/ListOperations",
        "/sigcast.v1.OperationService/CancelOperation",
        "/sigcast.operator.v1.OperatorService/GetAuditTrail",
    ]);
    ok_or_panic(
        runner().run(&(methods, bytes(600)), |(method, bytes)| {
            api.raw(method, bytes)
        }),
        &api,
    );

    // Submits as encoded, then damaged: a few bytes overwritten, maybe cut short. Most still
    // parse as protobuf, with a string no longer UTF-8, a length past the end, a field of
    // another wire type.
    let damaged = (
        (op_id(), intent()),
        proptest::collection::vec((any::<proptest::sample::Index>(), any::<u8>()), 1..4),
        proptest::option::of(any::<proptest::sample::Index>()),
    )
        .prop_map(|((op_id, intent), writes, cut)| {
            let mut bytes =
                prost::Message::encode_to_vec(&pb::SubmitOperationRequest { op_id, intent });
            if !bytes.is_empty() {
                for (at, value) in writes {
                    let at = at.index(bytes.len());
                    bytes[at] = value;
                }
                if let Some(cut) = cut {
                    bytes.truncate(cut.index(bytes.len()));
                }
            }
            bytes
        });
    ok_or_panic(
        runner().run(&damaged, |bytes| {
            api.raw("/sigcast.v1.OperationService/SubmitOperation", bytes)
        }),
        &api,
    );

    for (outcome, n) in api.outcomes.lock().unwrap().iter() {
        println!("{n:>6}  {outcome}");
    }
    let log = api.gateway.log();
    assert!(!log.contains("panicked"), "the gateway panicked:\n{log}");
    let mut api = api;
    assert!(
        api.gateway.service.is_running(),
        "the gateway exited:\n{log}"
    );
}
