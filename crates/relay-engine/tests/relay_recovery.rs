//! Delayed wake-ups and broker outages against real MariaDB and real brokers
//! (a private one for the outage). Retention purge is an operator command:
//! the relay service's `dead_letters.rs`.

mod common;

use common::*;
use outbox_schema::{NewOutboxRow, names};
use service_kit::time::now_ms;
use std::time::{Duration, Instant};

fn wakeup_row(room_id: &str, open_at_ms: i64) -> NewOutboxRow {
    let wakeup = outbox_schema::pb::TreasureOpenWakeup {
        app_code: "hyapp".into(),
        room_id: room_id.into(),
        box_id: format!("{room_id}-box-1"),
        level: 1,
        open_at_ms,
        command_id: outbox_schema::treasure_open_command_id(
            room_id,
            &format!("{room_id}-box-1"),
            1,
        ),
        source_event_id: "source".into(),
    };
    let source = outbox_schema::pb::RoomOutboxEvent {
        app_code: "hyapp".into(),
        room_id: room_id.into(),
        ..Default::default()
    };
    NewOutboxRow::wakeup(&source, &wakeup, uuid::Uuid::now_v7().to_string(), now_ms())
}

#[tokio::test]
async fn a_delayed_wakeup_is_published_at_open_at_and_never_blocks_its_room() {
    let db = testkit::TestDb::new().await;
    let mq = mq_config(&testkit::kafka_bootstrap(), &testkit::unique("ns"));
    let wake_topic = mq.topic(names::TOPIC_TREASURE_OPEN);
    testkit::create_topic(&wake_topic, 1).await;
    testkit::create_topic(&mq.topic(names::TOPIC_ROOM_OUTBOX), 1).await;
    let open_at = now_ms() + 1_500;
    insert(&db.pool, &[wakeup_row("room-t", open_at)]).await;
    // The room's ordinary events keep flowing while the wake-up waits.
    insert(&db.pool, &room_rows("room-t", 1, 2)).await;

    let relay = mq_relay(&db.pool, &mq, &worker_config("relay-1"));
    let shards = own_all_shards(&relay).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let report = relay.run_batch(&shards).await.unwrap();
        // The wake-up scan starts after the chain batch, so the batch's start
        // says nothing about when the wake-up was claimed (a slow first
        // publish can carry it past open_at); its end can only come later.
        let after = now_ms();
        let wakeup_status: String =
            sqlx::query_scalar("SELECT status FROM room_outbox WHERE lane = 1")
                .fetch_one(&db.pool)
                .await
                .unwrap();
        if wakeup_status == "delivered" {
            assert!(
                after >= open_at,
                "published only once due (batch ended at {after}, open_at {open_at})"
            );
            break;
        }
        assert_eq!(wakeup_status, "pending", "not claimed before open_at_ms");
        assert!(
            report.claimed <= 2,
            "only the room events were claimed: {report:?}"
        );
        assert!(Instant::now() < deadline, "wake-up never published");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let delivered_at: i64 =
        sqlx::query_scalar("SELECT delivered_at_ms FROM room_outbox WHERE lane = 1")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert!(
        delivered_at >= open_at,
        "delivered at {delivered_at}, before open_at {open_at}"
    );
    assert_eq!(
        statuses(&db.pool, "room-t").await,
        vec![(1, "delivered".into()), (2, "delivered".into())]
    );
    let records = read_topic(&testkit::kafka_bootstrap(), &wake_topic, 1).await;
    let wakeup = outbox_schema::decode_wakeup(&records[0].payload).unwrap();
    assert_eq!(
        (wakeup.room_id.as_str(), wakeup.level, wakeup.open_at_ms),
        ("room-t", 1, open_at)
    );
    assert_eq!(records[0].key, "room-t");
}

#[tokio::test]
async fn broker_outage_keeps_rows_retryable_and_they_drain_after_recovery() {
    let db = testkit::TestDb::new().await;
    let mut broker = testkit::PrivateBroker::start().await;
    let mq = mq_config(&broker.bootstrap, &testkit::unique("ns"));
    let topic = mq.topic(names::TOPIC_ROOM_OUTBOX);
    testkit::create_topic_on(&broker.bootstrap, &topic, 1).await;
    let mut worker = worker_config("relay-1");
    worker.publish_timeout = service_kit::duration::ConfigDuration::from_millis(1_500);
    worker.max_retry_count = 1_000;
    let relay = mq_relay(&db.pool, &mq, &worker);
    let shards = own_all_shards(&relay).await;

    broker.stop();
    insert(&db.pool, &room_rows("room-outage", 1, 3)).await;
    let report = relay.run_batch(&shards).await.unwrap();
    assert_eq!(report.delivered, 0);
    assert_eq!(report.retried, 1, "the head failed and will be retried");
    assert_eq!(report.released, 2, "the rest wait behind it");
    assert_eq!(
        statuses(&db.pool, "room-outage").await,
        vec![
            (1, "retryable".into()),
            (2, "pending".into()),
            (3, "pending".into())
        ]
    );

    broker.restart().await;
    testkit::create_topic_on(&broker.bootstrap, &topic, 1).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while open_rows(&db.pool).await > 0 {
        assert!(
            Instant::now() < deadline,
            "outbox did not drain after the broker came back"
        );
        relay.run_batch(&shards).await.unwrap();
    }
    // At-least-once across a broker restart: a retried send may land twice,
    // but the room's order never goes backwards and nothing is missing.
    let records = read_distinct(&broker.bootstrap, &topic, 3).await;
    let mut sequences = sequences_by_room(&records).remove("room-outage").unwrap();
    assert_never_backwards("room-outage", &sequences);
    sequences.dedup();
    assert_eq!(sequences, vec![1, 2, 3]);
}
