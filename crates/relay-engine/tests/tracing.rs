//! The relay continues the trace stored with each row: its publish span is a
//! child of the originating request's span, and the Kafka `traceparent`
//! header carries the publish span onwards to the consumers.

mod common;

use common::*;

use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use outbox_schema::names;

#[tokio::test]
async fn the_publish_span_continues_the_stored_trace_and_is_forwarded_in_the_header() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    opentelemetry::global::set_tracer_provider(provider.clone());

    let db = testkit::TestDb::new().await;
    let mq = mq_config(&testkit::kafka_bootstrap(), &testkit::unique("ns"));
    let topic = mq.topic(names::TOPIC_ROOM_OUTBOX);
    testkit::create_topic(&topic, 1).await;
    let row = room_rows("room-traced", 1, 1).remove(0);
    // 00-<trace id>-<parent span id>-01, as room-service stored it from the gRPC request.
    let stored_trace_id = &row.traceparent[3..35];
    let stored_parent = &row.traceparent[36..52];
    insert(&db.pool, std::slice::from_ref(&row)).await;
    let relay = mq_relay(&db.pool, &mq, &worker_config("relay-traced"));
    let shards = own_all_shards(&relay).await;
    assert_eq!(relay.run_batch(&shards).await.unwrap().delivered, 1);
    provider.force_flush().unwrap();

    let spans = exporter.get_finished_spans().unwrap();
    let publish = spans
        .iter()
        .find(|span| span.name == "room_outbox publish")
        .expect("a publish span");
    assert_eq!(
        publish.span_context.trace_id().to_string(),
        stored_trace_id,
        "same trace"
    );
    assert_eq!(
        publish.parent_span_id.to_string(),
        stored_parent,
        "child of the request span"
    );
    assert!(
        publish.attributes.iter().any(
            |kv| kv.key.as_str() == "messaging.message.id" && kv.value.as_str() == row.event_id
        )
    );

    let record = read_topic(&testkit::kafka_bootstrap(), &topic, 1)
        .await
        .remove(0);
    let expected = format!("00-{stored_trace_id}-{}-01", publish.span_context.span_id());
    assert_eq!(
        record.traceparent, expected,
        "consumers continue from the publish span"
    );
}
