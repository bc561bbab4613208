//! Compiles envd's proto files with protox (pure Rust, no system `protoc`), then generates prost
//! messages, tonic client/server code and pbjson proto3-JSON serde impls.

use std::{env, path::PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?);
    // The proto files live at the workspace root; a packaged crate carries its own copy.
    let local = manifest.join("proto");
    let proto_root = if local.join("process/process.proto").exists() {
        local
    } else {
        manifest.join("../../proto")
    };
    let files = [
        proto_root.join("process/process.proto"),
        proto_root.join("filesystem/filesystem.proto"),
    ];
    for file in &files {
        println!("cargo:rerun-if-changed={}", file.display());
    }

    let descriptors = protox::compile(&files, [&proto_root])?;
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    let descriptor_path = out_dir.join("envd_descriptor.bin");
    std::fs::write(
        &descriptor_path,
        prost::Message::encode_to_vec(&descriptors),
    )?;

    tonic_prost_build::configure()
        // envd's `process.Process/Connect` RPC would clash with tonic's `ProcessClient::connect`
        // transport constructor; clients are built from a channel instead.
        .build_transport(false)
        .file_descriptor_set_path(&descriptor_path)
        .skip_protoc_run()
        // `bytes` fields are `bytes::Bytes`: output chunks travel from the daemon's pipe read
        // to the socket, and from the client's receive buffer to callbacks, without a copy.
        .bytes(".")
        .compile_well_known_types(true)
        .extern_path(".google.protobuf", "::pbjson_types")
        .compile_fds(descriptors.clone())?;

    pbjson_build::Builder::new()
        .register_descriptors(&std::fs::read(&descriptor_path)?)?
        .ignore_unknown_fields()
        .build(&[".process", ".filesystem"])?;
    Ok(())
}
