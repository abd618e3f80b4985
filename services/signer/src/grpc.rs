//! The signer's internal gRPC API.

use crate::error::Error;
use crate::sign::{Replacement, Signer};
use sigcast_proto::sigcast::signer::v1 as api;
use sigcast_telemetry::metrics;
use sigcast_telemetry::trace::{self, RpcSide};
use tonic::{Request, Response, Status};
use tracing::Instrument;

/// Who is calling: the peer uid on a Unix socket (checked against the allow-list when the
/// connection was accepted); over mTLS the client certificate's identity (URI/DNS SAN, else
/// CN) and fingerprint; else the TCP peer address.
pub(crate) fn caller_identity<T>(request: &Request<T>) -> String {
    if let Some(uid) = request.extensions().get::<crate::auth::PeerUid>() {
        return format!("uid:{}", uid.0);
    }
    if let Some((fingerprint, identity)) = client_certificate(request) {
        return match identity {
            Some(identity) => format!("cert:{identity} sha256:{fingerprint}"),
            None => format!("cert:sha256:{fingerprint}"),
        };
    }
    request
        .remote_addr()
        .map_or_else(|| "unknown".to_owned(), |addr| format!("tcp:{addr}"))
}

/// The TLS client certificate's fingerprint and identity, over mTLS.
fn client_certificate<T>(request: &Request<T>) -> Option<(String, Option<String>)> {
    let cert = request.peer_certs()?.first()?.clone();
    Some((
        crate::auth::fingerprint(&cert),
        sigcast_runtime::identity::of_certificate(&cert),
    ))
}

impl Signer {
    /// Refuses a TLS caller whose certificate is not on the allow-lists (the TLS handshake has
    /// already refused callers without a certificate from the client CA).
    fn authorize<T>(&self, request: &Request<T>) -> Result<String, Status> {
        let caller = caller_identity(request);
        if let Some((fingerprint, identity)) = client_certificate(request)
            && !self.allowed_certificate(&fingerprint, identity.as_deref())
        {
            tracing::warn!(?caller, "refused a caller: client certificate not allowed");
            return Err(Status::permission_denied(format!(
                "client certificate {} is not allowed",
                identity.unwrap_or(fingerprint)
            )));
        }
        Ok(caller)
    }
}

