//! The protobuf codec of every sigcast service: prost's encoding, but a request that is not a
//! valid encoding of its message is INVALID_ARGUMENT naming the field prost stopped at, not
//! INTERNAL.
//!
//! gRPC's status table files "error parsing request proto" under INTERNAL, which tonic
//! follows. For a service that callers in any language reach, often through hand-built
//! requests (grpcurl, a proxy), the fault is the caller's: INTERNAL would tell them to retry and
//! page our operators for their bytes. The generated clients use this codec too: there a
//! response that does not decode (a broken server, or a proxy) stays INTERNAL, as prost has it,
//! so that a caller never reads "fix your request" for a call that may have taken effect.

use std::marker::PhantomData;
use tonic::Status;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};
use tonic_types::{ErrorDetails, StatusExt};

/// prost's codec with caller-facing decode errors (see the module documentation).
#[derive(Debug, Clone)]
pub struct ProtoCodec<E, D>(PhantomData<(E, D)>);

impl<E, D> Default for ProtoCodec<E, D> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<E, D> Codec for ProtoCodec<E, D>
where
    E: prost::Message + Send + 'static,
    D: prost::Message + Default + Send + 'static,
{
    type Encode = E;
    type Decode = D;
    type Encoder = ProstEncoder<E>;
    type Decoder = ProtoDecoder<D>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<E, D>::default().encoder()
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProtoDecoder(ProstCodec::<E, D>::default().decoder())
    }
}

/// prost's decoder, mapping its errors with [`invalid_encoding`].
#[derive(Debug, Clone)]
pub struct ProtoDecoder<D>(ProstDecoder<D>);

impl<D: prost::Message + Default> Decoder for ProtoDecoder<D> {
    type Item = D;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<D>, Status> {
        D::decode(buf)
            .map(Some)
            .map_err(|error| decode_error(short_type_name::<D>(), &error))
    }

    fn buffer_settings(&self) -> BufferSettings {
        self.0.buffer_settings()
    }
}

/// The status for bytes that do not decode as `message`: the caller's fault for a request,
/// the server's (or a proxy's) for a response.
fn decode_error(message: &str, error: &prost::DecodeError) -> Status {
    // Every request message of the contract is named `…Request` (buf lint's rule).
    if message.ends_with("Request") {
        invalid_encoding(message, error)
    } else {
        Status::internal(format!("a {message} that does not decode: {error}"))
    }
}

fn short_type_name<D>() -> &'static str {
    let full = std::any::type_name::<D>();
    full.rsplit("::").next().unwrap_or(full)
}

/// INVALID_ARGUMENT for bytes that are not a `message`, with a BadRequest naming the field
/// path prost was decoding (empty when the fault is in the framing of the message itself).
pub fn invalid_encoding(message: &str, error: &prost::DecodeError) -> Status {
    let described = error.to_string();
    let field = field_path(&described);
    let text = match field.as_str() {
        "" => format!("not a valid protobuf encoding of {message}: {described}"),
        field => format!("{field}: not a valid protobuf encoding of {message}: {described}"),
    };
    let mut details = ErrorDetails::new();
    details.add_bad_request_violation(field, described);
    Status::with_error_details(tonic::Code::InvalidArgument, text, details)
}

/// The field path in prost's description of a decode error. prost writes the fields it was
/// inside, innermost first, as `Message.field: ` before the description:
/// `failed to decode Protobuf message: SolanaInstruction.program_id: Intent.solana_instructions:
/// ...: invalid string value: data is not UTF-8 encoded`.
fn field_path(described: &str) -> String {
    let rest = described
        .strip_prefix("failed to decode Protobuf message: ")
        .unwrap_or(described);
    let word = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    let frames: Vec<(&str, &str)> = rest
        .split(": ")
        .map_while(|segment| {
            let (message, field) = segment.split_once('.')?;
            (word(message) && word(field)).then_some((message, field))
        })
        .collect();
    // Outermost first. prost names a oneof by its own name (`Intent.kind`); the contract's
    // rules name the member, which here is always the snake case of the inner message.
    let mut path = Vec::new();
    for (depth, (_, field)) in frames.iter().enumerate().rev() {
        match depth.checked_sub(1).map(|inner| frames[inner].0) {
            Some(inner) if *field == "kind" => path.push(snake_case(inner)),
            // The oneof itself, before its member was known: the field that holds it.
            None if *field == "kind" => {}
            _ => path.push((*field).to_owned()),
        }
    }
    path.join(".")
}

fn snake_case(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb;
    use prost::Message;

    fn decode<D: Message + Default + std::fmt::Debug>(bytes: &[u8]) -> Status {
        let error = D::decode(bytes).expect_err("not a valid encoding");
        decode_error(short_type_name::<D>(), &error)
    }

    #[test]
    fn a_string_that_is_not_utf8_is_invalid_argument_naming_its_field() {
        // Field 1 (op_id), length-delimited, 2 bytes that are not UTF-8.
        let status = decode::<pb::SubmitOperationRequest>(&[0x0a, 0x02, 0xff, 0xfe]);
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(
            status.message().contains("SubmitOperationRequest"),
            "{status:?}"
        );
        let violations = status.get_details_bad_request().unwrap().field_violations;
        assert_eq!(violations[0].field, "op_id", "{violations:?}");
    }

    #[test]
    fn a_nested_field_is_named_by_its_path() {
        let instruction = [0x0a, 0x01, 0xff]; // SolanaInstruction.program_id, not UTF-8
        let mut instructions = vec![0x1a, instruction.len() as u8];
        instructions.extend(instruction);
        let mut intent = vec![0x22, instructions.len() as u8];
        intent.extend(instructions);
        let mut request = vec![0x12, intent.len() as u8];
        request.extend(intent);
        let status = decode::<pb::SubmitOperationRequest>(&request);
        let violations = status.get_details_bad_request().unwrap().field_violations;
        assert_eq!(
            violations[0].field, "intent.solana_instructions.instructions.program_id",
            "{violations:?}"
        );
    }

    #[test]
    fn a_oneof_cut_short_is_named_by_the_field_that_holds_it() {
        // Intent with its `solana_transfer` member's length past the end.
        let status = decode::<pb::SubmitOperationRequest>(&[0x12, 0x02, 0x1a, 0x05]);
        let violations = status.get_details_bad_request().unwrap().field_violations;
        assert_eq!(violations[0].field, "intent", "{violations:?}");
        assert!(status.message().starts_with("intent: "), "{status:?}");
    }

    #[test]
    fn a_response_that_does_not_decode_stays_internal() {
        let error = pb::GetOperationResponse::decode(&[0x0a, 0x05, b'a'][..]).unwrap_err();
        let status = decode_error(short_type_name::<pb::GetOperationResponse>(), &error);
        assert_eq!(status.code(), tonic::Code::Internal, "{status:?}");
        let error = pb::GetOperationRequest::decode(&[0x0a, 0x05, b'a'][..]).unwrap_err();
        let status = decode_error(short_type_name::<pb::GetOperationRequest>(), &error);
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    }

    #[test]
    fn bytes_that_are_no_message_name_no_field() {
        // Field 1 with wire type 7, which does not exist.
        let status = decode::<pb::GetOperationRequest>(&[0x0f]);
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        let violations = status.get_details_bad_request().unwrap().field_violations;
        assert_eq!(violations[0].field, "", "{violations:?}");
    }
}
