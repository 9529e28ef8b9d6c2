//! Prometheus metrics of the standalone relay's operator surface: the
//! console's and `/admin/*`'s logins. The relay engine's own metrics are
//! `relay_engine::metrics::RelayMetrics`.

use prometheus_client::{metrics::counter::Counter, registry::Registry};

/// The console's and `/admin/*`'s login metrics (standalone relay only: the
/// relay embedded in room-service serves no console).
#[derive(Debug, Clone, Default)]
pub struct ConsoleMetrics {
    /// `relay_console_login_failures_total`: wrong tokens presented (login
    /// form, bearer header, `/admin/*`).
    pub login_failures: Counter,
    /// `relay_console_login_throttled_total`: attempts refused with 429
    /// because too many wrong tokens came before.
    pub logins_throttled: Counter,
}

impl ConsoleMetrics {
    /// Creates the metrics and registers them in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "relay_console_login_failures",
            "Wrong tokens presented to the console or /admin",
            metrics.login_failures.clone(),
        );
        registry.register(
            "relay_console_login_throttled",
            "Console or /admin logins refused because of earlier wrong tokens",
            metrics.logins_throttled.clone(),
        );
        metrics
    }
}
