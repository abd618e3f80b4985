//! The broadcaster's side of the signer API. The signer signs recorded operations by op_id
//! only; the broadcaster asks for a first signature, a replacement or a re-sign, and learns the
//! attempt under which the signer stored the payload.

use crate::config::SignerTlsConfig;
use sigcast_proto::sigcast::signer::v1::signer_service_client::SignerServiceClient;
use sigcast_proto::sigcast::signer::v1::{
    SignOperationRequest, SignOperationsItem, SignOperationsRequest, SignPurpose,
    sign_operations_result, signer_service_server,
};
use sigcast_telemetry::trace::{self, RpcSide};
use std::time::Duration;
use tonic::transport::Channel;
use tonic_types::StatusExt;

/// Why the signer did not sign.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// It refused the operation itself (no key for its account, or the key's policy): it will
    /// never sign it, so it was never applied.
    Operation(String),
    /// The operation waits for a durable-nonce account of its key: not a failure.
    WaitingForNonceAccount,
    /// A replacement would exceed the chain's fee cap: the earlier attempt stands.
    AtFeeCap,
    /// Anything else (unreachable, busy, a refusal of the caller): tried again later.
    Failed(tonic::Status),
}

/// A client of the signer.
#[derive(Clone)]
pub(crate) struct SignerClient {
    client: SignerServiceClient<Channel>,
    /// The signer as a span's `server.address` and `server.port`: its host and port, or its
    /// Unix socket's path.
    address: String,
    port: Option<u16>,
}

impl SignerClient {
    /// A lazy client of the signer at `url`: `unix:/path/to.sock` (the signer checks our uid),
    /// `https://` with our client certificate (mutual TLS), or `http://` (development).
    pub(crate) fn new(url: &str, tls: Option<&SignerTlsConfig>) -> anyhow::Result<Self> {
        let timeout = Duration::from_secs(30);
        let (address, port) = match url.strip_prefix("unix:") {
            Some(path) => (path.to_owned(), None),
            None => {
                let uri: tonic::codegen::http::Uri = url.parse()?;
                let host = uri.host().unwrap_or_default();
                (host.trim_matches(['[', ']']).to_owned(), uri.port_u16())
            }
        };
        let channel = if let Some(path) = url.strip_prefix("unix:") {
            sigcast_proto::unix_channel_lazy(path, timeout)?
        } else {
            let mut endpoint =
                tonic::transport::Endpoint::from_shared(url.to_owned())?.timeout(timeout);
            if let Some(tls) = tls {
                let read = |path: &std::path::Path| {
                    std::fs::read(path)
                        .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))
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
            endpoint.connect_lazy()
        };
        Ok(Self {
            client: SignerServiceClient::new(channel),
            address,
            port,
        })
    }

    /// Whether the signer answers (its key list: cheap, and through the same authentication
    /// as a signature).
    pub(crate) async fn answers(&self) -> bool {
        self.client
            .clone()
            .list_keys(sigcast_proto::sigcast::signer::v1::ListKeysRequest {})
            .await
            .is_ok()
    }

    /// Asks for a signature of `purpose`; for anything but the first, `replaces_attempt` is the
    /// newest attempt we saw, so a retried request never signs twice, and a replacement is
    /// priced for at least `min_base_fee` (the base fee of the head it was decided at). Returns
    /// the newest attempt afterwards (the one signed, or the one already there).
    pub(crate) async fn sign(
        &self,
        op_id: &str,
        purpose: SignPurpose,
        replaces_attempt: u32,
        min_base_fee: Option<u128>,
    ) -> Result<u32, Refusal> {
        let request = SignOperationRequest {
            op_id: op_id.to_owned(),
            purpose: purpose.into(),
            replaces_attempt,
            min_base_fee_per_gas: min_base_fee.map(|fee| fee.to_string()).unwrap_or_default(),
        };
        // A client span under the current (stage) span; the signer's span hangs under it.
        let span = trace::grpc_span(
            RpcSide::Client,
            signer_service_server::SERVICE_NAME,
            "SignOperation",
            op_id,
            Some((&self.address, self.port)),
        );
        span.record("sigcast.purpose", purpose.as_str_name());
        let answer = trace::traced(span, RpcSide::Client, async {
            self.client.clone().sign_operation(traced(request)).await
        })
        .await;
        match answer {
            Ok(response) => Ok(response.into_inner().attempt),
            Err(status) => Err(classify(status)),
        }
    }

