//! An OTLP/HTTP trace receiver for tests: it accepts what a service's
//! exporter sends (`POST /v1/traces`, a protobuf `ExportTraceServiceRequest`)
//! and keeps the spans, flattened, for the test to inspect — the same wire
//! format an OpenTelemetry Collector receives, so a test through it checks
//! what operators' collectors will see.
//!
//! It listens on 127.0.0.1 only: the test's own process (whose exporter
//! sends to it) is its only caller. It runs on its own thread and runtime,
//! so it outlives each `#[tokio::test]`'s runtime and can be shared by the
//! tests of one binary (the tracer provider is process-wide too).

use axum::{
    Router,
    body::Bytes,
    extract::State,
    http::{HeaderMap, StatusCode, header::CONTENT_TYPE},
    routing::post,
};
use opentelemetry_proto::tonic::{
    collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse},
    common::v1::{AnyValue, KeyValue, any_value::Value},
    trace::v1::span::SpanKind,
};
use prost::Message as _;
use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

/// Most spans kept; past it further exports are refused (a test that needs
/// more has a runaway loop, and the receiver must not grow without bound).
pub const MAX_SPANS: usize = 100_000;

/// The content type of OTLP/HTTP protobuf.
const PROTOBUF: &str = "application/x-protobuf";

/// One received span, flattened with its resource's service name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedSpan {
    /// `service.name` of the exporting process.
    pub service_name: String,
    /// The instrumentation scope (the tracer's name).
    pub scope: String,
    /// Span name.
    pub name: String,
    /// `SPAN_KIND_SERVER`, `SPAN_KIND_CLIENT`, ….
    pub kind: String,
    /// 32 lowercase hex digits.
    pub trace_id: String,
    /// 16 lowercase hex digits.
    pub span_id: String,
    /// 16 lowercase hex digits; "" for a root span.
    pub parent_span_id: String,
    /// Attributes, values as text.
    pub attributes: Vec<(String, String)>,
}

impl ReceivedSpan {
    /// The attribute `key` as text, if present.
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(name, _)| name == key)
            .map(|(_, value)| value.as_str())
    }
}

