//! The `redis` section: the client's URL and TLS, room leases, the
//! liveness key of fast takeover, and the pool; its checks name the key.

use serde::{Deserialize, Serialize};
use service_kit::duration::ConfigDuration;

use crate::Error;
use service_kit::adjusted::Adjustments;

/// The `redis` section. `Debug` is its redacted dump, so the URL's password
/// never prints.
#[derive(Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedisConfig {
    /// `redis://host:port/db`, `rediss://` for TLS, or a primary behind
    /// Sentinel: `redis-sentinel://` / `rediss-sentinel://`
    /// `sentinel:26379/db?sentinelServiceName=<name>&node=<sentinel>…`
    /// (service_kit::redis). A password in it is shown as `***` by
    /// `--dump-config`.
    #[serde(serialize_with = "service_kit::secret::serialize_redacted_url")]
    pub url: String,
    /// PEM file of the CA(s) a `rediss://` server's certificate must chain
    /// to; empty = the system's roots.
    pub tls_ca_file: String,
    /// Development only: accept a Redis off this machine without TLS or a
    /// password (service_kit::redis::check_transport).
    pub allow_insecure_transport: bool,
    /// Room lease validity; renewed at a third of it while the cell is loaded.
    pub lease_ttl: ConfigDuration,
    /// TTL of this instance's liveness key, renewed four times per TTL: a
    /// holder whose key lapsed loses its rooms to the next caller, so this
    /// is how long a dead instance's rooms stay unavailable
    /// (docs/design.md#fast-takeover). `0` turns fast takeover off (rooms
    /// wait for `lease_ttl`), e.g. while older releases still run.
    pub liveness_ttl: ConfigDuration,
    /// Deadline of one Redis command, so an outage or a stalled connection
    /// fails requests instead of hanging them; also bounds opening a
    /// connection (at least 500 ms), after which an unanswered connection
    /// is reopened (service_kit::redis::client_builder).
    pub command_timeout: ConfigDuration,
    /// Connections in the client pool.
    pub pool_size: usize,
    /// Prefix of every key, so deployments (and test runs) can share a Redis.
    pub key_prefix: String,
}

impl std::fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        service_kit::config::debug_as_dump(self, f)
    }
}

impl RedisConfig {
    /// Where these settings live, for error messages.
    pub const KEYS: service_kit::redis::RedisKeys = service_kit::redis::RedisKeys {
        url: "redis.url",
        tls_ca_file: "redis.tls_ca_file",
    };

    /// The Redis client settings (TLS included), checked; errors name the key.
    pub fn client_config(&self) -> Result<fred::types::config::Config, Error> {
        service_kit::redis::check_transport(
            Self::KEYS,
            "redis.allow_insecure_transport",
            &self.url,
            self.allow_insecure_transport,
        )
        .and_then(|()| service_kit::redis::client_config(Self::KEYS, &self.url, &self.tls_ca_file))
        .map_err(|error| match error {
            service_kit::Error::Config(message) => Error::Config(message),
            other => Error::Config(other.to_string()),
        })
    }
}

impl Default for RedisConfig {
    fn default() -> Self {
        Self {
            url: "redis://127.0.0.1:6379".into(),
            tls_ca_file: String::new(),
            allow_insecure_transport: false,
            lease_ttl: ConfigDuration::from_secs(30),
            liveness_ttl: ConfigDuration::from_secs(1),
            command_timeout: ConfigDuration::from_secs(1),
            pool_size: 4,
            key_prefix: "hyapp".into(),
        }
    }
}

impl RedisConfig {
    /// Checks the section: the client settings (scheme, CA file) are built
    /// once now rather than at the first connect; a lease shorter than 1 s
    /// and a liveness TTL outside 200 ms..=`lease_ttl` (or 0, off) are
    /// refused; so is a pool outside 1..=64 connections. A non-positive
    /// `command_timeout` falls back to 1 s with a warning.
    pub(super) fn validate(&mut self, adjusted: &mut Adjustments) -> Result<(), Error> {
        self.client_config()?;
        if self.lease_ttl.as_millis() < 1_000 {
            return Err(Error::Config(format!(
                "redis.lease_ttl must be at least 1s, got {}",
                self.lease_ttl
            )));
        }
        let liveness = self.liveness_ttl.as_millis();
        if liveness != 0 && !(200..=self.lease_ttl.as_millis()).contains(&liveness) {
            return Err(Error::Config(format!(
                "redis.liveness_ttl must be 0 (off) or between 200ms and redis.lease_ttl ({}), got {}",
                self.lease_ttl, self.liveness_ttl
            )));
        }
        self.command_timeout = adjusted.positive(
            "redis.command_timeout",
            self.command_timeout,
            ConfigDuration::from_secs(1),
        );
        // Refused rather than clamped: a pool of 0 serves no command, and a
        // value above the bound would quietly run with fewer connections
        // than the file says.
        if !(1..=64).contains(&self.pool_size) {
            return Err(Error::Config(format!(
                "redis.pool_size must be in 1..=64, got {}",
                self.pool_size
            )));
        }
        Ok(())
    }
}
