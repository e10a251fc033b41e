//! Compiles `proto/idmint/v1/idmint.proto` with protox (a protobuf compiler in Rust, so the
//! build needs no `protoc`) and generates the messages, the server trait and the client with
//! tonic-prost-build into `OUT_DIR`, and writes the compiled descriptors there
//! (`idmint_descriptor.bin`) for the server's gRPC reflection.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/idmint/v1/idmint.proto";
    println!("cargo:rerun-if-changed={proto}");
    let descriptors = protox::compile([proto], ["proto"])?;
    let out_dir = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out_dir.join("idmint_descriptor.bin"),
        prost::Message::encode_to_vec(&descriptors),
    )?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(descriptors)?;
    Ok(())
}
