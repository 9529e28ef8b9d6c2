//! room-service behind Redis Sentinel (`redis.url: redis-sentinel://…`)
//! through a failover: two instances on a private primary, replica and
//! three sentinels (`testkit::sentinel`) serve two rooms; the primary is
//! killed with -9 and the sentinels promote the replica; the same rooms
//! answer commands again (the gateway's retry with the same `command_id`
//! bridges the failover) through both instances.
//!
//! Replication is asynchronous, so a crash may lose the last writes; on
//! loopback the replica has every write within microseconds, so the test
//! makes the loss happen: before the kill, one room's lease, room-list
//! entry and presence are deleted on the replica alone. The promoted
//! server then holds nothing of that room, and what docs/design.md
//! promises is checked: the room is taken by the next instance that gets
//! a call for it (here not the one that still has it loaded), which
//! rebuilds it from MySQL; the old holder writes nothing as a stale holder
//! — its call is served by the new holder — and every acknowledged command
//! holds one room version, in order (the version compare-and-set and the
//! log's unique `(room_id, room_version)`); the room comes back into the
//! room list with its next heat change and a member's presence with the
//! next heartbeat (docs/design.md#presence: Redis holds hot state only).
//! The other room kept everything and carries on.

mod common;

use std::time::Duration;

use common::*;
use fred::prelude::*;
use hyapp_api::room::room_service_client::RoomServiceClient;
use hyapp_api::room::{CommandReply, HeartbeatRequest, JoinRoomRequest, ListRoomsRequest};
use room_service::redis::presence_member;
use testkit::sentinel::SentinelRedis;
use tonic::transport::Channel;

/// Turns a hang into a failure; when the servers fail over is up to them.
const GUARD: Duration = Duration::from_secs(60);

