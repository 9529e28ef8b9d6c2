//! The relay in `direct` mode against the faithful fake of Tencent IM
//! (docs/design.md#publish-modes): EnsureGroup for RoomCreated, one message per
//! event even when redelivered, the same `im_bridge` settings im-bridge reads,
//! IM outages retried until delivered, and a permanent IM error dead-lettering
//! the event while the room moves on.

mod common;

use common::log::CapturedLog;
use common::*;
use fake_tencent_im::{FakeImConfig, FaultRule};
use room_core::EventKind;
use std::time::{Duration, Instant};

const SEND_GROUP_MSG: &str = "group_open_http_svc/send_group_msg";

async fn fake_im() -> fake_tencent_im::FakeImHandle {
    fake_tencent_im::spawn(FakeImConfig::new(IM_APP_ID, IM_KEY, "administrator"))
        .await
        .unwrap()
}

fn created(room_id: &str) -> outbox_schema::NewOutboxRow {
    event_row(
        room_id,
        1,
        EventKind::RoomCreated {
            owner_id: "host".into(),
            title: "Lounge".into(),
            mic_seat_count: 8,
        },
    )
}

async fn drain(relay: &outbox_relay::Relay, pool: &sqlx::MySqlPool, shards: &[u16]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while open_rows(pool).await > 0 {
        assert!(Instant::now() < deadline, "relay did not drain");
        relay.run_batch(shards).await.unwrap();
    }
}

#[tokio::test]
async fn ensures_the_group_and_sends_each_event_once_even_when_redelivered() {
    let db = testkit::TestDb::new().await;
    let fake = fake_im().await;
    let relay = direct_relay(&db.pool, &fake.base_url(), &worker_config("relay-direct"));
    let shards = own_all_shards(&relay).await;
    let rows = vec![
        event_row(
            "room-d",
            1,
            EventKind::RoomCreated {
                owner_id: "host".into(),
                title: "Lounge".into(),
                mic_seat_count: 8,
            },
        ),
        event_row(
            "room-d",
            2,
            EventKind::RoomUserJoined {
                user_id: "alice".into(),
            },
        ),
        event_row(
            "room-d",
            3,
            EventKind::RoomUserJoined {
                user_id: "bob".into(),
            },
        ),
    ];
    insert(&db.pool, &rows).await;
    drain(&relay, &db.pool, &shards).await;

    let groups = fake.groups();
    assert!(
        groups
            .iter()
            .any(|group| group.group_id == "room_room-d" && group.group_type == "AVChatRoom"),
        "{groups:?}"
    );
    let messages = fake.group_messages("room_room-d");
    assert_eq!(
        messages.len(),
        2,
        "one message per join, none for RoomCreated"
    );
    let randoms: Vec<u32> = rows[1..]
        .iter()
        .map(|row| tencent_im::random_from_event_id(&row.event_id))
        .collect();
    assert_eq!(
        messages
            .iter()
            .map(|message| message.random)
            .collect::<Vec<_>>(),
        randoms
    );

    // A redelivery (relay crash before mark, replay): no second message.
    sqlx::query("UPDATE room_outbox SET status = 'pending'")
        .execute(&db.pool)
        .await
        .unwrap();
    drain(&relay, &db.pool, &shards).await;
    assert_eq!(fake.group_messages("room_room-d").len(), 2);
}

/// A room's kick and heat change, after its creation and a join.
fn kick_and_heat(room_id: &str) -> Vec<outbox_schema::NewOutboxRow> {
    vec![
        created(room_id),
        event_row(
            room_id,
            2,
            EventKind::RoomUserJoined {
                user_id: "troll".into(),
            },
        ),
        event_row(
            room_id,
            3,
            EventKind::RoomUserKicked {
                actor_id: "host".into(),
                target_id: "troll".into(),
                ban_until_ms: 0,
            },
        ),
        event_row(room_id, 4, EventKind::RoomHeatChanged { heat: 5, delta: 5 }),
    ]
}

