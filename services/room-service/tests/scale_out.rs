//! Several room-service instances over one MySQL and Redis: any instance
//! takes any call and forwards it once to the holder of the room's lease,
//! with the caller's metadata; a graceful stop hands rooms over at once; a
//! holder that vanished is taken over when its lease expires (fast takeover
//! off; `failover.rs` has it on); and made-up
//! ids and the loaded-room cap leave nothing resident.

mod common;

use std::time::Duration;

use common::*;
use fred::prelude::*;
use hyapp_api::room::{GetRoomRequest, HeartbeatRequest};
use room_service::forward::FORWARDED_BY;

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

async fn redis() -> fred::clients::Client {
    redis_client(&testkit::redis_url()).await
}

fn lease_key(harness: &Harness, room_id: &str) -> String {
    format!("{}:room:lease:{room_id}", harness.config.redis.key_prefix)
}

#[tokio::test]
async fn any_instance_serves_any_room_through_its_holder() {
    let mut node_a = Harness::start().await;
    let mut node_b = node_a.second_node(|_| {}).await;
    let room = testkit::unique("room-");
    room_with_members(&mut node_a.client, &room, "owner", &["alice"]).await;

    // A command sent to B runs on A, which holds the lease, and carries the
    // caller's trace context into the outbox.
    let mut request = tonic::Request::new(join(&room, "bob"));
    request
        .metadata_mut()
        .insert("traceparent", TRACEPARENT.parse().unwrap());
    request.set_timeout(Duration::from_secs(10));
    let joined = node_b.client.join_room(request).await.unwrap();
    assert_eq!(served_by(&joined), node_a.node_id);
    assert_eq!(joined.get_ref().room_version, 3);
    let traceparents: Vec<String> = sqlx::query_scalar(
        "SELECT traceparent FROM room_outbox WHERE room_id = ? AND event_type = 'RoomUserJoined' ORDER BY id DESC LIMIT 1",
    )
    .bind(&room)
    .fetch_all(&node_a.pool)
    .await
    .unwrap();
    assert_eq!(traceparents.len(), 1);
    assert_eq!(
        traceparents[0][..35],
        TRACEPARENT[..35],
        "the holder's row continues the caller's trace: {traceparents:?}"
    );

    // Reads go to the holder as well, so B's caller reads its own write.
    let read = node_b
        .client
        .get_room(GetRoomRequest {
            room_id: room.clone(),
        })
        .await
        .unwrap();
    assert_eq!(served_by(&read), node_a.node_id);
    assert!(read.get_ref().members.contains(&"bob".to_owned()));
    let beat = node_b
        .client
        .heartbeat(HeartbeatRequest {
            room_id: room.clone(),
            user_id: "bob".into(),
        })
        .await
        .unwrap();
    assert_eq!(served_by(&beat), node_a.node_id);

    // Validation refuses on the receiving instance, before any forwarding...
    let error = node_b
        .client
        .join_room(join(&room, "bad id"))
        .await
        .unwrap_err();
    assert_eq!(error.code(), tonic::Code::InvalidArgument);
    // ...and a rule's refusal comes back as the holder sent it.
    let twice = node_b
        .client
        .join_room(join(&room, "alice"))
        .await
        .unwrap_err();
    assert_eq!(twice.code(), tonic::Code::FailedPrecondition);
    assert_eq!(
        twice.metadata().get("x-error-reason").unwrap(),
        "already_member"
    );

    // At most one hop: a call already forwarded is not forwarded again.
    let mut hop = tonic::Request::new(join(&room, "carol"));
    hop.metadata_mut()
        .insert(FORWARDED_BY, "node-elsewhere".parse().unwrap());
    let error = node_b.client.join_room(hop).await.unwrap_err();
    assert_eq!(error.code(), tonic::Code::Unavailable);
    assert_eq!(
        error.metadata().get("x-room-owner").unwrap(),
        node_a.node_id.as_str()
    );

    // Joins of bob and alice, the read and the heartbeat.
    assert_eq!(node_b.metric("room_forwarded_total").await, 4.0);
    assert_eq!(node_b.metric("room_cells_loaded").await, 0.0);
    // Counted once, where the commands ran.
    assert_eq!(node_b.metric_or_zero("room_commands_total").await, 0.0);
    let snapshot = room_state(&mut node_a.client, &room).await;
    assert_eq!(snapshot.version, 3);
    node_b.stop().await;
    node_a.stop().await;
}

#[tokio::test]
async fn a_graceful_stop_hands_the_room_over_at_once() {
    let mut node_a = Harness::start().await;
    let mut node_b = node_a.second_node(|_| {}).await;
    let room = testkit::unique("room-");
    room_with_members(&mut node_a.client, &room, "owner", &["alice"]).await;
    let redis = redis().await;
    let key = lease_key(&node_a, &room);
    let holder: Option<String> = redis.get(&key).await.unwrap();
    assert!(holder.unwrap().starts_with(&node_a.node_id));

    let (report, _db, _wallet) = node_a.stop().await;
    assert!(report.steps.contains(&"cells_released"));
    // Released on the way out, not left to expire.
    let holder: Option<String> = redis.get(&key).await.unwrap();
    assert_eq!(holder, None);
    let joined = node_b.client.join_room(join(&room, "bob")).await.unwrap();
    assert_eq!(served_by(&joined), node_b.node_id);
    assert_eq!(joined.get_ref().room_version, 3);
    node_b.stop().await;
}

