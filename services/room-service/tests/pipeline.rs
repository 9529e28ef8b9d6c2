//! The whole write path in one process, against the real broker: gRPC
//! command → one MySQL transaction → the embedded relay (woken by the Redis
//! commit nudge) → `hyapp_room_outbox`, with the reply's event ids, in room
//! order, keyed by room. Seed 000's "sync-publish" rows map to this: the
//! command succeeds, the outbox row is written pending, the relay delivers the
//! same event_id.

mod common;

use common::*;
use rdkafka::{
    ClientConfig, Message,
    consumer::{Consumer, StreamConsumer},
};
use std::time::Duration;

#[tokio::test]
async fn commands_reach_the_topic_through_the_embedded_relay_in_room_order() {
    let namespace = testkit::unique("ns");
    let topic = format!("{namespace}.{}", outbox_schema::names::TOPIC_ROOM_OUTBOX);
    testkit::create_topic(&topic, 3).await;
    let harness = Harness::start_with(|config| {
        config.rocketmq.enabled = true;
        config.rocketmq.name_servers = vec![testkit::kafka_bootstrap()];
        config.rocketmq.namespace = namespace.clone();
        config.rocketmq.room_outbox.enabled = true;
        config.outbox_worker.enabled = true;
        config.outbox_worker.publish_mode = "mq".into();
        config.outbox_worker.node_id = testkit::unique("relay-");
        config.outbox_worker.redis_url = testkit::redis_url();
        config.outbox_worker.nudge_enabled = true;
    })
    .await;
    let mut client = harness.client.clone();
    let room = testkit::unique("room-e2e-");
    let mut expected = Vec::new();
    let reply = client
        .create_room(create(&room, "host"))
        .await
        .unwrap()
        .into_inner();
    expected.extend(
        reply
            .events
            .iter()
            .map(|event| (event.event_id.clone(), event.seq)),
    );
    for user in ["alice", "bob"] {
        let reply = client
            .join_room(join(&room, user))
            .await
            .unwrap()
            .into_inner();
        expected.extend(
            reply
                .events
                .iter()
                .map(|event| (event.event_id.clone(), event.seq)),
        );
    }
    let reply = client
        .send_gift(gift(&room, &testkit::unique("gift-"), "alice", "bob", 2, 5))
        .await
        .unwrap()
        .into_inner();
    expected.extend(
        reply
            .events
            .iter()
            .map(|event| (event.event_id.clone(), event.seq)),
    );
    assert!(
        expected.len() >= 5,
        "create, two joins, gift + heat: {expected:?}"
    );

    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", testkit::kafka_bootstrap())
        .set("group.id", testkit::unique("e2e-"))
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    consumer.subscribe(&[&topic]).unwrap();
    let mut seen = Vec::new();
    while seen.len() < expected.len() {
        let message = tokio::time::timeout(Duration::from_secs(30), consumer.recv())
            .await
            .expect("events on the topic within 30s")
            .unwrap();
        assert_eq!(message.key(), Some(room.as_bytes()), "key = room_id");
        let envelope = outbox_schema::decode_envelope(message.payload().unwrap()).unwrap();
        seen.push((envelope.event_id, envelope.room_event_seq));
    }
    assert_eq!(
        seen, expected,
        "every event of every reply, in commit order, same event ids"
    );
    assert!(
        eventually(Duration::from_secs(10), || async {
            harness.count("room_outbox", "status", "delivered").await == expected.len() as i64
        })
        .await,
        "rows marked delivered"
    );
    harness.stop().await;
}
