//! The peer API and the lease addresses it is reached at, as an attacker on
//! the cluster network or with write access to Redis would try them: a
//! forwarded command meets the public API's checks (oversized and
//! ill-formed ids, a missing request) and its idempotency fingerprint is
//! computed by the holder, so it matches the gateway's; a lease naming an
//! address outside `peer_addresses` is neither dialled nor handed to the
//! gateway as a routing hint.

mod common;

use common::*;
use hyapp_api::room::room_peer_client::RoomPeerClient;
use hyapp_api::room::{PeerCommand, peer_command};
use room_service::redis::Redis;

fn forwarded(request: peer_command::Request) -> PeerCommand {
    PeerCommand {
        request: Some(request),
        origin_node: "node-x".into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_command_meets_the_public_checks_and_its_fingerprint_is_recomputed() {
    let mut harness = Harness::start().await;
    let room = testkit::unique("room-");
    room_with_members(&mut harness.client, &room, "owner", &[]).await;
    let mut peer = RoomPeerClient::connect(format!("http://{}", harness.grpc_addr))
        .await
        .unwrap();
    for (user_id, why) in [
        ("u".repeat(5_000), "at most"),
        ("a/b".to_owned(), "'/'"),
        (String::new(), "must not be empty"),
    ] {
        let request = join(&room, &user_id);
        let command_id = request.meta.as_ref().unwrap().command_id.clone();
        let refused = peer
            .execute(forwarded(peer_command::Request::JoinRoom(request)))
            .await
            .unwrap_err();
        assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused}");
        assert!(
            refused.message().starts_with("user_id") && refused.message().contains(why),
            "{}",
            refused.message()
        );
        assert_eq!(
            harness
                .count("room_command_log", "command_id", &command_id)
                .await,
            0
        );
    }
    let empty = peer
        .execute(PeerCommand {
            request: None,
            origin_node: "node-x".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(empty.code(), tonic::Code::InvalidArgument, "{empty}");

    // A join forwarded by a peer, then the same request from the gateway:
    // one command, answered as a replay, since both sides fingerprint the
    // request itself.
    let request = join(&room, "alice");
    let by_peer = peer
        .execute(forwarded(peer_command::Request::JoinRoom(request.clone())))
        .await
        .unwrap()
        .into_inner();
    let by_gateway = harness
        .client
        .join_room(request.clone())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(by_gateway.room_version, by_peer.room_version);
    // The same id with another request is refused, wherever it enters.
    let mut changed = request;
    changed.user_id = "mallory".into();
    let refused = peer
        .execute(forwarded(peer_command::Request::JoinRoom(changed)))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::AlreadyExists, "{refused}");
    harness.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_naming_an_address_outside_peer_addresses_is_not_dialled() {
    let mut harness = Harness::start().await;
    let room = testkit::unique("room-");
    // Someone who can write Redis claims the room for a live "instance"
    // whose address is theirs.
    let forger = Redis::connect(
        &harness.config.redis,
        "forged-node",
        "http://203.0.113.9:7101",
    )
    .await
    .unwrap();
    forger
        .renew_liveness(harness.config.redis.liveness_ttl.as_std())
        .await
        .unwrap();
    forger.acquire_lease(&room).await.unwrap();
    let before = harness.metric_or_zero("room_forwarded_total").await;

    let refused = harness
        .client
        .create_room(create(&room, "owner"))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused}");
    let details = tonic_types::StatusExt::get_details_error_info(&refused).expect("ErrorInfo");
    assert_eq!(details.reason, "ROOM_OWNED_ELSEWHERE");
    assert!(
        !details.metadata.contains_key("holder_address"),
        "the forged address reached the gateway: {:?}",
        details.metadata
    );
    let text = metrics_text(&harness.http).await;
    assert!(
        text.contains("room_forwarded_total{outcome=\"address_refused\"} 1"),
        "{text}"
    );
    assert_eq!(harness.metric("room_forwarded_total").await, before + 1.0);
    assert_eq!(harness.count("rooms", "room_id", &room).await, 0);
    forger.drop_liveness().await.unwrap();
    harness.stop().await;
}