#[tonic::async_trait]
impl api::signer_service_server::SignerService for Signer {
    async fn sign_operation(
        &self,
        request: Request<api::SignOperationRequest>,
    ) -> Result<Response<api::SignOperationResponse>, Status> {
        let traceparent = request
            .metadata()
            .get("traceparent")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let caller = self.authorize(&request).inspect_err(|_| {
            metrics::inc(
                &metrics::metrics().signer_refusals,
                &[("reason", crate::error::CALLER_NOT_ALLOWED)],
            );
        })?;
        let request = request.into_inner();
        let op_id = sigcast_proto::parse_op_id("op_id", &request.op_id)
            .map_err(|v| Status::invalid_argument(v.to_string()))?;
        let span = trace::grpc_span(
            RpcSide::Server,
            api::signer_service_server::SERVICE_NAME,
            "SignOperation",
            op_id.as_str(),
            None,
        );
        trace::attach_remote(&span, op_id.as_str(), traceparent.as_deref());
        let purpose = api::SignPurpose::try_from(request.purpose)
            .unwrap_or(api::SignPurpose::Unspecified)
            .as_str_name();
        span.record("sigcast.purpose", purpose);
        trace::traced(span.clone(), RpcSide::Server, async {
            self.sign_operation_traced(&span, op_id.as_str(), &request, &caller, purpose)
                .await
        })
        .await
    }
    async fn sign_operations(
        &self,
        request: Request<api::SignOperationsRequest>,
    ) -> Result<Response<api::SignOperationsResponse>, Status> {
        let caller = self.authorize(&request).inspect_err(|_| {
            metrics::inc(
                &metrics::metrics().signer_refusals,
                &[("reason", crate::error::CALLER_NOT_ALLOWED)],
            );
        })?;
        let items = checked_items(request.into_inner())?;
        // Each operation in its own trace: a server span per item, under the caller's span for
        // that operation, open from now until its answer.
        let spans: Vec<tracing::Span> = items
            .iter()
            .map(|(op_id, request, traceparent)| {
                let span = trace::grpc_span(
                    RpcSide::Server,
                    api::signer_service_server::SERVICE_NAME,
                    "SignOperations",
                    op_id,
                    None,
                );
                trace::attach_remote(&span, op_id, traceparent.as_deref());
                span.record("sigcast.purpose", purpose_name(request.purpose));
                span
            })
            .collect();
        // First signatures together; replacements and re-signs each as SignOperation signs
        // them, side by side.
        let initial: Vec<usize> = items
            .iter()
            .enumerate()
            .filter(|(_, (_, request, _))| is_initial(request.purpose))
            .map(|(index, _)| index)
            .collect();
        // What each operation's signing does, in a span under its call's span.
        let work: Vec<tracing::Span> = items
            .iter()
            .zip(&spans)
            .map(|((op_id, _, _), span)| trace::work_span(span, "Signature", op_id))
            .collect();
        let asked: Vec<(String, tracing::Span)> = initial
            .iter()
            .map(|&index| (items[index].0.clone(), work[index].clone()))
            .collect();
        let others = futures::future::join_all(
            items
                .iter()
                .zip(&work)
                .enumerate()
                .filter(|(_, ((_, request, _), _))| !is_initial(request.purpose))
                .map(|(index, ((op_id, request, _), work))| {
                    let caller = &caller;
                    let sign = self.sign_request(op_id, request, caller);
                    async move { (index, sign.instrument(work.clone()).await) }
                }),
        );
        let (batch, others) = tokio::join!(self.sign_batch(&asked, &caller), others);
        // Each signature's span ends with it, before the answers.
        drop((asked, work));
        let mut answers: Vec<Option<crate::error::Result<crate::sign::Signed>>> =
            items.iter().map(|_| None).collect();
        for (index, result) in initial.into_iter().zip(batch) {
            answers[index] = Some(result);
        }
        for (index, result) in others {
            answers[index] = Some(result);
        }
        let mut results = Vec::with_capacity(items.len());
        for (((op_id, request, _), span), answer) in items.iter().zip(spans).zip(answers) {
            let answer = answer.unwrap_or_else(|| Err(Error::UnknownPurpose(request.purpose)));
            let purpose = purpose_name(request.purpose);
            let result = trace::traced(span.clone(), RpcSide::Server, async {
                count(&span, purpose, &answer);
                answer.map_err(Status::from)
            })
            .await;
            results.push(api::SignOperationsResult {
                op_id: op_id.clone(),
                result: Some(match result {
                    Ok(signed) => {
                        api::sign_operations_result::Result::Signed(api::SignOperationResponse {
                            tx_id: signed.tx_id,
                            attempt: signed.attempt,
                            already_signed: signed.already_signed,
                        })
                    }
                    Err(status) => api::sign_operations_result::Result::Error(api::SignError {
                        code: status.code() as i32,
                        message: status.message().to_owned(),
                        details: status.details().to_vec(),
                    }),
                }),
            });
        }
        Ok(Response::new(api::SignOperationsResponse { results }))
    }

    async fn list_keys(
        &self,
        request: Request<api::ListKeysRequest>,
    ) -> Result<Response<api::ListKeysResponse>, Status> {
        self.authorize(&request)?;
        let secp256k1 =
            self.keys()
                .entries()
                .into_iter()
                .map(|(address, backend)| api::SignerKey {
                    key_id: address.to_string(),
                    algorithm: "secp256k1".into(),
                    address: address.to_string(),
                    backend: backend.into(),
                });
        let ed25519 = self
            .keys()
            .ed25519_entries()
            .into_iter()
            .map(|(account, backend)| api::SignerKey {
                key_id: account.clone(),
                algorithm: "ed25519".into(),
                address: account,
                backend: backend.into(),
            });
        let keys = secp256k1.chain(ed25519).collect();
        Ok(Response::new(api::ListKeysResponse { keys }))
    }
}

impl Signer {
    /// SignOperation inside its span: signs, counts, answers.
    async fn sign_operation_traced(
        &self,
        span: &tracing::Span,
        op_id: &str,
        request: &api::SignOperationRequest,
        caller: &str,
        purpose: &'static str,
    ) -> Result<Response<api::SignOperationResponse>, Status> {
        let result = self
            .sign_request(op_id, request, caller)
            .instrument(trace::work_span(span, "Signature", op_id))
            .await;
        count(span, purpose, &result);
        let signed = result?;
        Ok(Response::new(api::SignOperationResponse {
            tx_id: signed.tx_id,
            attempt: signed.attempt,
            already_signed: signed.already_signed,
        }))
    }