/// Sends `request` (the same `command_id` every time, as the gateway
/// retries) until it is acknowledged; the reply and the instance that
/// executed it.
async fn join_acknowledged(
    what: &str,
    client: &mut RoomServiceClient<Channel>,
    request: JoinRoomRequest,
) -> (CommandReply, String) {
    let deadline = tokio::time::Instant::now() + GUARD;
    loop {
        let status =
            match tokio::time::timeout_at(deadline, client.join_room(request.clone())).await {
                Ok(Ok(response)) => {
                    let served_by = served_by(&response);
                    return (response.into_inner(), served_by);
                }
                Ok(Err(status)) => status,
                Err(_) => panic!("{what}: no answer within {GUARD:?}"),
            };
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not acknowledged within {GUARD:?}, last {status}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A gift from `fan` to `owner`, retried like [`join_acknowledged`].
async fn gift_acknowledged(
    client: &mut RoomServiceClient<Channel>,
    room_id: &str,
) -> (CommandReply, String) {
    let request = gift(room_id, &testkit::unique("gift-"), "fan", "owner", 1, 5);
    let deadline = tokio::time::Instant::now() + GUARD;
    loop {
        let status =
            match tokio::time::timeout_at(deadline, client.send_gift(request.clone())).await {
                Ok(Ok(response)) => {
                    let served_by = served_by(&response);
                    return (response.into_inner(), served_by);
                }
                Ok(Err(status)) => status,
                Err(_) => panic!("gift in {room_id}: no answer within {GUARD:?}"),
            };
        assert!(
            tokio::time::Instant::now() < deadline,
            "gift in {room_id}: not acknowledged within {GUARD:?}, last {status}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Whether the replica holds the room's lease, room-list entry and the
/// fan's presence (under the key `prefix`).
async fn replica_has(redis: &SentinelRedis, prefix: &str, room: &str) -> bool {
    let member = presence_member(room, "fan");
    let lease = format!("{prefix}:room:lease:{room}");
    let list = format!("{prefix}:room:list:heat");
    let presence = format!("{prefix}:room:presence");
    redis.on_replica_only(&["EXISTS", &lease]).await == ["1"]
        && redis.on_replica_only(&["ZSCORE", &list, room]).await != [""]
        && redis.on_replica_only(&["ZSCORE", &presence, &member]).await != [""]
}

/// The room ids of the room list (ListRooms, on any instance) once it
/// lists `room`; the projection is written after the reply, best effort.
async fn listed_with(client: &mut RoomServiceClient<Channel>, room: &str) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + GUARD;
    loop {
        let answer = client.list_rooms(ListRoomsRequest { limit: 100 }).await;
        let rooms: Vec<String> = match &answer {
            Ok(reply) => reply
                .get_ref()
                .rooms
                .iter()
                .map(|entry| entry.room_id.clone())
                .collect(),
            Err(_) => Vec::new(), // Redis unreachable for now
        };
        if rooms.iter().any(|listed| listed == room) {
            return rooms;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{room} not in the room list within {GUARD:?}; last answer {answer:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A client of the Redis primary the sentinels name now, with the
/// services' timeouts and reconnects.
async fn sentinel_client(url: &str) -> Client {
    let keys = service_kit::redis::RedisKeys {
        url: "redis.url",
        tls_ca_file: "redis.tls_ca_file",
    };
    let config = service_kit::redis::client_config(keys, url, "").expect("a Sentinel URL");
    let client = service_kit::redis::client_builder(config, Duration::from_millis(500))
        .expect("builder")
        .build()
        .expect("client");
    tokio::time::timeout(GUARD, client.init())
        .await
        .expect("connect within the guard")
        .expect("connect through the sentinels");
    client
}

/// `(room_version, command_id)` of the room's logged commands, in order.
async fn logged_versions(harness: &Harness, room_id: &str) -> Vec<(u64, String)> {
    let rows: Vec<(u64, Vec<u8>)> = sqlx::query_as(
        "SELECT room_version, command_id FROM room_command_log WHERE room_id = ? \
         ORDER BY room_version",
    )
    .bind(room_id)
    .fetch_all(&harness.pool)
    .await
    .expect("read the command log");
    rows.into_iter()
        .map(|(version, id)| (version, String::from_utf8_lossy(&id).into_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rooms_answer_again_after_a_sentinel_failover_and_a_lost_lease_moves_safely() {
    let mut redis = SentinelRedis::start().await;
    let url = redis.url();
    let mut first = Harness::start_with(|config| config.redis.url = url.clone()).await;
    let second = first
        .second_node(|config| config.redis.url = url.clone())
        .await;
    let mut second_client = second.client.clone();
    let prefix = first.config.redis.key_prefix.clone();
    let kept = testkit::unique("room-kept-");
    let lost = testkit::unique("room-lost-");

    // Both rooms on the first instance, in the room list and with presence.
    for room in [&kept, &lost] {
        room_with_members(&mut first.client, room, "owner", &["fan"]).await;
        let (_, served_by) = gift_acknowledged(&mut first.client, room).await;
        assert_eq!(
            served_by, first.node_id,
            "{room} is held by the first instance"
        );
    }
    listed_with(&mut first.client, &kept).await;
    listed_with(&mut first.client, &lost).await;

    // Everything reached the replica; then the lost room's keys vanish there.
    let lease = |room: &str| format!("{prefix}:room:lease:{room}");
    let list_key = format!("{prefix}:room:list:heat");
    let presence_key = format!("{prefix}:room:presence");
    for room in [&kept, &lost] {
        assert!(
            eventually(GUARD, || replica_has(&redis, &prefix, room)).await,
            "{room}'s keys did not reach the replica within {GUARD:?}"
        );
    }
    let lost_members = [
        presence_member(&lost, "owner"),
        presence_member(&lost, "fan"),
    ];
    let lost_lease = lease(&lost);
    redis.on_replica_only(&["DEL", &lost_lease]).await;
    redis.on_replica_only(&["ZREM", &list_key, &lost]).await;
    for member in &lost_members {
        redis
            .on_replica_only(&["ZREM", &presence_key, member])
            .await;
    }

    redis.kill_primary();
    redis.await_failover().await;

    // The room that kept its keys: its holder serves it on.
    let (reply, _) = join_acknowledged(
        "a join in the kept room after the failover",
        &mut first.client,
        join(&kept, "after-failover"),
    )
    .await;
    assert_eq!(reply.room_version, 4, "create, join, gift, then this join");
    // The promoted server holds nothing of the lost room.
    let primary = sentinel_client(&redis.url()).await;
    let lease_now: Option<String> = primary.get(&lost_lease).await.expect("GET the lease");
    assert_eq!(
        lease_now, None,
        "the lost lease is gone from the promoted server"
    );
    let listed_after = listed_with(&mut second_client, &kept).await;
    assert!(
        !listed_after.contains(&lost),
        "the room list lost the lost room: {listed_after:?}"
    );

    // The second instance gets the next call for the lost room: the lease
    // is free, so it takes the room, rebuilt from MySQL.
    let newcomer = join(&lost, "newcomer");
    let newcomer_id = newcomer.meta.clone().expect("meta").command_id;
    let (taken, taker) = join_acknowledged(
        "a join in the lost room through the second instance",
        &mut second_client,
        newcomer,
    )
    .await;
    assert_eq!(taker, second.node_id, "the free lease went to the caller");
    assert_eq!(taken.room_version, 4, "rebuilt at the committed version");
    // The first instance still has the room loaded; its call is served by
    // the new holder, never committed by the stale one.
    let late = join(&lost, "late");
    let late_id = late.meta.clone().expect("meta").command_id;
    let (stale, served) = join_acknowledged(
        "a join in the lost room through the old holder",
        &mut first.client,
        late,
    )
    .await;
    assert_eq!(served, second.node_id, "the old holder did not write");
    assert_eq!(stale.room_version, 5);
    let holder: Option<String> = primary.get(&lost_lease).await.expect("GET the lease");
    assert!(
        holder.is_some_and(|value| value.starts_with(&format!("{} ", second.node_id))),
        "the lease names the new holder"
    );

    // Projections come back as the design says: the list with the next
    // heat change, presence with the next heartbeat.
    let (_, _) = gift_acknowledged(&mut first.client, &lost).await;
    listed_with(&mut first.client, &lost).await;
    let member = presence_member(&lost, "fan");
    let score: Option<f64> = primary
        .zscore(&presence_key, &member)
        .await
        .expect("ZSCORE");
    assert_eq!(score, None, "the fan's presence was lost with the primary");
    first
        .client
        .heartbeat(HeartbeatRequest {
            room_id: lost.clone(),
            user_id: "fan".into(),
        })
        .await
        .expect("heartbeat after the failover");
    let score: Option<f64> = primary
        .zscore(&presence_key, &member)
        .await
        .expect("ZSCORE");
    assert!(
        score.is_some(),
        "the heartbeat set the fan's presence again"
    );

    // Every acknowledged command holds one version, in order, with nothing
    // between them: no write of a stale holder got in.
    let versions = logged_versions(&first, &lost).await;
    let numbers: Vec<u64> = versions.iter().map(|(version, _)| *version).collect();
    assert_eq!(numbers, (1..=6).collect::<Vec<u64>>(), "{versions:?}");
    assert_eq!(
        versions[3].1, newcomer_id,
        "version 4 is the newcomer's join"
    );
    assert_eq!(versions[4].1, late_id, "version 5 is the late join");
    let snapshot = room_state(&mut second_client, &lost).await;
    assert_eq!(snapshot.version, 6);
    for member in ["owner", "fan", "newcomer", "late"] {
        assert!(
            snapshot.members.iter().any(|name| name == member),
            "{member} is in {:?}",
            snapshot.members
        );
    }
    let _ = primary.quit().await;
    second.stop().await;
    first.stop().await;
}
