//! The `wallet` section (the wallet service gifts debit) and the `saga`
//! section (recovery of the gift saga's wallet calls); their checks name
//! the key.

use serde::{Deserialize, Serialize};
use service_kit::duration::ConfigDuration;
use service_kit::grpc_tls::ClientTls;

use crate::Error;
use service_kit::adjusted::Adjustments;

/// The `wallet` section.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WalletConfig {
    /// `http://host:port` (plaintext) or `https://host:port` (TLS) of the wallet gRPC service.
    pub endpoint: String,
    /// Deadline of one Debit/Refund call.
    pub timeout: ConfigDuration,
    /// How often an HTTP/2 PING checks the connection, idle or not; one not
    /// answered within `timeout` closes it, so a half-open connection is
    /// replaced before gifts queue on it. Zero or negative is refused.
    pub keepalive_interval: ConfigDuration,
    /// TLS of an `https://` endpoint.
    pub tls: ClientTls,
}

impl Default for WalletConfig {
    fn default() -> Self {
        Self {
            endpoint: "http://127.0.0.1:7601".into(),
            timeout: ConfigDuration::from_secs(2),
            keepalive_interval: ConfigDuration::from_secs(10),
            tls: ClientTls::default(),
        }
    }
}

/// The `saga` section.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SagaConfig {
    /// How often the recovery sweep runs.
    pub sweep_interval: ConfigDuration,
    /// A saga untouched this long is considered abandoned by a crash and
    /// compensated; also the wait after a failed refund before the next attempt.
    pub stuck_after: ConfigDuration,
    /// Refund calls a saga gets (the pipeline's and the sweep's together)
    /// before it ends `failed` and waits for an operator (docs/design.md#gift-saga).
    pub max_refund_attempts: u32,
}

impl Default for SagaConfig {
    fn default() -> Self {
        Self {
            sweep_interval: ConfigDuration::from_secs(30),
            stuck_after: ConfigDuration::from_secs(60),
            max_refund_attempts: 10,
        }
    }
}

impl WalletConfig {
    /// Builds the endpoint once: the scheme, the TLS files and an
    /// `https://` endpoint's trust are all checked before anything starts.
    /// A non-positive `timeout` falls back to 2 s with a warning.
    pub(super) fn validate(&mut self, adjusted: &mut Adjustments) -> Result<(), Error> {
        self.tls
            .endpoint("wallet.tls", "wallet.endpoint", &self.endpoint)
            .map_err(|error| Error::Config(error.to_string()))?;
        let default = ConfigDuration::from_secs(2);
        self.timeout = adjusted.positive("wallet.timeout", self.timeout, default);
        if !self.keepalive_interval.is_positive() {
            return Err(Error::Config(format!(
                "wallet.keepalive_interval must be positive, got {}",
                self.keepalive_interval
            )));
        }
        Ok(())
    }
}

impl SagaConfig {
    /// A saga needs at least one refund attempt; a non-positive
    /// `sweep_interval` or `stuck_after` falls back to its default with a
    /// warning.
    pub(super) fn validate(&mut self, adjusted: &mut Adjustments) -> Result<(), Error> {
        let sweep = ConfigDuration::from_secs(30);
        self.sweep_interval = adjusted.positive("saga.sweep_interval", self.sweep_interval, sweep);
        let stuck = ConfigDuration::from_secs(60);
        self.stuck_after = adjusted.positive("saga.stuck_after", self.stuck_after, stuck);
        if self.max_refund_attempts == 0 {
            return Err(Error::Config(
                "saga.max_refund_attempts must be at least 1".into(),
            ));
        }
        Ok(())
    }
}
