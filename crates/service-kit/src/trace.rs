//! W3C trace context across the pipeline, written once: a span that
//! continues the `traceparent` a message carries (stored with the outbox row,
//! sent as a Kafka header), and the `traceparent` to pass on. Spans go to the
//! process's OpenTelemetry tracer provider; with none installed they are
//! no-ops that still forward the incoming context.

use opentelemetry::{
    Context, KeyValue, global,
    propagation::TextMapPropagator,
    trace::{SpanContext, SpanKind, Status, TraceContextExt, TraceFlags, TraceState, Tracer as _},
};
use opentelemetry_sdk::{
    propagation::TraceContextPropagator,
    trace::{IdGenerator as _, RandomIdGenerator},
};
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

/// The W3C `traceparent` of the current context ("" outside any span): what
/// work started here, such as a command a consumer issues, continues.
pub fn current_traceparent() -> String {
    Context::map_current(traceparent_of)
}

/// A span continuing a message's trace.
#[derive(Debug)]
pub struct TracedSpan {
    context: Context,
}

impl TracedSpan {
    /// Starts `name` as a child of `traceparent`'s span, or as the root of
    /// a new trace when `traceparent` is empty or invalid.
    pub fn start(
        tracer: &'static str,
        name: String,
        kind: SpanKind,
        traceparent: &str,
        attributes: Vec<KeyValue>,
    ) -> Self {
        Self::start_in(
            tracer,
            name,
            kind,
            &context_from_traceparent(traceparent),
            attributes,
        )
    }

    /// Starts `name` as a child of the span in `parent`, or as the root of a
    /// new trace when `parent` holds none.
    ///
    /// The span always has a valid context to pass on: without a tracer
    /// provider (export off, or a test that installs none) a root span would
    /// be a no-op without ids, so it gets fresh random ids instead: it is
    /// not recorded here, but what follows it downstream still forms one trace.
    pub fn start_in(
        tracer: &'static str,
        name: String,
        kind: SpanKind,
        parent: &Context,
        attributes: Vec<KeyValue>,
    ) -> Self {
        let tracer = global::tracer(tracer);
        let span = tracer
            .span_builder(name)
            .with_kind(kind)
            .with_attributes(attributes)
            .start_with_context(&tracer, parent);
        let context = parent.with_span(span);
        if context.span().span_context().is_valid() {
            return Self { context };
        }
        let ids = RandomIdGenerator::default();
        let unrecorded = SpanContext::new(
            ids.new_trace_id(),
            ids.new_span_id(),
            TraceFlags::SAMPLED,
            false,
            TraceState::NONE,
        );
        Self {
            context: parent.with_remote_span_context(unrecorded),
        }
    }

    /// The context to run work in, so child spans attach to this one.
    pub fn context(&self) -> &Context {
        &self.context
    }

    /// The `traceparent` to pass downstream: this span, or the incoming one
    /// when nothing records spans (never "").
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

    #[test]
    fn a_root_span_has_ids_even_without_a_tracer_provider() {
        // No provider is installed in this test binary: the global tracer is a no-op.
        let root = TracedSpan::start("test", "root".into(), SpanKind::Server, "", Vec::new());
        let traceparent = root.traceparent();
        assert_eq!(traceparent.len(), 55, "{traceparent}");
        assert!(traceparent.starts_with("00-") && traceparent.ends_with("-01"));
        let other = TracedSpan::start("test", "root".into(), SpanKind::Server, "", Vec::new());
        assert_ne!(
            other.traceparent()[3..35],
            traceparent[3..35],
            "each root is a new trace"
        );
        // A child continues the parent's trace; work run in it sees it as current.
        let child = TracedSpan::start(
            "test",
            "child".into(),
            SpanKind::Internal,
            &traceparent,
            Vec::new(),
        );
        assert_eq!(child.traceparent()[3..35], traceparent[3..35]);
        let _attached = child.context().clone().attach();
        assert_eq!(current_traceparent(), child.traceparent());
        root.finish(None);
        other.finish(Some("failed"));
    }
}
