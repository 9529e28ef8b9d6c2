//! Write commands through the real gRPC server: the happy path, the outbox
//! rows each commit writes, idempotent replay, command_id conflicts, group
//! commit in a hot room, and the query endpoints.

mod common;

use common::*;
use hyapp_api::room::{ListRoomsRequest, TakeMicRequest};
use outbox_schema::pb::room_outbox_event::Payload;
use service_kit::db::IdText;
use sqlx::Row;

#[tokio::test]
async fn commands_commit_with_their_outbox_rows() {
    let mut harness = Harness::start().await;
    let room = testkit::unique("room-");
    let mut request = tonic::Request::new(create(&room, "owner"));
    let traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    request
        .metadata_mut()
        .insert("traceparent", traceparent.parse().unwrap());
    let created = harness
        .client
        .create_room(request)
        .await
        .unwrap()
        .into_inner();
    assert_eq!(created.room_version, 1);
    assert!(!created.replayed);
    assert_eq!(created.events.len(), 1);
    assert_eq!(created.events[0].event_type, "RoomCreated");

    let joined = harness
        .client
        .join_room(join(&room, "alice"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(joined.room_version, 2);
    let seated = harness
        .client
        .take_mic(TakeMicRequest {
            meta: meta(&testkit::unique("mic-")),
            room_id: room.clone(),
            user_id: "alice".into(),
            seat_index: 2,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(seated.room_version, 3);

    // One chain row per event, in seq order, with the envelope as payload.
    let rows = sqlx::query(
        "SELECT event_id, lane, shard, room_event_seq, event_type, topic, payload, traceparent, status \
         FROM room_outbox WHERE room_id = ? ORDER BY id",
    )
    .bind(&room)
    .fetch_all(&harness.pool)
    .await
    .unwrap();
    assert_eq!(rows.len(), 3);
    for (index, row) in rows.iter().enumerate() {
        assert_eq!(row.get::<u8, _>("lane"), outbox_schema::row::LANE_CHAIN);
        assert_eq!(row.get::<u16, _>("shard"), outbox_schema::shard_of(&room));
        assert_eq!(row.get::<u64, _>("room_event_seq"), index as u64 + 1);
        assert_eq!(
            row.get::<String, _>("topic"),
            outbox_schema::names::TOPIC_ROOM_OUTBOX
        );
        assert_eq!(row.get::<String, _>("status"), "pending");
        // An id column: byte-exact, so read through IdText (docs/design.md#identifiers).
        let event_id: String = row.get::<IdText, _>("event_id").into();
        assert_eq!(event_id.len(), 36);
        let envelope = outbox_schema::decode_envelope(&row.get::<Vec<u8>, _>("payload")).unwrap();
        assert_eq!(envelope.event_id, event_id);
        assert_eq!(envelope.room_id, room);
        assert_eq!(envelope.app_code, "hyapp");
    }
    // The row carries the command's span, in the caller's trace (with no
    // tracer provider installed the span is the caller's own).
    let stored = rows[0].get::<String, _>("traceparent");
    assert_eq!(stored.len(), traceparent.len(), "{stored}");
    assert_eq!(stored[..35], traceparent[..35], "{stored}");
    assert_eq!(
        String::from(rows[0].get::<IdText, _>("event_id")),
        created.events[0].event_id
    );
    let mic = outbox_schema::decode_envelope(&rows[2].get::<Vec<u8>, _>("payload")).unwrap();
    assert!(matches!(mic.payload, Some(Payload::RoomMicTaken(ref taken)) if taken.seat_index == 2));

    let meta_row = sqlx::query("SELECT version, status FROM rooms WHERE room_id = ?")
        .bind(&room)
        .fetch_one(&harness.pool)
        .await
        .unwrap();
    assert_eq!(meta_row.get::<u64, _>("version"), 3);
    assert_eq!(meta_row.get::<String, _>("status"), "open");
    assert_eq!(harness.count("room_command_log", "room_id", &room).await, 3);

    let snapshot = room_state(&mut harness.client, &room).await;
    assert_eq!(snapshot.version, 3);
    assert_eq!(
        snapshot.members,
        vec!["alice".to_string(), "owner".to_string()]
    );
    assert_eq!(snapshot.seats[2].user_id, "alice");
    harness.stop().await;
}

#[tokio::test]
async fn same_command_id_replays_the_original_reply_and_writes_nothing() {
    let mut harness = Harness::start().await;
    let room = testkit::unique("room-");
    room_with_members(&mut harness.client, &room, "owner", &[]).await;
    let request = join(&room, "bob");
    let first = harness
        .client
        .join_room(request.clone())
        .await
        .unwrap()
        .into_inner();
    let outbox_before = harness.count("room_outbox", "room_id", &room).await;
    let log_before = harness.count("room_command_log", "room_id", &room).await;

    // A retry with another request_id is the same request.
    let mut retry = request.clone();
    retry.meta.as_mut().unwrap().request_id = "another".into();
    let replay = harness.client.join_room(retry).await.unwrap().into_inner();
    assert!(replay.replayed);
    assert_eq!(replay.room_version, first.room_version);
    assert_eq!(replay.events, first.events);

    assert_eq!(
        harness.count("room_outbox", "room_id", &room).await,
        outbox_before
    );
    assert_eq!(
        harness.count("room_command_log", "room_id", &room).await,
        log_before
    );
    harness.stop().await;
}

#[tokio::test]
async fn replay_after_restart_comes_from_the_command_log() {
    let mut harness = Harness::start().await;
    let room = testkit::unique("room-");
    room_with_members(&mut harness.client, &room, "owner", &[]).await;
    let request = join(&room, "carol");
    let first = harness
        .client
        .join_room(request.clone())
        .await
        .unwrap()
        .into_inner();
    let (_, db, wallet) = harness.stop().await;

    // A fresh node has no recent-reply cache: the unique key catches the reuse.
    let config = common::test_config(&db, &wallet);
    let mut harness = Harness::start_on(db, wallet, config).await;
    let replay = harness
        .client
        .join_room(request)
        .await
        .unwrap()
        .into_inner();
    assert!(replay.replayed);
    assert_eq!(replay.events, first.events);
    assert_eq!(harness.count("room_command_log", "room_id", &room).await, 2);
    harness.stop().await;
}

#[tokio::test]
async fn reusing_a_command_id_for_another_request_is_rejected() {
    let mut harness = Harness::start().await;
    let room = testkit::unique("room-");
    room_with_members(&mut harness.client, &room, "owner", &[]).await;
    let command_id = testkit::unique("cmd-");
    let mut first = join(&room, "dave");
    first.meta = meta(&command_id);
    harness.client.join_room(first).await.unwrap();
    let mut other = join(&room, "erin");
    other.meta = meta(&command_id);
    let error = harness.client.join_room(other).await.unwrap_err();
    assert_eq!(error.code(), tonic::Code::AlreadyExists);
    assert!(error.message().contains(&command_id), "{}", error.message());
    assert!(
        error.message().contains("different request"),
        "{}",
        error.message()
    );
    assert_eq!(harness.count("room_command_log", "room_id", &room).await, 2);
    let snapshot = room_state(&mut harness.client, &room).await;
    assert!(!snapshot.members.contains(&"erin".to_string()));
    harness.stop().await;
}

#[tokio::test]
async fn a_gift_storm_in_one_room_commits_every_gift_once() {
    let mut harness = Harness::start_with(|config| {
        config.room.group_commit = true;
        config.room.group_commit_max_batch = 16;
    })
    .await;
    let room = testkit::unique("room-");
    room_with_members(&mut harness.client, &room, "owner", &["fan"]).await;
    // Collected before the first await: a lazy iterator would send the
    // gifts one after another and the room would never see two at once.
    let gifts: Vec<_> = (0..60)
        .map(|index| {
            let mut client = harness.client.clone();
            let request = gift(&room, &format!("{room}-gift-{index}"), "fan", "owner", 1, 7);
            tokio::spawn(async move {
                client
                    .send_gift(request)
                    .await
                    .map(|reply| reply.into_inner())
            })
        })
        .collect();
    let mut versions = Vec::new();
    for handle in gifts {
        versions.push(handle.await.unwrap().unwrap().room_version);
    }
    versions.sort_unstable();
    assert_eq!(
        versions,
        (3..63).collect::<Vec<u64>>(),
        "one version per gift"
    );
    let snapshot = room_state(&mut harness.client, &room).await;
    assert_eq!(snapshot.heat, 60 * 7);
    assert_eq!(harness.wallet.stats().debits, 60);
    assert_eq!(harness.wallet.stats().total_debited, 420);
    let committed: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM room_gift_saga WHERE room_id = ? AND status = 'committed'",
    )
    .bind(&room)
    .fetch_one(&harness.pool)
    .await
    .unwrap();
    assert_eq!(committed, 60);
    // Group commit did group: some batch held more than one gift.
    let commands = harness.metric("room_group_commit_batch_size_sum").await;
    let batches = harness.metric("room_group_commit_batch_size_count").await;
    assert!(
        commands > batches,
        "{commands} commands in {batches} batches: never more than one per batch"
    );
    harness.stop().await;
}

#[tokio::test]
async fn list_rooms_orders_by_heat() {
    let mut harness = Harness::start().await;
    let cold = testkit::unique("room-");
    let hot = testkit::unique("room-");
    room_with_members(&mut harness.client, &cold, "owner", &["fan"]).await;
    room_with_members(&mut harness.client, &hot, "owner", &["fan"]).await;
    harness
        .client
        .send_gift(gift(&cold, &testkit::unique("g-"), "fan", "owner", 1, 1))
        .await
        .unwrap();
    harness.wallet.set_balance("fan", i64::MAX / 2);
    // Far above anything other tests produce, so this room tops the shared list.
    harness
        .client
        .send_gift(gift(
            &hot,
            &testkit::unique("g-"),
            "fan",
            "owner",
            9_999,
            1_000_000,
        ))
        .await
        .unwrap();
    let listed = harness
        .client
        .list_rooms(ListRoomsRequest { limit: 100 })
        .await
        .unwrap()
        .into_inner();
    let position = |room: &str| listed.rooms.iter().position(|entry| entry.room_id == room);
    let hot_position = position(&hot).expect("hot room listed");
    assert_eq!(listed.rooms[hot_position].heat, 9_999 * 1_000_000);
    assert!(position(&cold).is_none_or(|cold| cold > hot_position));
    let error = harness
        .client
        .list_rooms(ListRoomsRequest { limit: 101 })
        .await
        .unwrap_err();
    assert_eq!(error.code(), tonic::Code::InvalidArgument);
    assert!(error.message().contains("limit"));
    // Closed rooms leave the shared list, so later runs start clean.
    for room in [&hot, &cold] {
        harness
            .client
            .close_room(hyapp_api::room::CloseRoomRequest {
                meta: meta(&testkit::unique("close-")),
                room_id: room.clone(),
                actor_id: "owner".into(),
            })
            .await
            .unwrap();
    }
    let listed = harness
        .client
        .list_rooms(ListRoomsRequest { limit: 100 })
        .await
        .unwrap()
        .into_inner();
    assert!(listed.rooms.iter().all(|entry| entry.room_id != hot));
    harness.stop().await;
}
