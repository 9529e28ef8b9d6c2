//! Telemetry for every service: structured logs (JSON lines in production,
//! each carrying `trace_id`/`span_id` when written inside a span; readable
//! text locally; level from `RUST_LOG` or `log.level`) and, when an endpoint
//! is configured (`log.otlp_endpoint` or the standard `OTEL_*` variables,
//! [`export`]), OpenTelemetry trace export over OTLP/HTTP (off by default).
//! Spans are created by `service_kit::trace`.

pub mod export;
mod json_log;

pub use export::TraceExport;
pub use json_log::WithTraceIds;

use opentelemetry::KeyValue;
use opentelemetry_sdk::{Resource, trace::SdkTracerProvider};
use serde::{Deserialize, Serialize};
use std::sync::OnceLock;
use tracing_subscriber::{EnvFilter, fmt, prelude::*};

/// The installed trace exporter's provider, flushed by [`shutdown`].
static TRACER_PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

/// The `log` section every service config carries.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// Default filter when `RUST_LOG` is unset, e.g. `info` or `info,sqlx=warn`.
    pub level: String,
    /// `json` (production) or `text`.
    pub format: LogFormat,
    /// OTLP/HTTP traces endpoint, e.g. `http://otel-collector:4318/v1/traces`;
    /// empty (the default) leaves it to `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`
    /// and `OTEL_EXPORTER_OTLP_ENDPOINT`, and with none of them set no traces
    /// are exported.
    pub otlp_endpoint: String,
}

/// Log line format.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// One JSON object per line.
    Json,
    /// Human-readable text.
    Text,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            level: "info,sqlx=warn,rdkafka=warn".into(),
            format: LogFormat::Json,
            otlp_endpoint: String::new(),
        }
    }
}

/// Installs the global subscriber, logging to stdout, and, when an endpoint
/// is configured (`log.otlp_endpoint` or the `OTEL_*` variables, see
/// [`export`]), trace export. A malformed `log.otlp_endpoint` or `OTEL_*`
/// value is refused before anything is installed. Calling it twice is
/// harmless (the second subscriber is ignored), which keeps in-process tests
/// that start several services simple.
pub fn init(service: &'static str, config: &LogConfig) -> Result<(), crate::Error> {
    init_writing_to(service, config, std::io::stdout)
}

/// [`init`] for a one-shot command of a service binary (an operator CLI):
/// logs go to stderr, so its stdout stays the command's output — a table, or
/// JSON a script parses.
pub fn init_for_command(service: &'static str, config: &LogConfig) -> Result<(), crate::Error> {
    init_writing_to(service, config, std::io::stderr)
}

fn init_writing_to<W>(
    service: &'static str,
    config: &LogConfig,
    writer: W,
) -> Result<(), crate::Error>
where
    W: for<'writer> fmt::MakeWriter<'writer> + Send + Sync + 'static,
{
    let export = TraceExport::resolve(service, &config.otlp_endpoint, |name| {
        std::env::var(name).ok()
    })?;
    // Built before anything is installed, so a refusal leaves nothing behind;
    // like the subscriber, only the first export installed stays.
    let provider = match &export.endpoint {
        Some(_) if TRACER_PROVIDER.get().is_none() => Some(otlp_provider(&export)?),
        _ => None,
    };
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(config.level.as_str()));
    let registry = tracing_subscriber::registry().with(filter);
    let result = match config.format {
        LogFormat::Json => registry
            .with(
                fmt::layer()
                    .fmt_fields(fmt::format::JsonFields::new())
                    .event_format(WithTraceIds(
                        fmt::format()
                            .json()
                            .flatten_event(true)
                            .with_current_span(false),
                    ))
                    .with_writer(writer),
            )
            .try_init(),
        LogFormat::Text => registry
            .with(fmt::layer().compact().with_writer(writer))
            .try_init(),
    };
    if result.is_ok() {
        tracing::info!(service, "telemetry initialised");
    }
    if let Some(provider) = provider
        && TRACER_PROVIDER.set(provider.clone()).is_ok()
    {
        opentelemetry::global::set_tracer_provider(provider);
        tracing::info!(
            service = %export.service_name,
            endpoint = %crate::secret::redact_url(export.endpoint.as_deref().unwrap_or_default()),
            from = export.endpoint_source,
            "exporting traces over otlp"
        );
    }
    Ok(())
}

/// A tracer provider batching spans to `export`'s OTLP/HTTP endpoint, with
/// its service name and resource attributes. The batch processor runs on its
/// own thread, so it never blocks the async runtime.
pub fn otlp_provider(export: &TraceExport) -> Result<SdkTracerProvider, crate::Error> {
    use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
    let endpoint = export.endpoint.as_deref().unwrap_or_default();
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(endpoint)
        .with_headers(std::collections::HashMap::new())
        .build()
        .map_err(|error| {
            crate::Error::Config(format!(
                "{} {}: {error}",
                export.endpoint_source,
                crate::secret::redact_url(endpoint)
            ))
        })?;
    // Built from nothing rather than `Resource::builder()`, whose detectors
    // read the same variables leniently: what is exported is exactly what
    // was resolved (and checked) above.
    let resource = Resource::builder_empty()
        .with_service_name(export.service_name.clone())
        .with_attributes(
            export
                .resource_attributes
                .iter()
                .map(|(key, value)| KeyValue::new(key.clone(), value.clone())),
        )
        .build();
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build())
}

/// Flushes and stops trace export (call once, at the end of `main`).
pub fn shutdown() {
    if let Some(provider) = TRACER_PROVIDER.get()
        && let Err(error) = provider.shutdown()
    {
        tracing::warn!(%error, "trace export shutdown failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn otlp_export_is_off_by_default_and_builds_when_configured() {
        assert!(LogConfig::default().otlp_endpoint.is_empty());
        let export = TraceExport::resolve("test", "", |_| None).unwrap();
        assert_eq!(export.endpoint, None);
        let export =
            TraceExport::resolve("test", "http://127.0.0.1:4318/v1/traces", |_| None).unwrap();
        let provider = otlp_provider(&export).unwrap();
        // Nothing listens there: shutting down must still return (export errors are reported, not hung on).
        let _ = provider.shutdown();
    }
}
