//! Proves the test infrastructure itself: a migrated per-test database and a
//! real produce/consume round trip through the broker with rdkafka.

use rdkafka::{
    ClientConfig, Message,
    consumer::{Consumer, StreamConsumer},
    message::{Header, Headers, OwnedHeaders},
    producer::{FutureProducer, FutureRecord},
};
use std::time::Duration;

#[tokio::test]
async fn per_test_database_is_migrated() {
    let db = testkit::TestDb::new().await;
    let tables: Vec<(String,)> = sqlx::query_as(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = ? ORDER BY table_name",
    )
    .bind(&db.name)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let names: Vec<&str> = tables.iter().map(|(name,)| name.as_str()).collect();
    for expected in [
        "room_outbox",
        "room_command_log",
        "rooms",
        "consumer_dedup",
        "room_gift_saga",
    ] {
        assert!(names.contains(&expected), "missing {expected} in {names:?}");
    }
}

#[tokio::test]
async fn broker_round_trip_with_idempotent_producer_headers_and_group_commit() {
    let topic = testkit::unique("it_roundtrip_");
    testkit::create_topic(&topic, 2).await;
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", testkit::kafka_bootstrap())
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .create()
        .unwrap();
    for index in 0..5 {
        let payload = format!("payload-{index}");
        let headers = OwnedHeaders::new().insert(Header {
            key: "event_id",
            value: Some(&format!("e{index}")),
        });
        producer
            .send(
                FutureRecord::to(&topic)
                    .key("room-1")
                    .payload(&payload)
                    .headers(headers),
                Duration::from_secs(10),
            )
            .await
            .map_err(|(error, _)| error)
            .unwrap();
    }

    let group = testkit::unique("it_group_");
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", testkit::kafka_bootstrap())
        .set("group.id", &group)
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    consumer.subscribe(&[&topic]).unwrap();
    let mut seen = Vec::new();
    while seen.len() < 5 {
        let message = tokio::time::timeout(Duration::from_secs(30), consumer.recv())
            .await
            .expect("message within 30s")
            .unwrap();
        let event_id = message
            .headers()
            .and_then(|headers| headers.iter().find(|header| header.key == "event_id"))
            .and_then(|header| header.value)
            .map(|value| String::from_utf8_lossy(value).into_owned())
            .unwrap();
        let payload = String::from_utf8_lossy(message.payload().unwrap()).into_owned();
        assert_eq!(message.key(), Some(&b"room-1"[..]));
        seen.push((event_id, payload));
        consumer
            .commit_message(&message, rdkafka::consumer::CommitMode::Sync)
            .unwrap();
    }
    // Same key → same partition → producer order is preserved.
    let expected: Vec<(String, String)> = (0..5)
        .map(|index| (format!("e{index}"), format!("payload-{index}")))
        .collect();
    assert_eq!(seen, expected);
}