    /// First signatures of many operations in one call (the signer commits them in one
    /// transaction), each with its span: the answer for each, in the order given. The call
    /// appears in each operation's own trace, as a client span under the one given.
    pub(crate) async fn sign_first(
        &self,
        ops: &[(String, tracing::Span)],
    ) -> Vec<Result<u32, Refusal>> {
        let purpose = SignPurpose::Initial;
        let spans: Vec<tracing::Span> = ops
            .iter()
            .map(|(op_id, parent)| {
                parent.in_scope(|| {
                    let span = trace::grpc_span(
                        RpcSide::Client,
                        signer_service_server::SERVICE_NAME,
                        "SignOperations",
                        op_id,
                        Some((&self.address, self.port)),
                    );
                    span.record("sigcast.purpose", purpose.as_str_name());
                    span
                })
            })
            .collect();
        let items = ops
            .iter()
            .zip(&spans)
            .map(|((op_id, _), span)| SignOperationsItem {
                request: Some(SignOperationRequest {
                    op_id: op_id.clone(),
                    purpose: purpose.into(),
                    replaces_attempt: 0,
                    min_base_fee_per_gas: String::new(),
                }),
                traceparent: trace::traceparent(span).unwrap_or_default(),
            })
            .collect();
        let answers: Vec<Result<u32, tonic::Status>> = match self
            .client
            .clone()
            .sign_operations(SignOperationsRequest { items })
            .await
        {
            Ok(response) => {
                let results = response.into_inner().results;
                let answered = results.len();
                let mut results = results.into_iter();
                ops.iter()
                    .map(|(op_id, _)| match results.next() {
                        Some(result) if answered == ops.len() && result.op_id == *op_id => {
                            match result.result {
                                Some(sign_operations_result::Result::Signed(signed)) => {
                                    Ok(signed.attempt)
                                }
                                Some(sign_operations_result::Result::Error(error)) => {
                                    Err(tonic::Status::with_details(
                                        tonic::Code::from(error.code),
                                        error.message,
                                        error.details.into(),
                                    ))
                                }
                                None => Err(tonic::Status::internal(
                                    "the signer answered an operation with nothing",
                                )),
                            }
                        }
                        // Answers that do not match what was asked are no answers at all.
                        _ => Err(tonic::Status::internal(format!(
                            "the signer answered {answered} results for {} operations, \
                             not in the order asked",
                            ops.len()
                        ))),
                    })
                    .collect()
            }
            Err(status) => ops.iter().map(|_| Err(status.clone())).collect(),
        };
        if answers
            .first()
            .is_some_and(|a| matches!(a, Err(s) if s.code() == tonic::Code::Unimplemented))
        {
            // A signer from before SignOperations (a rolling upgrade that reached the
            // broadcasters first): asked one operation at a time, as it was before.
            for (span, answer) in spans.into_iter().zip(answers) {
                let _ = trace::traced(span, RpcSide::Client, std::future::ready(answer)).await;
            }
            return futures::future::join_all(ops.iter().map(|(op_id, parent)| {
                use tracing::Instrument;
                self.sign(op_id, purpose, 0, None)
                    .instrument(parent.clone())
            }))
            .await;
        }
        let mut results = Vec::with_capacity(answers.len());
        for (span, answer) in spans.into_iter().zip(answers) {
            let answer = trace::traced(span, RpcSide::Client, std::future::ready(answer)).await;
            results.push(answer.map_err(classify));
        }
        results
    }
}

