//! The wire types of `proto/portcullis/v1` (from `portcullis-client`) and the daemon's
//! server stubs over them (build.rs), with the encoded descriptor set for reflection.

#![allow(missing_docs, clippy::all)]
pub use portcullis_client::pb::*;
tonic::include_proto!("portcullis.v1");

/// Encoded file descriptor set, for gRPC reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("portcullis_descriptor");
