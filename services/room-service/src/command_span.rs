//! The OpenTelemetry span of every room command (docs/design.md#tracing):
//! a server span for each gateway command (child of the gateway's
//! `traceparent`, or the root of a new trace without one), a server span on
//! the holder for a forwarded command (child of the forwarding instance's
//! span), and an internal span for the commands room-service issues itself
//! (child of whatever trace issued it, e.g. the treasure wake-up's consume
//! span; a root for the presence sweep).
//!
//! The command runs inside its span, so log lines carry its ids and a
//! forwarded call carries it to the holder; and the span's own context is
//! the `traceparent` the commit stores on the command's outbox rows, so every
//! row carries one and the relay's publish span is its child.

use std::future::Future;

use opentelemetry::{KeyValue, trace::SpanKind};
use service_kit::trace::TracedSpan;

use crate::validate::MAX_ROOM_ID_LEN;
use crate::{Error, ErrorCode};

/// The tracer (instrumentation scope) of room-service's spans.
const TRACER: &str = "room-service";

/// The span's attributes. `room_id` is not validated yet when the span
/// starts, so one the API would refuse (oversized, or outside the id
/// charset) is left out rather than copied into every exporter's storage.
fn attributes(service: &'static str, method: &'static str, room_id: &str) -> Vec<KeyValue> {
    let mut attributes = vec![
        KeyValue::new("rpc.system", "grpc"),
        KeyValue::new("rpc.service", service),
        KeyValue::new("rpc.method", method),
    ];
    if outbox_schema::ids::check_id(room_id, MAX_ROOM_ID_LEN).is_ok() {
        attributes.push(KeyValue::new("room_id", room_id.to_owned()));
    }
    attributes
}

/// The span of gateway command `method` (e.g. `JoinRoom`), continuing the
/// call's `traceparent` ("" or malformed → a new trace).
pub fn gateway(method: &'static str, traceparent: &str, room_id: &str) -> TracedSpan {
    TracedSpan::start(
        TRACER,
        format!("hyapp.room.v1.RoomService/{method}"),
        SpanKind::Server,
        traceparent,
        attributes("hyapp.room.v1.RoomService", method, room_id),
    )
}

/// The holder's span of a command another instance forwarded, continuing the
/// forwarding instance's command span (the call's `traceparent` metadata).
pub fn peer(traceparent: &str, room_id: &str) -> TracedSpan {
    TracedSpan::start(
        TRACER,
        "hyapp.room.v1.RoomPeer/Execute".to_owned(),
        SpanKind::Server,
        traceparent,
        attributes("hyapp.room.v1.RoomPeer", "Execute", room_id),
    )
}

/// The span of command `name` that room-service issues itself
/// (OpenTreasure for a wake-up, LeaveRoom for an expired presence): a child
/// of `traceparent` when given, else of the current context (the consume
/// span a wake-up is handled in), else the root of a new trace.
pub fn internal(name: &'static str, traceparent: &str, room_id: &str) -> TracedSpan {
    let parent = if traceparent.is_empty() {
        opentelemetry::Context::current()
    } else {
        service_kit::trace::context_from_traceparent(traceparent)
    };
    TracedSpan::start_in(
        TRACER,
        format!("room {name}"),
        SpanKind::Internal,
        &parent,
        vec![
            KeyValue::new("room.command", name),
            KeyValue::new("room_id", room_id.to_owned()),
        ],
    )
}

/// Runs `work` inside `span` and ends the span. Only failures of the
/// service itself mark the span failed; a refused command (bad input, a
/// room rule) is a correct answer, as a 4xx is for an HTTP server span.
pub async fn run<T>(
    span: TracedSpan,
    work: impl Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    let result = opentelemetry::trace::FutureExt::with_context(work, span.context().clone()).await;
    let failed = match &result {
        Err(error) if matches!(error.code(), ErrorCode::Internal | ErrorCode::Unavailable) => {
            Some(error.to_string())
        }
        _ => None,
    };
    span.finish(failed.as_deref());
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn has_room_id(room_id: &str) -> bool {
        attributes("hyapp.room.v1.RoomService", "JoinRoom", room_id)
            .iter()
            .any(|attribute| attribute.key.as_str() == "room_id")
    }

    #[test]
    fn only_a_room_id_the_api_would_accept_becomes_an_attribute() {
        assert!(has_room_id("room-1"));
        for hostile in [
            "a/b",
            "",
            "room\nforged=1",
            &"r".repeat(MAX_ROOM_ID_LEN + 1),
        ] {
            assert!(!has_room_id(hostile), "{hostile:?}");
        }
    }
}
