//! Scratch: does the broker serve a fetch that starts in the middle of a record batch?
use consumer_runtime::testing::{TestProducer, envelope};
use outbox_schema::pb;
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList, consumer::{Consumer, StreamConsumer}};
use std::time::Duration;

#[tokio::test]
async fn mid_batch_fetch() {
    let topic = testkit::unique("scratch_");
    testkit::create_topic(&topic, 1).await;
    let producer = TestProducer::new(&testkit::kafka_bootstrap()).unwrap();
    let events: Vec<_> = (0..10).map(|i| envelope(&format!("e{i}"), "r", i, pb::room_outbox_event::Payload::RoomUserJoined(pb::RoomUserJoined { user_id: "u".into() }))).collect();
    producer.send_events(&topic, &events).await.unwrap();
    let consumer: StreamConsumer = ClientConfig::new().set("bootstrap.servers", testkit::kafka_bootstrap()).set("group.id", testkit::unique("g")).create().unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(&topic, 0, Offset::Offset(5)).unwrap();
    consumer.assign(&tpl).unwrap();
    let mut got = vec![];
    while let Ok(Ok(m)) = tokio::time::timeout(Duration::from_secs(5), consumer.recv()).await {
        got.push(m.offset());
        if got.len() >= 5 { break; }
    }
    println!("SCRATCH offsets from 5: {got:?}");
}
