//! Generates the Rust types of `proto/room/v1/outbox_event.proto` with a pure-Rust
//! protobuf compiler, so building needs no `protoc` on the machine.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto_root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../proto");
    let file = "room/v1/outbox_event.proto";
    println!("cargo:rerun-if-changed={proto_root}/{file}");
    let descriptors = protox::compile([file], [proto_root])?;
    prost_build::Config::new().compile_fds(descriptors)?;
    Ok(())
}
