//! sigcast's gRPC contract as Rust: the code generated from `proto/` (the single definition of
//! every message) and the mapping between those messages and the domain.
//!
//! Nothing here hand-copies a message. Parsing a request into domain values is where every
//! field is validated, so every service rejects the same input with the same field names.

pub mod codec;
mod convert;
mod unix;

pub use convert::{
    FieldViolation, fits_a_packet, intent_from_proto, intent_to_proto, new_operation, parse_op_id,
    state_from_proto, state_to_proto,
};

/// Generated code of the `sigcast.v1` and `sigcast.signer.v1` packages.
#[allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic)]
pub mod sigcast {
    /// The public API.
    pub mod v1 {
        tonic::include_proto!("sigcast.v1");
    }
    /// The signer's internal API.
    pub mod signer {
        /// Version 1.
        pub mod v1 {
            tonic::include_proto!("sigcast.signer.v1");
        }
    }
    /// The operator API (audit trail), served by the gateway.
    pub mod operator {
        /// Version 1.
        pub mod v1 {
            tonic::include_proto!("sigcast.operator.v1");
        }
    }
}

pub use sigcast::v1 as pb;
pub use unix::{unix_channel, unix_channel_lazy};

/// The encoded descriptors of every file in `proto/`, for gRPC server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/sigcast_descriptor.bin"));
