//! Generates the Rust types of `proto/room/v1/outbox_event.proto` with a pure-Rust
//! protobuf compiler, so building needs no `protoc` on the machine.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto_root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../proto");
    let file = "room/v1/outbox_event.proto";
    println!("cargo:rerun-if-changed={proto_root}/{file}");
    let descriptors = protox::compile([file], [proto_root])?;
    // Serialize (never Deserialize: decoding goes through the validated
    // `decode_*`) lets operators read a stored event as JSON.
    prost_build::Config::new()
        .type_attribute(".", "#[derive(serde::Serialize)]")
        .compile_fds(descriptors)?;
    Ok(())
}
