//! Compiles the server stubs of `proto/portcullis/v1/*.proto` with tonic-prost-build, over
//! the message types of the `portcullis-client` crate (one set of wire types for the
//! daemon and its gateways), and writes a file descriptor set for gRPC reflection.
//! protoc comes from the `protoc-bin-vendored` crate, so no system install is needed.

use std::path::PathBuf;

// prost-build finds protoc through PROTOC, and setting a variable is unsafe (edition 2024):
// the workspace denies `unsafe_code` everywhere else.
#[allow(unsafe_code)]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // SAFETY: build scripts are single-threaded; nothing else reads the environment concurrently.
    unsafe { std::env::set_var("PROTOC", protoc) };

    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    let mut protos: Vec<PathBuf> = std::fs::read_dir("proto/portcullis/v1")?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    protos.retain(|p| p.extension().is_some_and(|e| e == "proto"));
    protos.sort();

    tonic_prost_build::configure()
        .build_client(false)
        .extern_path(".portcullis.v1", "::portcullis_client::pb")
        // Smaller per-call buffers than tonic's 8 KiB, and a request that does not decode
        // answered INVALID_ARGUMENT naming the field (client/src/codec.rs).
        .codec_path("::portcullis_client::codec::RequestCodec")
        .file_descriptor_set_path(out_dir.join("portcullis_descriptor.bin"))
        .compile_protos(&protos, &[PathBuf::from("proto")])?;
    println!("cargo:rerun-if-changed=proto");
    Ok(())
}
