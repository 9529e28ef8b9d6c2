//! Structured logging for every service: JSON lines in production, readable
//! text locally; level from `RUST_LOG` or the config's `log.level`.

use serde::{Deserialize, Serialize};
use tracing_subscriber::{EnvFilter, fmt, prelude::*};

/// The `log` section every service config carries.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// Default filter when `RUST_LOG` is unset, e.g. `info` or `info,sqlx=warn`.
    pub level: String,
    /// `json` (production) or `text`.
    pub format: LogFormat,
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
        }
    }
}

/// Installs the global subscriber. Calling it twice is harmless (the second
/// call is ignored), which keeps in-process tests that start several services simple.
pub fn init(service: &'static str, config: &LogConfig) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(config.level.as_str()));
    let registry = tracing_subscriber::registry().with(filter);
    let result = match config.format {
        LogFormat::Json => registry
            .with(
                fmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_current_span(false),
            )
            .try_init(),
        LogFormat::Text => registry.with(fmt::layer().compact()).try_init(),
    };
    if result.is_ok() {
        tracing::info!(service, "telemetry initialised");
    }
}
