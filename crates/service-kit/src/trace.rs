//! W3C trace context across the pipeline, written once: a span that
//! continues the `traceparent` a message carries (stored with the outbox row,
//! sent as a Kafka header), and the `traceparent` to pass on. Spans go to the
//! process's OpenTelemetry tracer provider; with none installed they are
//! no-ops that still forward the incoming context.

use opentelemetry::{
    Context, KeyValue, global,
    propagation::TextMapPropagator,
    trace::{SpanKind, Status, TraceContextExt, Tracer as _},
};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use std::collections::HashMap;

/// The context described by a W3C `traceparent` ("" → an empty context).
pub fn context_from_traceparent(traceparent: &str) -> Context {
    let mut carrier = HashMap::new();
    if !traceparent.is_empty() {
        carrier.insert("traceparent".to_string(), traceparent.to_string());
    }
    TraceContextPropagator::new().extract(&carrier)
}

/// The W3C `traceparent` of `context` ("" when it carries no span).
pub fn traceparent_of(context: &Context) -> String {
    let mut carrier: HashMap<String, String> = HashMap::new();
    TraceContextPropagator::new().inject_context(context, &mut carrier);
    carrier.remove("traceparent").unwrap_or_default()
}

/// A span continuing a message's trace.
#[derive(Debug)]
pub struct TracedSpan {
    context: Context,
}

impl TracedSpan {
    /// Starts `name` as a child of `traceparent`'s span.
    pub fn start(
        tracer: &'static str,
        name: String,
        kind: SpanKind,
        traceparent: &str,
        attributes: Vec<KeyValue>,
    ) -> Self {
        let parent = context_from_traceparent(traceparent);
        let tracer = global::tracer(tracer);
        let span = tracer
            .span_builder(name)
            .with_kind(kind)
            .with_attributes(attributes)
            .start_with_context(&tracer, &parent);
        Self {
            context: parent.with_span(span),
        }
    }

    /// The context to run work in, so child spans attach to this one.
    pub fn context(&self) -> &Context {
        &self.context
    }

    /// The `traceparent` to pass downstream: this span, or the incoming one
    /// when nothing records spans.
    pub fn traceparent(&self) -> String {
        traceparent_of(&self.context)
    }

    /// Ends the span, marking it failed when `error` is given.
    pub fn finish(self, error: Option<&str>) {
        let span = self.context.span();
        if let Some(error) = error {
            span.set_status(Status::error(error.to_string()));
        }
        span.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_round_trips_and_empty_stays_empty() {
        let traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        assert_eq!(
            traceparent_of(&context_from_traceparent(traceparent)),
            traceparent
        );
        assert_eq!(traceparent_of(&context_from_traceparent("")), "");
        assert_eq!(traceparent_of(&context_from_traceparent("garbage")), "");
    }
}
