//! The relay in `direct` mode against the faithful fake of Tencent IM
//! (docs/design.md#publish-modes): EnsureGroup for RoomCreated, one message per
//! event even when redelivered, the same `im_bridge` settings im-bridge reads,
//! and IM outages retried until delivered. (A permanent IM error's dead letter
//! is read through the operator commands: the relay service's
//! `dead_letters.rs`; activity's real entry: activity-consumer's
//! `relay_direct_entry.rs`.)

mod common;

use common::log::CapturedLog;
use common::*;
use fake_tencent_im::FaultRule;
use room_core::EventKind;

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
