//! Compiles `proto/portcullis/v1/*.proto` with tonic-prost-build: the messages and the
//! client stubs (the daemon compiles its server stubs over these messages). protoc comes
//! from the `protoc-bin-vendored` crate, so no system install is needed.
//!
//! `proto` in this crate is a link to the repository's `proto/`, so the packaged crate
//! (`cargo package` copies what the link points at) carries the contract it is built from.

use std::path::PathBuf;

// prost-build finds protoc through PROTOC, and setting a variable is unsafe (edition 2024):
// the workspace denies `unsafe_code` everywhere else.
#[allow(unsafe_code)]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // SAFETY: build scripts are single-threaded; nothing else reads the environment concurrently.
    unsafe { std::env::set_var("PROTOC", protoc) };
    let protos = proto_files()?;
    tonic_prost_build::configure()
        .build_server(false)
        // Smaller per-call buffers than tonic's 8 KiB (src/codec.rs).
        .codec_path("crate::codec::SmallBufferCodec")
        .compile_protos(&protos, &[PathBuf::from("proto")])?;
    println!("cargo:rerun-if-changed=proto");
    Ok(())
}

/// Every `.proto` file of the contract, sorted.
fn proto_files() -> std::io::Result<Vec<PathBuf>> {
    let mut protos: Vec<PathBuf> = std::fs::read_dir("proto/portcullis/v1")?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    protos.retain(|p| p.extension().is_some_and(|e| e == "proto"));
    protos.sort();
    Ok(protos)
}
