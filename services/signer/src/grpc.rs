//! The signer's internal gRPC API.

use crate::sign::{Replacement, Signer};
use sigcast_proto::sigcast::signer::v1 as api;
use tonic::{Request, Response, Status};

#[tonic::async_trait]
impl api::signer_service_server::SignerService for Signer {
    async fn sign_operation(
        &self,
        request: Request<api::SignOperationRequest>,
    ) -> Result<Response<api::SignOperationResponse>, Status> {
        let request = request.into_inner();
        let op_id = sigcast_proto::parse_op_id("op_id", &request.op_id)
            .map_err(|v| Status::invalid_argument(v.to_string()))?;
        let signed = match api::SignPurpose::try_from(request.purpose) {
            Ok(api::SignPurpose::Initial | api::SignPurpose::Unspecified) => {
                self.sign(op_id.as_str()).await?
            }
            Ok(api::SignPurpose::FeeBump) => {
                self.sign_replacement(
                    op_id.as_str(),
                    Replacement::FeeBump,
                    request.replaces_attempt,
                )
                .await?
            }
            Ok(api::SignPurpose::Cancel) => {
                self.sign_replacement(
                    op_id.as_str(),
                    Replacement::Cancel,
                    request.replaces_attempt,
                )
                .await?
            }
            Ok(api::SignPurpose::GapFill) => {
                self.sign_replacement(
                    op_id.as_str(),
                    Replacement::GapFill,
                    request.replaces_attempt,
                )
                .await?
            }
            Ok(api::SignPurpose::Resign) => {
                return Err(Status::failed_precondition(
                    "purpose SIGN_PURPOSE_RESIGN: this version never re-signs at a new nonce",
                ));
            }
            Err(_) => {
                return Err(Status::invalid_argument(format!(
                    "purpose: unknown value {}",
                    request.purpose
                )));
            }
        };
        Ok(Response::new(api::SignOperationResponse {
            tx_id: signed.tx_id,
            attempt: signed.attempt,
            already_signed: signed.already_signed,
        }))
    }

    async fn list_keys(
        &self,
        _: Request<api::ListKeysRequest>,
    ) -> Result<Response<api::ListKeysResponse>, Status> {
        let keys = self
            .keys()
            .accounts()
            .into_iter()
            .map(|address| api::SignerKey {
                key_id: address.to_string(),
                algorithm: "secp256k1".into(),
                address: address.to_string(),
                backend: "keystore".into(),
            })
            .collect();
        Ok(Response::new(api::ListKeysResponse { keys }))
    }
}
