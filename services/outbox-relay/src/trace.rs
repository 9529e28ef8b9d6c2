//! OpenTelemetry around each publish: a producer span continuing the W3C
//! trace context stored with the row (the originating gRPC request's), whose
//! own context becomes the `traceparent` header consumers continue from.
//! Spans go to whatever tracer provider the process installed (none by
//! default, which makes this a no-op that still forwards the stored context).

use crate::store::OutboxRow;
use opentelemetry::{
    Context, KeyValue, global,
    propagation::TextMapPropagator,
    trace::{SpanKind, Status, TraceContextExt, Tracer as _},
};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use std::collections::HashMap;

/// The span of one publish attempt.
#[derive(Debug)]
pub struct PublishSpan {
    context: Context,
}

impl PublishSpan {
    /// Starts the span as a child of the row's stored trace context.
    pub fn start(row: &OutboxRow) -> Self {
        let mut carrier = HashMap::new();
        if !row.traceparent.is_empty() {
            carrier.insert("traceparent".to_string(), row.traceparent.clone());
        }
        let propagator = TraceContextPropagator::new();
        let parent = propagator.extract(&carrier);
        let tracer = global::tracer("outbox-relay");
        let span = tracer
            .span_builder("room_outbox publish")
            .with_kind(SpanKind::Producer)
            .with_attributes([
                KeyValue::new("messaging.message.id", row.event_id.clone()),
                KeyValue::new("messaging.destination.name", row.topic.clone()),
                KeyValue::new("room_id", row.room_id.clone()),
                KeyValue::new("event_type", row.event_type.clone()),
                KeyValue::new("retry_count", i64::from(row.retry_count)),
            ])
            .start_with_context(&tracer, &parent);
        Self {
            context: parent.with_span(span),
        }
    }

    /// The W3C `traceparent` to send downstream: this span's context, or the
    /// stored one when nothing records spans; empty when the row had none.
    pub fn traceparent(&self) -> String {
        let mut carrier: HashMap<String, String> = HashMap::new();
        TraceContextPropagator::new().inject_context(&self.context, &mut carrier);
        carrier.remove("traceparent").unwrap_or_default()
    }

    /// Ends the span with the publish outcome.
    pub fn finish(self, error: Option<&str>) {
        let span = self.context.span();
        if let Some(error) = error {
            span.set_status(Status::error(error.to_string()));
        }
        span.end();
    }
}
