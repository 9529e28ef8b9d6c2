//! Generates tonic clients/servers for the gateway, wallet and activity contracts
//! with a pure-Rust protobuf compiler (no `protoc` needed), and writes the
//! descriptor set that gRPC server reflection serves.

use prost::Message as _;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto_root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../proto");
    let files = [
        "room/v1/room_service.proto",
        "wallet/v1/wallet.proto",
        "activity/v1/activity.proto",
        "room/v1/outbox_event.proto",
    ];
    for file in files {
        println!("cargo:rerun-if-changed={proto_root}/{file}");
    }
    let descriptors = protox::compile(files, [proto_root])?;
    let out_dir = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out_dir.join("hyapp_descriptor.bin"),
        descriptors.encode_to_vec(),
    )?;
    tonic_prost_build::configure()
        // The envelope is owned by outbox-schema; reuse its type instead of generating a twin.
        .extern_path(".hyapp.room.event.v1", "::outbox_schema::pb")
        .compile_fds(descriptors)?;
    Ok(())
}