#[tokio::test]
async fn direct_mode_follows_the_im_bridge_settings() {
    let db = testkit::TestDb::new().await;
    let fake = fake_im().await;
    // Defaults, as im-bridge ships them: heat is silent, a kick removes the member.
    let relay = direct_relay(&db.pool, &fake.base_url(), &worker_config("relay-direct-a"));
    let shards = own_all_shards(&relay).await;
    insert(&db.pool, &kick_and_heat("room-da")).await;
    drain(&relay, &db.pool, &shards).await;
    let group = |id: &str| {
        fake.groups()
            .into_iter()
            .find(|group| group.group_id == id)
            .expect("group created")
    };
    assert_eq!(group("room_room-da").removed_members, ["troll"]);
    assert!(group("room_room-da").muted_until.is_empty());
    assert_eq!(
        fake.group_messages("room_room-da").len(),
        2,
        "join and kick"
    );

    // The opposite settings: nothing silent, kicks mute instead of removing.
    let settings = room_im::BridgeConfig {
        kick_remove_member: false,
        kick_mute: true,
        silent_event_types: Vec::new(),
        ..room_im::BridgeConfig::default()
    };
    // A database of its own: the first relay still holds every shard lease.
    let db = testkit::TestDb::new().await;
    let relay = direct_relay_with(
        &db.pool,
        &fake.base_url(),
        &worker_config("relay-direct-b"),
        settings,
    );
    let shards = own_all_shards(&relay).await;
    insert(&db.pool, &kick_and_heat("room-db")).await;
    drain(&relay, &db.pool, &shards).await;
    assert!(group("room_room-db").removed_members.is_empty());
    assert!(group("room_room-db").muted_until.contains_key("troll"));
    assert_eq!(
        fake.group_messages("room_room-db").len(),
        3,
        "join, kick and heat"
    );
}

