//! Process lifecycle and background work: admin probes, the drain order
//! (docs/design.md#lifecycle-start-up-and-drain-order), presence expiry
//! through a normal command, the treasure wake-up row and its OpenTreasure,
//! and CreateRoom's synchronous IM group.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use hyapp_api::room::HeartbeatRequest;
use outbox_schema::pb::LeaveReason;
use outbox_schema::pb::room_outbox_event::Payload;
use prost::Message;
use service_kit::duration::ConfigDuration;
use sqlx::Row;

async fn status_of(url: String) -> u16 {
    reqwest::get(url)
        .await
        .map(|response| response.status().as_u16())
        .unwrap_or(0)
}

#[tokio::test]
async fn shutdown_drains_in_order_and_workers_stop_before_the_pools_close() {
    let mut harness = Harness::start().await;
    let room = testkit::unique("room-");
    room_with_members(&mut harness.client, &room, "owner", &[]).await;
    assert_eq!(status_of(format!("{}/healthz", harness.http)).await, 200);
    assert_eq!(status_of(format!("{}/readyz", harness.http)).await, 200);
    let metrics = reqwest::get(format!("{}/metrics", harness.http))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("room_commands_total"), "{metrics}");

    // A probe worker in the slot: when cancelled it observes the process state.
    let observed = Arc::new(Mutex::new(None));
    let (readyz, pool, seen) = (
        format!("{}/readyz", harness.http),
        harness.pool.clone(),
        Arc::clone(&observed),
    );
    let service = harness.rooms.clone();
    harness.workers.spawn("probe", move |token| async move {
        token.cancelled().await;
        let ready_status = status_of(readyz).await;
        let database_open = sqlx::query_scalar::<_, i64>("SELECT 1")
            .fetch_one(&pool)
            .await
            .is_ok();
        // The service's own pool must still answer (NOT_FOUND needs a query) while workers wind down.
        let service_open = matches!(
            service.get_room("no-such-room").await,
            Err(error) if error.code() == room_service::ErrorCode::NotFound
        );
        *seen.lock().unwrap() = Some((ready_status, database_open, service_open));
    });

    let (report, _, _) = harness.stop().await;
    assert_eq!(
        report.steps,
        [
            "draining",
            "workers_cancelled",
            "workers_stopped",
            "grpc_stopped",
            "cells_released",
            "wallet_closed",
            "mysql_closed",
            "redis_closed",
            "http_stopped"
        ]
    );
    let (ready_status, database_open, service_open) = observed.lock().unwrap().expect("probe ran");
    assert_eq!(
        ready_status, 503,
        "readyz reports draining before workers stop"
    );
    assert!(
        database_open && service_open,
        "pools still open while workers stop"
    );
}

#[tokio::test]
async fn presence_entries_with_invalid_ids_are_removed_without_a_command() {
    use fred::prelude::*;
    let harness = Harness::start().await;
    let room = testkit::unique("room-");
    let redis = redis_client(&harness.config.redis.url).await;
    let prefix = &harness.config.redis.key_prefix;
    let key = format!("{prefix}:room:presence");
    let long_room = "r".repeat(5_000);
    let forged = [
        format!("{room}|a/b"),
        format!("{long_room}|alice"),
        format!("{room}|{}", "u".repeat(5_000)),
        "no-separator".to_owned(),
    ];
    for member in &forged {
        let _: i64 = redis
            .zadd(&key, None, None, false, false, (1.0, member.as_str()))
            .await
            .unwrap();
    }
    let left = room_service::sweeps::sweep_presence(&harness.rooms)
        .await
        .unwrap();
    assert_eq!(left, 0);
    let remaining: i64 = redis.zcard(&key).await.unwrap();
    assert_eq!(remaining, 0, "every forged entry removed");
    assert_eq!(harness.count("room_command_log", "room_id", &room).await, 0);
    // Not even a refused command ran (a leave of a room that does not exist
    // would be counted, outcome not_found).
    assert_eq!(harness.metric_or_zero("room_commands_total").await, 0.0);
    for forged_room in [&room, &long_room] {
        let leased: i64 = redis
            .exists(format!("{prefix}:room:lease:{forged_room}"))
            .await
            .unwrap();
        assert_eq!(leased, 0, "no lease taken for a forged entry's room");
    }
    harness.stop().await;
}

