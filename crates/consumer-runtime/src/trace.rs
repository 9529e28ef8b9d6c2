//! Continuing the event's trace in consumers: each attempt of each message
//! gets an OpenTelemetry consumer span, child of the `traceparent` header the
//! relay sent; handlers see that span's context in `Delivery::traceparent`
//! (and single-message handlers run inside it), so their IM calls join the
//! same trace.

use crate::message::Delivery;
use opentelemetry::{KeyValue, trace::SpanKind};
use outbox_schema::names::HEADER_TRACEPARENT;
use rdkafka::message::{Headers, Message, OwnedMessage};
use service_kit::trace::TracedSpan;

/// The message's `traceparent` header ("" when absent or not UTF-8).
pub(crate) fn header_traceparent(raw: &OwnedMessage) -> String {
    raw.headers()
        .and_then(|headers| {
            headers
                .iter()
                .find(|header| header.key == HEADER_TRACEPARENT)
        })
        .and_then(|header| header.value)
        .and_then(|value| std::str::from_utf8(value).ok())
        .unwrap_or_default()
        .to_string()
}

/// Starts one consume span per delivery and points each delivery's
/// `traceparent` at its span.
pub(crate) fn start_consume_spans<M>(
    consumer_group: &str,
    deliveries: &mut [Delivery<M>],
) -> Vec<TracedSpan> {
    deliveries
        .iter_mut()
        .map(|delivery| {
            let span = TracedSpan::start(
                "consumer-runtime",
                format!("{consumer_group} process"),
                SpanKind::Consumer,
                &delivery.traceparent,
                vec![
                    KeyValue::new("messaging.consumer.group.name", consumer_group.to_string()),
                    KeyValue::new("messaging.kafka.offset", delivery.offset),
                    KeyValue::new("attempt", i64::from(delivery.attempt)),
                ],
            );
            let traceparent = span.traceparent();
            if !traceparent.is_empty() {
                delivery.traceparent = traceparent;
            }
            span
        })
        .collect()
}

/// Ends the spans of a batch attempt.
pub(crate) fn finish_consume_spans(spans: Vec<TracedSpan>, succeeded: bool) {
    for span in spans {
        span.finish((!succeeded).then_some("batch failed"));
    }
}