fn classify(status: tonic::Status) -> Refusal {
    let reason = status
        .get_details_error_info()
        .filter(|info| info.domain == "sigcast-signer")
        .map(|info| info.reason);
    match (status.code(), reason.as_deref()) {
        (tonic::Code::PermissionDenied, Some("NO_KEY" | "POLICY_DENIED" | "TOO_LARGE")) => {
            Refusal::Operation(status.message().to_owned())
        }
        (tonic::Code::ResourceExhausted, Some("NONCE_ACCOUNTS_BUSY")) => {
            Refusal::WaitingForNonceAccount
        }
        (tonic::Code::FailedPrecondition, Some("FEE_CAP")) => Refusal::AtFeeCap,
        _ => Refusal::Failed(status),
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

#[cfg(test)]
mod tests {
    use super::*;
    use sigcast_proto::sigcast::signer::v1::{
        ListKeysRequest, ListKeysResponse, SignOperationResponse, SignOperationsResponse,
        signer_service_server::{SignerService, SignerServiceServer},
    };
    use std::collections::HashMap;
    use tonic_types::ErrorDetails;

    /// A signer from before SignOperations: it signs one operation per call.
    struct OlderSigner;

    #[tonic::async_trait]
    impl SignerService for OlderSigner {
        async fn sign_operation(
            &self,
            request: tonic::Request<SignOperationRequest>,
        ) -> Result<tonic::Response<SignOperationResponse>, tonic::Status> {
            Ok(tonic::Response::new(SignOperationResponse {
                tx_id: format!("signed {}", request.into_inner().op_id),
                attempt: 1,
                already_signed: false,
            }))
        }

        async fn sign_operations(
            &self,
            _: tonic::Request<SignOperationsRequest>,
        ) -> Result<tonic::Response<SignOperationsResponse>, tonic::Status> {
            Err(tonic::Status::unimplemented(
                "unknown method SignOperations",
            ))
        }

        async fn list_keys(
            &self,
            _: tonic::Request<ListKeysRequest>,
        ) -> Result<tonic::Response<ListKeysResponse>, tonic::Status> {
            Ok(tonic::Response::new(ListKeysResponse { keys: vec![] }))
        }
    }

    #[tokio::test]
    async fn an_older_signer_is_asked_one_operation_at_a_time() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(SignerServiceServer::new(OlderSigner))
                .serve_with_incoming(sigcast_runtime::accept::incoming(listener, "test signer")),
        );
        let client = SignerClient::new(&format!("http://{addr}"), None).unwrap();
        let ops: Vec<(String, tracing::Span)> = ["a", "b"]
            .iter()
            .map(|id| (id.to_string(), tracing::Span::none()))
            .collect();
        let answers = client.sign_first(&ops).await;
        assert_eq!(answers.len(), 2);
        for answer in answers {
            assert!(matches!(answer, Ok(1)), "{answer:?}");
        }
    }

    #[test]
    fn only_a_refusal_of_the_operation_rejects_it() {
        let refusal = |code, reason: &str| {
            let details = ErrorDetails::with_error_info(reason, "sigcast-signer", HashMap::new());
            tonic::Status::with_error_details(code, "refused", details)
        };
        let denied = tonic::Code::PermissionDenied;
        assert!(matches!(
            classify(refusal(denied, "POLICY_DENIED")),
            Refusal::Operation(_)
        ));
        assert!(matches!(
            classify(refusal(denied, "NO_KEY")),
            Refusal::Operation(_)
        ));
        assert!(matches!(
            classify(refusal(denied, "TOO_LARGE")),
            Refusal::Operation(_)
        ));
        // The signer refusing *us* (an unlisted certificate) must never reject work.
        assert!(matches!(
            classify(tonic::Status::permission_denied(
                "client certificate not allowed"
            )),
            Refusal::Failed(_)
        ));
        assert!(matches!(
            classify(refusal(denied, "SOMETHING_ELSE")),
            Refusal::Failed(_)
        ));
        assert!(matches!(
            classify(refusal(
                tonic::Code::ResourceExhausted,
                "NONCE_ACCOUNTS_BUSY"
            )),
            Refusal::WaitingForNonceAccount
        ));
        assert!(matches!(
            classify(refusal(tonic::Code::FailedPrecondition, "FEE_CAP")),
            Refusal::AtFeeCap
        ));
        assert!(matches!(
            classify(tonic::Status::unavailable("down")),
            Refusal::Failed(_)
        ));
    }
}