    /// Signs what `request` asks for.
    pub(crate) async fn sign_request(
        &self,
        op_id: &str,
        request: &api::SignOperationRequest,
        caller: &str,
    ) -> Result<crate::sign::Signed, Error> {
        let min_base_fee = min_base_fee(request).map_err(|rule| Error::InvalidField {
            field: "min_base_fee_per_gas",
            rule,
        })?;
        let replacement = |kind| {
            self.sign_replacement(op_id, kind, request.replaces_attempt, min_base_fee, caller)
        };
        Ok(match api::SignPurpose::try_from(request.purpose) {
            Ok(api::SignPurpose::Initial | api::SignPurpose::Unspecified) => {
                self.sign(op_id, caller).await?
            }
            Ok(api::SignPurpose::FeeBump) => replacement(Replacement::FeeBump).await?,
            Ok(api::SignPurpose::Cancel) => replacement(Replacement::Cancel).await?,
            Ok(api::SignPurpose::GapFill) => replacement(Replacement::GapFill).await?,
            Ok(api::SignPurpose::Resign) => {
                self.resign_solana(op_id, request.replaces_attempt, caller)
                    .await?
            }
            Err(_) => return Err(Error::UnknownPurpose(request.purpose)),
        })
    }
}

/// The items of a SignOperations call, checked before anything is signed: at most
/// [`MAX_BATCH`], each with a well-formed op_id that no other item names, a known purpose and
/// a well-formed `min_base_fee_per_gas`.
fn checked_items(
    request: api::SignOperationsRequest,
) -> Result<Vec<(String, api::SignOperationRequest, Option<String>)>, Status> {
    if request.items.len() > MAX_BATCH {
        return Err(Status::invalid_argument(format!(
            "items: at most {MAX_BATCH} per call, got {}",
            request.items.len()
        )));
    }
    let mut seen = std::collections::HashSet::new();
    let mut items = Vec::with_capacity(request.items.len());
    for (i, item) in request.items.into_iter().enumerate() {
        let request = item
            .request
            .ok_or_else(|| Status::invalid_argument(format!("items[{i}].request: required")))?;
        let op_id =
            sigcast_proto::parse_op_id(&format!("items[{i}].request.op_id"), &request.op_id)
                .map_err(|v| Status::invalid_argument(v.to_string()))?;
        if api::SignPurpose::try_from(request.purpose).is_err() {
            return Err(Status::invalid_argument(format!(
                "items[{i}].request.purpose: unknown value {}",
                request.purpose
            )));
        }
        if let Err(rule) = min_base_fee(&request) {
            return Err(Status::invalid_argument(format!(
                "items[{i}].request.min_base_fee_per_gas: {rule}"
            )));
        }
        if !seen.insert(op_id.as_str().to_owned()) {
            return Err(Status::invalid_argument(format!(
                "items[{i}].request.op_id: {:?} is asked for twice",
                op_id.as_str()
            )));
        }
        let traceparent = Some(item.traceparent).filter(|t| !t.is_empty());
        items.push((op_id.as_str().to_owned(), request, traceparent));
    }
    Ok(items)
}

/// The base fee a replacement is priced for at least, if the request gives one; checked on
/// every request, whatever its purpose.
fn min_base_fee(request: &api::SignOperationRequest) -> Result<Option<u128>, String> {
    let text = request.min_base_fee_per_gas.as_str();
    // Quoted at most 80 characters long: the value is the caller's.
    let quoted: String = text.chars().take(80).collect();
    match text {
        "" => Ok(None),
        _ if !text.bytes().all(|b| b.is_ascii_digit()) => Err(format!(
            "{quoted:?} is not a base fee per gas in wei as decimal digits (empty: none)"
        )),
        _ => text
            .parse()
            .map(Some)
            .map_err(|_| format!("{quoted:?} is over the largest base fee, 2^128 - 1 wei")),
    }
}

/// The most operations one SignOperations call may carry (its items share one transaction).
const MAX_BATCH: usize = 256;

fn is_initial(purpose: i32) -> bool {
    matches!(
        api::SignPurpose::try_from(purpose),
        Ok(api::SignPurpose::Initial | api::SignPurpose::Unspecified)
    )
}

fn purpose_name(purpose: i32) -> &'static str {
    api::SignPurpose::try_from(purpose)
        .unwrap_or(api::SignPurpose::Unspecified)
        .as_str_name()
}

/// Counts one answer to a signature asked for (signatures made, operations SIGNED, refusals)
/// and records its attempt on its span.
fn count(
    span: &tracing::Span,
    purpose: &'static str,
    result: &crate::error::Result<crate::sign::Signed>,
) {
    match result {
        Ok(signed) => {
            span.record("sigcast.attempt", signed.attempt);
            if !signed.already_signed {
                metrics::inc(&metrics::metrics().signatures, &[("purpose", purpose)]);
                if signed.attempt == 1 {
                    metrics::inc(&metrics::metrics().transitions, &[("state", "SIGNED")]);
                }
            }
        }
        Err(error) => {
            if let Some(reason) = error.refusal_reason() {
                metrics::inc(&metrics::metrics().signer_refusals, &[("reason", reason)]);
            }
        }
    }
}