/// A running receiver; stops when dropped.
#[derive(Debug)]
pub struct OtlpReceiver {
    addr: SocketAddr,
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl OtlpReceiver {
    /// Starts a receiver on a free loopback port.
    ///
    /// # Panics
    /// When no port can be bound or the thread cannot start.
    pub fn start() -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind otlp receiver");
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        let addr = listener.local_addr().expect("receiver address");
        let spans = Arc::new(Mutex::new(Vec::new()));
        let router = Router::new()
            .route("/v1/traces", post(export))
            .with_state(spans.clone());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("otlp-receiver".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("receiver runtime");
                runtime.block_on(async move {
                    let listener =
                        tokio::net::TcpListener::from_std(listener).expect("tokio listener");
                    let _ = axum::serve(listener, router)
                        .with_graceful_shutdown(async {
                            let _ = stopped.await;
                        })
                        .await;
                });
            })
            .expect("start receiver thread");
        Self {
            addr,
            spans,
            stop: Some(stop),
        }
    }

    /// The base URL, as `OTEL_EXPORTER_OTLP_ENDPOINT` takes it.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The traces URL, as `log.otlp_endpoint` and
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` take it.
    pub fn traces_url(&self) -> String {
        format!("{}/v1/traces", self.base_url())
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.spans.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The spans of trace `trace_id` received so far.
    pub fn trace(&self, trace_id: &str) -> Vec<ReceivedSpan> {
        let spans = self.spans.lock().unwrap_or_else(|p| p.into_inner());
        spans
            .iter()
            .filter(|span| span.trace_id == trace_id)
            .cloned()
            .collect()
    }

    /// Polls until `found` returns `Some` for the spans received so far, or
    /// `timeout` passes (`None`). Exporters send in batches, every few
    /// seconds: give it tens of seconds.
    pub async fn wait_for<T>(
        &self,
        timeout: Duration,
        mut found: impl FnMut(&[ReceivedSpan]) -> Option<T>,
    ) -> Option<T> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(value) = found(&self.spans()) {
                return Some(value);
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// `POST /v1/traces`.
async fn export(
    State(spans): State<Arc<Mutex<Vec<ReceivedSpan>>>>,
    headers: HeaderMap,
    body: Bytes,
) -> (
    StatusCode,
    [(axum::http::HeaderName, &'static str); 1],
    Vec<u8>,
) {
    let reply = |status: StatusCode, body: Vec<u8>| (status, [(CONTENT_TYPE, PROTOBUF)], body);
    let content_type = headers
        .get(CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    if content_type != PROTOBUF {
        return reply(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("content-type must be {PROTOBUF}, got {content_type:?}").into_bytes(),
        );
    }
    let request = match ExportTraceServiceRequest::decode(body) {
        Ok(request) => request,
        Err(error) => {
            return reply(
                StatusCode::BAD_REQUEST,
                format!("not an ExportTraceServiceRequest: {error}").into_bytes(),
            );
        }
    };
    let received = flatten(request);
    let mut spans = spans.lock().unwrap_or_else(|p| p.into_inner());
    if spans.len() + received.len() > MAX_SPANS {
        return reply(
            StatusCode::INSUFFICIENT_STORAGE,
            format!("the receiver keeps at most {MAX_SPANS} spans").into_bytes(),
        );
    }
    spans.extend(received);
    reply(
        StatusCode::OK,
        ExportTraceServiceResponse::default().encode_to_vec(),
    )
}

/// The request's spans, each with its resource's service name and its scope.
fn flatten(request: ExportTraceServiceRequest) -> Vec<ReceivedSpan> {
    let mut flat = Vec::new();
    for resource_spans in request.resource_spans {
        let resource = resource_spans.resource.unwrap_or_default();
        let service_name = attributes(&resource.attributes)
            .into_iter()
            .find(|(key, _)| key == "service.name")
            .map(|(_, value)| value)
            .unwrap_or_default();
        for scope_spans in resource_spans.scope_spans {
            let scope = scope_spans.scope.unwrap_or_default().name;
            for span in scope_spans.spans {
                flat.push(ReceivedSpan {
                    service_name: service_name.clone(),
                    scope: scope.clone(),
                    kind: SpanKind::try_from(span.kind)
                        .map(|kind| kind.as_str_name().to_owned())
                        .unwrap_or_else(|_| format!("unknown kind {}", span.kind)),
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    attributes: attributes(&span.attributes),
                    name: span.name,
                });
            }
        }
    }
    flat
}

fn attributes(attributes: &[KeyValue]) -> Vec<(String, String)> {
    attributes
        .iter()
        .map(|attribute| (attribute.key.clone(), text(attribute.value.as_ref())))
        .collect()
}

fn text(value: Option<&AnyValue>) -> String {
    match value.and_then(|value| value.value.as_ref()) {
        Some(Value::StringValue(text)) => text.clone(),
        Some(Value::BoolValue(flag)) => flag.to_string(),
        Some(Value::IntValue(number)) => number.to_string(),
        Some(Value::DoubleValue(number)) => number.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::{
        resource::v1::Resource,
        trace::v1::{ResourceSpans, ScopeSpans, Span},
    };

    fn string(key: &str, value: &str) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Some(AnyValue {
                value: Some(Value::StringValue(value.into())),
            }),
        }
    }

    #[tokio::test]
    async fn an_export_is_decoded_and_bad_ones_are_refused() {
        let receiver = OtlpReceiver::start();
        let request = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(Resource {
                    attributes: vec![string("service.name", "room-service")],
                    ..Resource::default()
                }),
                scope_spans: vec![ScopeSpans {
                    spans: vec![Span {
                        trace_id: vec![0xab; 16],
                        span_id: vec![0x01; 8],
                        name: "command".into(),
                        kind: SpanKind::Server as i32,
                        attributes: vec![string("room_id", "r1")],
                        ..Span::default()
                    }],
                    ..ScopeSpans::default()
                }],
                ..ResourceSpans::default()
            }],
        };
        let client = reqwest::Client::new();
        let post = |content_type: &'static str, body: Vec<u8>| {
            client
                .post(receiver.traces_url())
                .header(CONTENT_TYPE, content_type)
                .body(body)
                .send()
        };
        let accepted = post(PROTOBUF, request.encode_to_vec()).await.unwrap();
        assert_eq!(accepted.status(), 200);
        let json = post("application/json", b"{}".to_vec()).await.unwrap();
        assert_eq!(json.status(), 415);
        let garbage = post(PROTOBUF, vec![0xff; 7]).await.unwrap();
        assert_eq!(garbage.status(), 400);

        let spans = receiver.spans();
        assert_eq!(spans.len(), 1, "{spans:?}");
        let span = &spans[0];
        assert_eq!(span.service_name, "room-service");
        assert_eq!(span.name, "command");
        assert_eq!(span.kind, "SPAN_KIND_SERVER");
        assert_eq!(span.trace_id, "ab".repeat(16));
        assert_eq!(span.span_id, "0101010101010101");
        assert_eq!(span.parent_span_id, "");
        assert_eq!(span.attribute("room_id"), Some("r1"));
        assert_eq!(receiver.trace(&"ab".repeat(16)).len(), 1);
        assert!(receiver.trace(&"cd".repeat(16)).is_empty());
    }
}
