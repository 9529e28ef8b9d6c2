//! Generated gRPC contracts: the `room/v1` gateway API, the `wallet/v1` contract of
//! the wallet service and the `activity/v1` direct entry. The event envelope
//! itself lives in `outbox-schema` and is referenced, not duplicated.

/// `hyapp.room.v1`: the gateway-facing room API.
pub mod room {
    tonic::include_proto!("hyapp.room.v1");
}

/// `hyapp.wallet.v1`: the wallet service contract (owned by the wallet team).
pub mod wallet {
    tonic::include_proto!("hyapp.wallet.v1");
}

/// `hyapp.activity.v1`: the activity service's direct entry.
pub mod activity {
    tonic::include_proto!("hyapp.activity.v1");
}

/// Encoded `FileDescriptorSet` of every contract, for gRPC server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/hyapp_descriptor.bin"));
