//! Telemetry for every service: structured logs (JSON lines in production,
//! readable text locally; level from `RUST_LOG` or `log.level`) and, when
//! `log.otlp_endpoint` is set, OpenTelemetry trace export over OTLP/HTTP
//! (off by default). Spans are created by `service_kit::trace`.

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
    /// empty (the default) exports no traces.
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

/// Installs the global subscriber, logging to stdout. Calling it twice is
/// harmless (the second call is ignored), which keeps in-process tests that
/// start several services simple.
pub fn init(service: &'static str, config: &LogConfig) {
    init_writing_to(service, config, std::io::stdout);
}

/// [`init`] for a one-shot command of a service binary (the relay's operator
/// CLI): logs go to stderr, so its stdout stays the command's output — a
/// table, or JSON a script parses.
pub fn init_for_command(service: &'static str, config: &LogConfig) {
    init_writing_to(service, config, std::io::stderr);
}

fn init_writing_to<W>(service: &'static str, config: &LogConfig, writer: W)
where
    W: for<'writer> fmt::MakeWriter<'writer> + Send + Sync + 'static,
{
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(config.level.as_str()));
    let registry = tracing_subscriber::registry().with(filter);
    let result = match config.format {
        LogFormat::Json => registry
            .with(
                fmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_current_span(false)
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
    if !config.otlp_endpoint.is_empty() {
        match otlp_provider(service, &config.otlp_endpoint) {
            Ok(provider) => {
                opentelemetry::global::set_tracer_provider(provider.clone());
                let _ = TRACER_PROVIDER.set(provider);
                tracing::info!(service, endpoint = %config.otlp_endpoint, "exporting traces over otlp");
            }
            Err(error) => tracing::warn!(service, %error, "otlp trace export not started"),
        }
    }
}

/// A tracer provider batching spans to an OTLP/HTTP endpoint. The batch
/// processor runs on its own thread, so it never blocks the async runtime.
pub fn otlp_provider(service: &'static str, endpoint: &str) -> Result<SdkTracerProvider, String> {
    use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(endpoint)
        .with_headers(std::collections::HashMap::new())
        .build()
        .map_err(|error| format!("log.otlp_endpoint {endpoint}: {error}"))?;
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(Resource::builder().with_service_name(service).build())
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
        let provider = otlp_provider("test", "http://127.0.0.1:4318/v1/traces").unwrap();
        // Nothing listens there: shutting down must still return (export errors are reported, not hung on).
        let _ = provider.shutdown();
    }
}
