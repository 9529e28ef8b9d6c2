//! OpenTelemetry around each publish: a producer span continuing the W3C
//! trace context stored with the row (the originating gRPC request's), whose
//! own context becomes the `traceparent` header consumers continue from.

use crate::store::OutboxRow;
use opentelemetry::{KeyValue, trace::SpanKind};
use service_kit::trace::TracedSpan;

/// Starts the publish span of `row`.
pub fn publish_span(row: &OutboxRow) -> TracedSpan {
    TracedSpan::start(
        "outbox-relay",
        "room_outbox publish".into(),
        SpanKind::Producer,
        &row.traceparent,
        vec![
            KeyValue::new("messaging.message.id", row.event_id.clone()),
            KeyValue::new("messaging.destination.name", row.topic.clone()),
            KeyValue::new("room_id", row.room_id.clone()),
            KeyValue::new("event_type", row.event_type.clone()),
            KeyValue::new("retry_count", i64::from(row.retry_count)),
        ],
    )
}
