//! JSON log lines that name the trace they were written in: an event logged
//! while an OpenTelemetry span is the current context (a gRPC command, a
//! consume attempt, an IM call) carries `trace_id` and `span_id`, so a line
//! found in the logs leads to its trace and back. The rest of the line is
//! tracing-subscriber's own JSON format, unchanged.

use opentelemetry::{
    Context,
    trace::{SpanId, TraceContextExt, TraceId},
};
use std::fmt;
use tracing::{Event, Subscriber};
use tracing_subscriber::{
    fmt::{FmtContext, FormatEvent, FormatFields, format::Writer},
    registry::LookupSpan,
};

/// Wraps a JSON event format, adding the current span's ids to each line.
#[derive(Debug)]
pub struct WithTraceIds<F>(pub F);

/// The trace and span id of the current OpenTelemetry context, if it is in a span.
fn current_ids() -> Option<(TraceId, SpanId)> {
    Context::map_current(|context| {
        let span = context.span();
        let span_context = span.span_context();
        span_context
            .is_valid()
            .then(|| (span_context.trace_id(), span_context.span_id()))
    })
}

impl<S, N, F> FormatEvent<S, N> for WithTraceIds<F>
where
    S: Subscriber + for<'lookup> LookupSpan<'lookup>,
    N: for<'writer> FormatFields<'writer> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        // Outside a span the line is written as it always was, with no
        // extra buffer.
        let Some((trace_id, span_id)) = current_ids() else {
            return self.0.format_event(ctx, writer, event);
        };
        let mut line = String::with_capacity(256);
        self.0.format_event(ctx, Writer::new(&mut line), event)?;
        // The inner format writes one object and a newline; the ids go
        // inside the object, before its closing brace.
        match line.strip_suffix("}\n") {
            Some(object) => writeln!(
                writer,
                "{object},\"trace_id\":\"{trace_id}\",\"span_id\":\"{span_id}\"}}"
            ),
            None => writer.write_str(&line),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{SpanContext, TraceFlags, TraceState};
    use std::sync::{Arc, Mutex};
    use tracing_subscriber::{fmt, prelude::*};

    /// Collects what the layer writes.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Lines {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(|poison| poison.into_inner())
                .extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn parsed(lines: &Lines) -> Vec<serde_json::Value> {
        String::from_utf8(lines.0.lock().unwrap().clone())
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).expect("each line is one JSON object"))
            .collect()
    }

    #[test]
    fn lines_in_a_span_carry_its_ids_and_others_do_not() {
        let lines = Lines::default();
        let writer = lines.clone();
        let subscriber = tracing_subscriber::registry().with(
            fmt::layer()
                .fmt_fields(fmt::format::JsonFields::new())
                .event_format(WithTraceIds(
                    fmt::format()
                        .json()
                        .flatten_event(true)
                        .with_current_span(false),
                ))
                .with_writer(move || writer.clone()),
        );
        let span = SpanContext::new(
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap(),
            SpanId::from_hex("00f067aa0ba902b7").unwrap(),
            TraceFlags::SAMPLED,
            true,
            TraceState::NONE,
        );
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(room_id = "r1", "outside");
            let _attached = Context::new().with_remote_span_context(span).attach();
            tracing::info!(room_id = "r1", "inside");
        });
        let lines = parsed(&lines);
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["message"], "outside");
        assert!(lines[0].get("trace_id").is_none(), "{}", lines[0]);
        assert!(lines[0].get("span_id").is_none(), "{}", lines[0]);
        assert_eq!(lines[1]["message"], "inside");
        assert_eq!(lines[1]["room_id"], "r1", "the event's own fields stay");
        assert_eq!(lines[1]["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(lines[1]["span_id"], "00f067aa0ba902b7");
    }
}