#[tokio::test]
async fn with_takeover_off_a_vanished_holder_is_taken_over_when_its_lease_expires() {
    let mut node_a = Harness::start().await;
    let room = testkit::unique("room-");
    room_with_members(&mut node_a.client, &room, "owner", &["alice"]).await;
    let key = lease_key(&node_a, &room);
    let (_, db, wallet) = node_a.stop().await;
    let mut config = test_config(&db, &wallet);
    // Fast takeover off (as while an older release still runs): a holder
    // is gone only when its lease runs out (tests/failover.rs has it on).
    config.redis.liveness_ttl = service_kit::duration::ConfigDuration::from_millis(0);
    let mut node_b = Harness::start_on(db, wallet, config).await;

    // A holder killed with -9 leaves its lease behind, naming an address
    // nobody answers on, until the lease runs out.
    let redis = redis().await;
    let () = redis
        .set(
            &key,
            "node-killed http://127.0.0.1:1",
            Some(Expiration::PX(1_500)),
            None,
            false,
        )
        .await
        .unwrap();
    let error = node_b
        .client
        .join_room(join(&room, "bob"))
        .await
        .unwrap_err();
    assert_eq!(
        error.code(),
        tonic::Code::Unavailable,
        "{}",
        error.message()
    );
    assert_eq!(error.metadata().get("x-room-owner").unwrap(), "node-killed");
    assert_eq!(
        node_b
            .metric("room_forwarded_total{outcome=\"holder_unreachable\"}")
            .await,
        1.0
    );

    let client = node_b.client.clone();
    let request_room = room.clone();
    let taken_over = eventually(Duration::from_secs(15), move || {
        let mut client = client.clone();
        let room = request_room.clone();
        async move { client.join_room(join(&room, "bob")).await.is_ok() }
    })
    .await;
    assert!(
        taken_over,
        "the room was not taken over after the lease expired"
    );
    let snapshot = room_state(&mut node_b.client, &room).await;
    assert_eq!(snapshot.version, 3);
    assert!(snapshot.members.contains(&"bob".to_owned()));
    node_b.stop().await;
}

#[tokio::test]
async fn made_up_room_ids_leave_no_actor_and_no_lease() {
    let mut harness = Harness::start().await;
    let redis = redis().await;
    let read_room = testkit::unique("nowhere-");
    let error = harness
        .client
        .get_room(GetRoomRequest {
            room_id: read_room.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(error.code(), tonic::Code::NotFound);
    let error = harness
        .client
        .heartbeat(HeartbeatRequest {
            room_id: read_room.clone(),
            user_id: "u1".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(error.code(), tonic::Code::NotFound);
    // A read never took the lease or started an actor.
    let exists: i64 = redis.exists(lease_key(&harness, &read_room)).await.unwrap();
    assert_eq!(exists, 0);
    assert_eq!(harness.metric("room_cells_loaded").await, 0.0);

    // A command for a room that does not exist unloads right after it.
    let write_room = testkit::unique("nowhere-");
    let error = harness
        .client
        .join_room(join(&write_room, "u1"))
        .await
        .unwrap_err();
    assert_eq!(error.code(), tonic::Code::NotFound);
    let http = harness.http.clone();
    let key = lease_key(&harness, &write_room);
    let unloaded = eventually(Duration::from_secs(10), move || {
        let http = http.clone();
        let key = key.clone();
        let redis = redis.clone();
        async move {
            let lease: i64 = redis.exists(key).await.unwrap();
            lease == 0 && metric(&http, "room_cells_loaded").await == 0.0
        }
    })
    .await;
    assert!(unloaded, "the vacant room stayed loaded");
    let rooms = harness.count("rooms", "room_id", &write_room).await;
    assert_eq!(rooms, 0);

    // The same id can still be created afterwards.
    harness
        .client
        .create_room(create(&write_room, "owner"))
        .await
        .unwrap();
    harness.stop().await;
}

#[tokio::test]
async fn the_loaded_room_cap_evicts_idle_rooms_and_refuses_past_it() {
    let mut evicting = Harness::start_with(|config| {
        config.room.max_loaded_rooms = 2;
        config.room.evict_idle_after = service_kit::duration::ConfigDuration::from_millis(0);
    })
    .await;
    let rooms: Vec<String> = (0..3).map(|_| testkit::unique("room-")).collect();
    for room in &rooms {
        evicting
            .client
            .create_room(create(room, "owner"))
            .await
            .unwrap();
    }
    assert_eq!(evicting.metric("room_cells_evicted_total").await, 1.0);
    for room in &rooms {
        assert_eq!(room_state(&mut evicting.client, room).await.version, 1);
    }
    assert!(evicting.metric("room_cells_loaded").await <= 2.0);
    evicting.stop().await;

    let mut capped = Harness::start_with(|config| {
        config.room.max_loaded_rooms = 1;
        config.room.evict_idle_after = service_kit::duration::ConfigDuration::from_secs(3600);
    })
    .await;
    let first = testkit::unique("room-");
    capped
        .client
        .create_room(create(&first, "owner"))
        .await
        .unwrap();
    let second = testkit::unique("room-");
    let error = capped
        .client
        .create_room(create(&second, "owner"))
        .await
        .unwrap_err();
    assert_eq!(error.code(), tonic::Code::ResourceExhausted);
    assert_eq!(
        error.metadata().get("x-error-reason").unwrap(),
        "too_many_loaded_rooms"
    );
    assert_eq!(capped.metric("room_cells_refused_total").await, 1.0);
    assert_eq!(capped.count("rooms", "room_id", &second).await, 0);
    // The loaded room keeps working.
    capped.client.join_room(join(&first, "u1")).await.unwrap();
    capped.stop().await;
}
