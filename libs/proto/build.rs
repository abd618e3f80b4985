//! Generates the Rust code of `proto/` (the one definition of every message) and the
//! descriptor set that gRPC server reflection serves.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Read at run time, not compile time: a build script binary may be reused from a shared
    // target dir by a clone at another path.
    let root = std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    let files = [
        root.join("sigcast/v1/operation.proto"),
        root.join("sigcast/signer/v1/signer.proto"),
        root.join("sigcast/operator/v1/operator.proto"),
    ];
    // Rebuild when any contract file changes.
    println!("cargo:rerun-if-changed={}", root.display());
    for file in &files {
        println!("cargo:rerun-if-changed={}", file.display());
    }
    let descriptors =
        std::path::PathBuf::from(std::env::var("OUT_DIR")?).join("sigcast_descriptor.bin");
    tonic_prost_build::configure()
        .file_descriptor_set_path(&descriptors)
        // A request that is not a valid encoding is the caller's fault: see `codec`.
        .codec_path("crate::codec::ProtoCodec")
        .compile_protos(&files, &[root])?;
    Ok(())
}
