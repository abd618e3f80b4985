//! The operator API: read-only answers about any operation, from the store — the audit
//! trail names callers and certificates, so only the identities in `operators` are answered
//! (or, on a development gateway that authenticates nobody and lists no operator, anyone).

use crate::error::Error;
use crate::grpc::Gateway;
use prost::Message;
use sigcast_proto::parse_op_id;
use sigcast_proto::sigcast::operator::v1 as api;
use sigcast_proto::sigcast::signer::v1::AuditRecord;
use sigcast_store::{accounts, operations};
use sigcast_telemetry::trace::{RpcSide, traced};
use tonic::{Request, Response, Status};

#[tonic::async_trait]
impl api::operator_service_server::OperatorService for Gateway {
    async fn get_audit_trail(
        &self,
        request: Request<api::GetAuditTrailRequest>,
    ) -> Result<Response<api::GetAuditTrailResponse>, Status> {
        let caller = self.caller_of(&request);
        self.identified(&caller)?;
        if !self.is_operator(&caller) {
            tracing::info!(?caller, "operator API refused");
            return Err(Error::CallerDenied {
                rule: format!("caller {caller:?} is not in operators"),
            }
            .into());
        }
        let op_id = parse_op_id("op_id", &request.get_ref().op_id)
            .map_err(Error::invalid)?
            .to_string();
        let span = crate::grpc::server_span(
            api::operator_service_server::SERVICE_NAME,
            "GetAuditTrail",
            &op_id,
        );
        traced(span, RpcSide::Server, async {
            let root = self.store().root().clone();
            let id = op_id.clone();
            let (exists, raw) = self
                .store()
                .read_async(move |tx| {
                    let exists = operations::get(tx, &root, &id)?.is_some();
                    Ok((exists, accounts::audit_records(tx, &root, &id)?))
                })
                .await
                .map_err(|e| Error::from(e).status_for(&op_id))?;
            if !exists {
                return Err(Error::NotFound(op_id).into());
            }
            let records = raw
                .iter()
                .map(|bytes| AuditRecord::decode(bytes.as_slice()))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| {
                    Status::internal(format!("an audit record of {op_id} does not decode: {e}"))
                })?;
            Ok(Response::new(api::GetAuditTrailResponse { records }))
        })
        .await
    }
}
