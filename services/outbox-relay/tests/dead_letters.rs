//! The operator commands over what the relay engine left behind, against
//! real MariaDB and the real broker: a failing head dead-letters and is
//! replayed (dry run, then for real, audited), a permanent IM error's dead
//! letter is listed with its error, and retention purge removes only old
//! delivered rows.

mod common;

use common::*;
use fake_tencent_im::FaultRule;
use outbox_relay::ops;
use outbox_schema::names;
use std::time::Duration;

/// The default `ops.replay_max_age`, not forced.
const WEEK_GUARD: ops::ReplayGuard = ops::ReplayGuard {
    max_age_ms: 7 * 86_400_000,
    force: false,
};

#[tokio::test]
async fn a_failing_head_holds_its_room_only_then_dead_letters_and_replays() {
    let db = testkit::TestDb::new().await;
    let namespace = testkit::unique("ns");
    let mq = mq_config(&testkit::kafka_bootstrap(), &namespace);
    let topic = mq.topic(names::TOPIC_ROOM_OUTBOX);
    testkit::create_topic(&topic, 2).await;
    let mut stuck = room_rows("room-stuck", 1, 3);
    // A head the broker can never accept (over librdkafka's message.max.bytes):
    // a poison event injected without faking anything.
    stuck[0].payload = vec![0u8; 2_000_000];
    let flowing = room_rows("room-flowing", 1, 3);
    insert(&db.pool, &stuck).await;
    insert(&db.pool, &flowing).await;

    let relay = mq_relay(&db.pool, &mq, &worker_config("relay-1"));
    let shards = own_all_shards(&relay).await;
    let first = relay.run_batch(&shards).await.unwrap();
    assert_eq!(first.delivered, 3, "the other room flows");
    assert_eq!(first.retried, 1);
    assert_eq!(
        statuses(&db.pool, "room-stuck").await,
        vec![
            (1, "retryable".into()),
            (2, "pending".into()),
            (3, "pending".into())
        ],
        "nothing overtakes the failing head"
    );

    // Attempts 2 and 3 (max_retry_count = 3) dead-letter the head; the room moves on.
    let mut dead = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while dead == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "head never dead-lettered"
        );
        dead += relay.run_batch(&shards).await.unwrap().dead_lettered;
    }
    while open_rows(&db.pool).await > 0 {
        assert!(std::time::Instant::now() < deadline, "room never moved on");
        relay.run_batch(&shards).await.unwrap();
    }
    assert_eq!(
        statuses(&db.pool, "room-stuck").await,
        vec![
            (1, "failed".into()),
            (2, "delivered".into()),
            (3, "delivered".into())
        ]
    );
    let letters = ops::list_dead_letters(&db.pool, &ops::DeadLetterFilter::default())
        .await
        .unwrap();
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].event_id, stuck[0].event_id);
    assert_eq!(letters[0].retry_count, 3);
    assert!(
        letters[0].last_error.contains("broker"),
        "{}",
        letters[0].last_error
    );

    // An operator fixes the payload and replays: same event_id, published once more.
    let filter = ops::DeadLetterFilter {
        room_id: Some("room-stuck".into()),
        ..Default::default()
    };
    assert_eq!(
        ops::replay_dead_letters(&db.pool, &filter, true, None, None, WEEK_GUARD)
            .await
            .unwrap()
            .replayed
            .len(),
        1,
        "dry run lists it"
    );
    assert_eq!(
        statuses(&db.pool, "room-stuck").await[0].1,
        "failed",
        "dry run changes nothing"
    );
    let fixed = room_rows("room-stuck", 1, 1).remove(0);
    sqlx::query("UPDATE room_outbox SET payload = ? WHERE event_id = ?")
        .bind(&fixed.payload)
        .bind(&stuck[0].event_id)
        .execute(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        ops::replay_dead_letters(
            &db.pool,
            &filter,
            false,
            Some(&ops::OperatorName::new("oncall").unwrap()),
            Some("payload fixed"),
            WEEK_GUARD,
        )
        .await
        .unwrap()
        .replayed
        .len(),
        1
    );
    assert_eq!(relay.run_batch(&shards).await.unwrap().delivered, 1);
    let records = read_topic(&testkit::kafka_bootstrap(), &topic, 6).await;
    let replayed: Vec<_> = records
        .iter()
        .filter(|record| record.event_id == stuck[0].event_id)
        .collect();
    assert_eq!(replayed.len(), 1, "the replay keeps the original event_id");
}

#[tokio::test]
async fn purge_removes_only_old_delivered_rows() {
    let db = testkit::TestDb::new().await;
    insert(&db.pool, &room_rows("room-old", 1, 3)).await;
    insert(&db.pool, &room_rows("room-new", 1, 1)).await;
    let day = 86_400_000;
    // room-old: seq 1 delivered, seq 2 legacy published, seq 3 a dead letter — all a week old.
    sqlx::query(
        "UPDATE room_outbox SET created_at_ms = created_at_ms - ?, \
         status = CASE room_event_seq WHEN 1 THEN 'delivered' WHEN 2 THEN 'published' ELSE 'failed' END \
         WHERE room_id = 'room-old'",
    )
    .bind(7 * day)
    .execute(&db.pool)
    .await
    .unwrap();
    // An old row still pending must survive too.
    insert(&db.pool, &room_rows("room-pending", 1, 1)).await;
    sqlx::query(
        "UPDATE room_outbox SET created_at_ms = created_at_ms - ? WHERE room_id = 'room-pending'",
    )
    .bind(7 * day)
    .execute(&db.pool)
    .await
    .unwrap();
    sqlx::query("UPDATE room_outbox SET status = 'delivered' WHERE room_id = 'room-new'")
        .execute(&db.pool)
        .await
        .unwrap();

    let operator = ops::OperatorName::new("oncall").unwrap();
    let report = ops::purge_delivered(&db.pool, day, &operator, None)
        .await
        .unwrap();
    assert_eq!(report.deleted, 2);
    assert_eq!(
        statuses(&db.pool, "room-old").await,
        vec![(3, "failed".into())]
    );
    assert_eq!(
        statuses(&db.pool, "room-pending").await,
        vec![(1, "pending".into())]
    );
    assert_eq!(
        statuses(&db.pool, "room-new").await,
        vec![(1, "delivered".into())],
        "young rows are kept"
    );
    let report = ops::status(&db.pool).await.unwrap();
    assert!(
        report.oldest_pending_age_ms >= 7 * day - 60_000,
        "{report:?}"
    );
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
    let letters = ops::list_dead_letters(&db.pool, &Default::default())
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
    let letters = ops::list_dead_letters(&db.pool, &Default::default())
        .await
        .unwrap();
    assert!(
        letters[0].last_error.contains("80001"),
        "{}",
        letters[0].last_error
    );
    assert_eq!(fake.group_messages("room_room-poison").len(), 1);
}