#[tokio::test]
async fn an_expired_presence_leaves_the_room_with_an_event() {
    let mut harness = Harness::start_with(|config| {
        config.room.presence_ttl = service_kit::duration::ConfigDuration::from_millis(1);
    })
    .await;
    let room = testkit::unique("room-");
    room_with_members(&mut harness.client, &room, "owner", &["sleepy"]).await;
    // A heartbeat of a non-member is refused.
    let error = harness
        .client
        .heartbeat(HeartbeatRequest {
            room_id: room.clone(),
            user_id: "ghost".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(error.code(), tonic::Code::FailedPrecondition);

    let rooms = harness.rooms.clone();
    let pool = harness.pool.clone();
    let room_for_poll = room.clone();
    let left = eventually(Duration::from_secs(10), || {
        let (rooms, pool, room) = (rooms.clone(), pool.clone(), room_for_poll.clone());
        async move {
            let _ = room_service::sweeps::sweep_presence(&rooms).await;
            sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM room_outbox WHERE room_id = ? AND event_type = 'RoomUserLeft'")
                    .bind(&room)
                    .fetch_one(&pool)
                    .await
                    .unwrap()
                    >= 2
        }
    })
    .await;
    assert!(left, "both members expire and leave");
    let rows = sqlx::query("SELECT payload FROM room_outbox WHERE room_id = ? AND event_type = 'RoomUserLeft' ORDER BY id")
        .bind(&room)
        .fetch_all(&harness.pool)
        .await
        .unwrap();
    for row in rows {
        let envelope = outbox_schema::decode_envelope(&row.get::<Vec<u8>, _>("payload")).unwrap();
        let Some(Payload::RoomUserLeft(left)) = envelope.payload else {
            panic!("not a RoomUserLeft")
        };
        assert_eq!(left.reason(), LeaveReason::PresenceExpired);
        assert!(envelope.command_id.starts_with("presence-expired:"));
    }
    let snapshot = room_state(&mut harness.client, &room).await;
    assert!(snapshot.members.is_empty());
    harness.stop().await;
}

#[tokio::test]
async fn a_treasure_countdown_schedules_a_wakeup_that_opens_the_box_once() {
    let mut harness = Harness::start_with(|config| {
        config.rocketmq.treasure_open.enabled = true;
        config.room.rules.treasure_thresholds = vec![100];
        config.room.rules.treasure_countdown =
            service_kit::duration::ConfigDuration::from_millis(1);
    })
    .await;
    let room = testkit::unique("room-");
    room_with_members(&mut harness.client, &room, "owner", &["fan"]).await;
    let reply = harness
        .client
        .send_gift(gift(
            &room,
            &testkit::unique("gift-"),
            "fan",
            "owner",
            1,
            150,
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(
        reply
            .events
            .iter()
            .any(|event| event.event_type == "RoomTreasureCountdownStarted")
    );

    let row = sqlx::query(
        "SELECT lane, topic, event_type, payload, next_retry_at_ms FROM room_outbox WHERE room_id = ? AND lane = 1",
    )
    .bind(&room)
    .fetch_one(&harness.pool)
    .await
    .unwrap();
    assert_eq!(
        row.get::<String, _>("topic"),
        outbox_schema::names::TOPIC_TREASURE_OPEN
    );
    assert_eq!(row.get::<String, _>("event_type"), "TreasureOpenWakeup");
    let wakeup = outbox_schema::decode_wakeup(&row.get::<Vec<u8>, _>("payload")).unwrap();
    assert_eq!(row.get::<i64, _>("next_retry_at_ms"), wakeup.open_at_ms);
    assert_eq!(wakeup.room_id, room);
    assert_eq!(wakeup.level, 1);
    assert_eq!(
        wakeup.command_id,
        outbox_schema::treasure_open_command_id(&room, &wakeup.box_id, wakeup.level)
    );
    assert!(wakeup.encode_to_vec().len() > 10);

    let opened = harness
        .rooms
        .open_treasure(&room, &wakeup.box_id, wakeup.level, &wakeup.command_id)
        .await
        .unwrap();
    assert!(!opened.replayed);
    assert_eq!(opened.events[0].event_type, "RoomTreasureOpened");
    // A redelivered wake-up is an idempotent replay.
    let again = harness
        .rooms
        .open_treasure(&room, &wakeup.box_id, wakeup.level, &wakeup.command_id)
        .await
        .unwrap();
    assert!(again.replayed);
    assert_eq!(again.room_version, opened.room_version);
    // A stale wake-up for another box is refused by the cell.
    let stale = harness
        .rooms
        .open_treasure(&room, "other-box", 1, "treasure-open:stale")
        .await
        .unwrap_err();
    assert_eq!(stale.code(), room_service::ErrorCode::NotFound);
    harness.stop().await;
}

#[tokio::test]
async fn create_room_makes_the_im_group_and_survives_an_im_outage() {
    let im = fake_tencent_im::spawn(fake_tencent_im::FakeImConfig::new(
        1_400_000_001,
        "im-secret",
        "administrator",
    ))
    .await
    .unwrap();
    let im_url = im.base_url();
    let mut harness = Harness::start_with(move |config| {
        config.tencent_im.enabled = true;
        config.tencent_im.base_url = im_url;
        config.tencent_im.sdk_app_id = 1_400_000_001;
        config.tencent_im.secret_key = service_kit::Secret::new("im-secret");
    })
    .await;
    let room = testkit::unique("room-");
    harness
        .client
        .create_room(create(&room, "owner"))
        .await
        .unwrap();
    let groups = im.groups();
    assert!(
        groups
            .iter()
            .any(|group| group.group_id == format!("room_{room}")),
        "{groups:?}"
    );
    let (_, db, wallet) = harness.stop().await;
    im.shutdown().await.unwrap();

    // IM unreachable: the room is still created (the relay's EnsureGroup repairs the group).
    let mut config = common::test_config(&db, &wallet);
    config.tencent_im.enabled = true;
    config.tencent_im.base_url = "http://127.0.0.1:9".into();
    config.tencent_im.sdk_app_id = 1_400_000_001;
    config.tencent_im.secret_key = service_kit::Secret::new("im-secret");
    config.tencent_im.request_timeout = service_kit::duration::ConfigDuration::from_millis(300);
    let mut harness = Harness::start_on(db, wallet, config).await;
    let other = testkit::unique("room-");
    let created = harness
        .client
        .create_room(create(&other, "owner"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(created.room_version, 1);
    assert_eq!(harness.count("room_outbox", "room_id", &other).await, 1);
    harness.stop().await;
}

/// The embedded relay publishing to a broker that no longer answers: the
/// drain waits the grace, then drops the relay, and only then closes MySQL.
/// The row being published is left open (`pending` in `mq` mode) for a later publish, not marked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_stuck_on_a_slow_broker_is_dropped_before_mysql_closes() {
    let mut broker = testkit::PrivateBroker::start().await;
    let bootstrap = broker.bootstrap.clone();
    let harness = Harness::start_with(|config| {
        config.rocketmq.enabled = true;
        config.rocketmq.name_servers = vec![bootstrap];
        config.rocketmq.namespace = testkit::unique("ns");
        config.rocketmq.room_outbox.enabled = true;
        config.outbox_worker.enabled = true;
        config.outbox_worker.publish_mode = "mq".into();
        config.outbox_worker.nudge_enabled = false;
        config.outbox_worker.poll_interval = ConfigDuration::from_millis(50);
        // Far longer than the grace: the publish outlives the drain.
        config.outbox_worker.publish_timeout = ConfigDuration::from_secs(120);
        config.shutdown_grace = ConfigDuration::from_millis(500);
    })
    .await;
    broker.stop();
    let room = testkit::unique("room-");
    let mut client = harness.client.clone();
    client.create_room(create(&room, "owner")).await.unwrap();
    // In `mq` mode a row being published still reads `pending`: the relay's
    // gauge of rows it is publishing says it has taken it.
    let metrics_url = format!("{}/metrics", harness.http);
    let publishing = async {
        loop {
            let in_flight = testkit::metrics::read(&metrics_url, "room_outbox_publishing").await;
            if in_flight > 0.0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), publishing)
        .await
        .expect("the relay took the row and is publishing");

    let (report, db, _) = harness.stop().await;
    let aborted = report
        .steps
        .iter()
        .position(|step| *step == "workers_aborted")
        .expect("the stuck relay was aborted");
    let closed = report
        .steps
        .iter()
        .position(|step| *step == "mysql_closed")
        .unwrap();
    assert!(aborted < closed, "{:?}", report.steps);
    let status: String =
        sqlx::query_scalar("SELECT status FROM room_outbox WHERE room_id = ? ORDER BY id LIMIT 1")
            .bind(&room)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(status, "pending", "left for a later publish, not marked");
}