#[tokio::test]
async fn im_outage_is_retried_with_backoff_until_delivered() {
    let db = testkit::TestDb::new().await;
    let fake = fake_im().await;
    let relay = direct_relay(&db.pool, &fake.base_url(), &worker_config("relay-direct"));
    let shards = own_all_shards(&relay).await;
    insert(&db.pool, &[created("room-outage")]).await;
    drain(&relay, &db.pool, &shards).await;
    fake.inject_fault(FaultRule::http_status(SEND_GROUP_MSG, 503).times(2));
    let rows = room_rows("room-outage", 2, 2);
    insert(&db.pool, &rows).await;

    let first = relay.run_batch(&shards).await.unwrap();
    assert_eq!((first.delivered, first.retried, first.released), (0, 1, 1));
    let (status, retries, error): (String, u32, String) = sqlx::query_as(
        "SELECT status, retry_count, last_error FROM room_outbox WHERE event_id = ?",
    )
    .bind(&rows[0].event_id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!((status.as_str(), retries), ("retryable", 1));
    assert!(error.contains("tencent im"), "{error}");
    assert!(error.len() < 300, "last_error stays short: {error}");

    drain(&relay, &db.pool, &shards).await;
    assert_eq!(
        statuses(&db.pool, "room-outage").await,
        vec![
            (1, "delivered".into()),
            (2, "delivered".into()),
            (3, "delivered".into())
        ]
    );
    assert_eq!(fake.group_messages("room_room-outage").len(), 2);
}

#[tokio::test]
async fn a_failure_is_logged_with_its_new_status_and_retry_count() {
    let db = testkit::TestDb::new().await;
    let fake = fake_im().await;
    let relay = direct_relay(&db.pool, &fake.base_url(), &worker_config("relay-direct"));
    let shards = own_all_shards(&relay).await;
    insert(&db.pool, &[created("room-log")]).await;
    drain(&relay, &db.pool, &shards).await;
    let log = CapturedLog::default();
    let _guard = tracing::subscriber::set_default(log.subscriber());

    // A transient failure: retryable, its first failure counted.
    fake.inject_fault(FaultRule::http_status(SEND_GROUP_MSG, 503).times(1));
    let rows = room_rows("room-log", 2, 1);
    insert(&db.pool, &rows).await;
    assert_eq!(relay.run_batch(&shards).await.unwrap().retried, 1);
    let retried = log.lines("outbox publish failed; retrying");
    assert_eq!(retried.len(), 1, "{retried:?}");
    assert_eq!(retried[0]["status"], "retryable");
    assert_eq!(retried[0]["retry_count"], 1);
    assert_eq!(retried[0]["event_id"], rows[0].event_id.as_str());
    assert!(retried[0]["next_retry_at_ms"].as_i64().unwrap() > 0);

    // Deliver it, then a final failure: dead-lettered at once, status failed.
    sqlx::query("UPDATE room_outbox SET next_retry_at_ms = 0 WHERE event_id = ?")
        .bind(&rows[0].event_id)
        .execute(&db.pool)
        .await
        .unwrap();
    drain(&relay, &db.pool, &shards).await;
    fake.inject_fault(FaultRule::error_code(SEND_GROUP_MSG, 80001).times(1));
    let poison = room_rows("room-log", 3, 1);
    insert(&db.pool, &poison).await;
    assert_eq!(relay.run_batch(&shards).await.unwrap().dead_lettered, 1);
    let dead = log.lines("outbox event dead-lettered; room moves on");
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(
        (
            &dead[0]["status"],
            &dead[0]["retry_count"],
            &dead[0]["final_failure"]
        ),
        (
            &serde_json::json!("failed"),
            &serde_json::json!(1),
            &serde_json::json!(true)
        )
    );
    assert!(dead[0]["error"].as_str().unwrap().contains("80001"));
}

#[tokio::test]
async fn a_permanent_im_error_dead_letters_the_event_and_the_room_moves_on() {
    let db = testkit::TestDb::new().await;
    let fake = fake_im().await;
    let relay = direct_relay(&db.pool, &fake.base_url(), &worker_config("relay-direct"));
    let shards = own_all_shards(&relay).await;
    // 80001: Tencent's content-filter rejection — retrying cannot help.
    insert(&db.pool, &[created("room-poison")]).await;
    drain(&relay, &db.pool, &shards).await;
    fake.inject_fault(FaultRule::error_code(SEND_GROUP_MSG, 80001).times(1));
    insert(&db.pool, &room_rows("room-poison", 2, 2)).await;
    drain(&relay, &db.pool, &shards).await;
    let letters = outbox_relay::ops::list_dead_letters(&db.pool, &Default::default())
        .await
        .unwrap();
    assert_eq!(
        statuses(&db.pool, "room-poison").await,
        vec![
            (1, "delivered".into()),
            (2, "failed".into()),
            (3, "delivered".into())
        ],
        "{letters:?}"
    );
    let letters = outbox_relay::ops::list_dead_letters(&db.pool, &Default::default())
        .await
        .unwrap();
    assert!(
        letters[0].last_error.contains("80001"),
        "{}",
        letters[0].last_error
    );
    assert_eq!(fake.group_messages("room_room-poison").len(), 1);
}

/// Activity unavailable in `direct` mode (docs/design.md#publish-modes) → the event is retried
/// (the command path never waits), and delivered once activity-service is
/// back — through its real gRPC entry, counted once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn activity_outage_is_retried_until_the_service_returns() {
    let db = testkit::TestDb::new().await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut worker = worker_config("relay-activity");
    worker.publish_mode = "direct".into();
    let direct = outbox_relay::config::DirectConfig {
        activity_endpoint: format!("http://127.0.0.1:{port}"),
        ..Default::default()
    };
    let mut registry = prometheus_client::registry::Registry::default();
    let relay = outbox_relay::app::build_relay(
        db.pool.clone(),
        &worker,
        &service_kit::mq::MqConfig::default(),
        &direct,
        &mut registry,
    )
    .unwrap();
    let shards = own_all_shards(&relay).await;
    let gift = EventKind::RoomGiftSent {
        sender_id: "alice".into(),
        receiver_id: "host".into(),
        gift_id: "rose".into(),
        count: 2,
        unit_value: 21,
        total_value: 42,
    };
    insert(&db.pool, &[event_row("room-act", 1, gift)]).await;
    let report = relay.run_batch(&shards).await.unwrap();
    assert_eq!(
        (report.delivered, report.retried),
        (0, 1),
        "activity is down"
    );
    let error: String = sqlx::query_scalar("SELECT last_error FROM room_outbox")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(error.contains("activity"), "{error}");

    // activity-service comes back on its address.
    let fake = fake_im().await;
    let namespace = testkit::unique("ns");
    let mq = mq_config(&testkit::kafka_bootstrap(), &namespace);
    testkit::create_topic(&mq.topic(outbox_schema::names::TOPIC_ROOM_OUTBOX), 1).await;
    let mut config = activity_consumer::config::Config::default();
    config.mysql.url = db.url.clone();
    config.rocketmq = mq;
    config.consumer.group = testkit::unique("activity-");
    config.tencent_im = tencent_im::ImSection {
        enabled: true,
        base_url: fake.base_url(),
        sdk_app_id: IM_APP_ID,
        secret_key: service_kit::Secret::new(IM_KEY),
        ..tencent_im::ImSection::default()
    };
    config.grpc_listen = format!("127.0.0.1:{port}");
    config.http_listen = "127.0.0.1:0".into();
    let activity = activity_consumer::App::build(config).await.unwrap();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn(activity.run(shutdown.clone()));
    drain(&relay, &db.pool, &shards).await;
    let total: u64 = sqlx::query_scalar(
        "SELECT total_value FROM activity_room_contribution WHERE room_id = 'room-act'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(total, 42);
    shutdown.cancel();
    running.await.unwrap().unwrap();
}
