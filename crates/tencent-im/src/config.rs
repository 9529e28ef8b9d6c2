//! Client configuration, the redacting [`Secret`] newtype, and the tiny duration syntax.
//!
//! Durations in config files are strings with a unit suffix — `"500ms"`, `"3s"`, `"10m"`,
//! `"2h"`, `"7d"` — or a bare integer meaning milliseconds. That covers every value this
//! crate needs without pulling in a humantime dependency.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use crate::Error;

/// Default UserSig validity: 7 days.
pub const DEFAULT_USERSIG_TTL: Duration = Duration::from_secs(7 * 24 * 3600);
/// Default per-request timeout.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// Default per-API call rate, Tencent's documented 200 calls/s per REST API.
pub const DEFAULT_RATE_LIMIT_PER_API: u32 = 200;
/// Default group messages per group per second: Tencent's documented limit
/// of 40 per group, whatever the group type (Use Limits page).
pub const DEFAULT_GROUP_MSG_PER_SECOND: u32 = 40;

/// A secret string whose Debug and Display print `***`, so it cannot leak through logs.
///
/// It is deliberately not `Serialize`; call [`Secret::expose`] at the single point of use.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The raw secret; only the signing code should call this.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Secret(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Secret(value.to_owned())
    }
}

/// Settings for [`crate::Client`].
#[derive(Clone, Debug, Deserialize)]
pub struct ClientConfig {
    /// Scheme and host, no trailing path: `https://console.tim.qq.com` or `http://127.0.0.1:PORT`.
    pub base_url: String,
    /// The IM application's SDKAppID.
    pub sdk_app_id: u64,
    /// The app admin account the REST calls are made as.
    pub admin_identifier: String,
    /// The app's UserSig signing key.
    pub secret_key: Secret,
    /// Validity of generated UserSigs; they are cached and regenerated before expiry.
    #[serde(
        default = "default_usersig_ttl",
        deserialize_with = "deserialize_duration"
    )]
    pub usersig_ttl: Duration,
    /// Whole-request timeout, connect included.
    #[serde(
        default = "default_request_timeout",
        deserialize_with = "deserialize_duration"
    )]
    pub request_timeout: Duration,
    /// Client-side calls per second per API path; callers wait for a token rather than fail.
    #[serde(default = "default_rate_limit")]
    pub rate_limit_per_api: u32,
    /// Group messages per group per second: Tencent's per-group limit,
    /// enforced client-side by [`crate::pacer::GroupPacer`].
    #[serde(default = "default_group_msg_per_second")]
    pub group_msg_per_second: u32,
}

impl ClientConfig {
    /// A config with the documented defaults for everything but the identity.
    pub fn new(
        base_url: impl Into<String>,
        sdk_app_id: u64,
        admin_identifier: impl Into<String>,
        secret_key: impl Into<Secret>,
    ) -> Self {
        ClientConfig {
            base_url: base_url.into(),
            sdk_app_id,
            admin_identifier: admin_identifier.into(),
            secret_key: secret_key.into(),
            usersig_ttl: DEFAULT_USERSIG_TTL,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            rate_limit_per_api: DEFAULT_RATE_LIMIT_PER_API,
            group_msg_per_second: DEFAULT_GROUP_MSG_PER_SECOND,
        }
    }

    /// Rejects values the client cannot work with.
    pub fn validate(&self) -> Result<(), Error> {
        if !(self.base_url.starts_with("http://") || self.base_url.starts_with("https://")) {
            return Err(Error::Config(
                "base_url must start with http:// or https://".into(),
            ));
        }
        if self.admin_identifier.is_empty() {
            return Err(Error::Config("admin_identifier is empty".into()));
        }
        if self.secret_key.expose().is_empty() {
            return Err(Error::Config("secret_key is empty".into()));
        }
        if self.usersig_ttl < Duration::from_secs(2) {
            return Err(Error::Config("usersig_ttl must be at least 2s".into()));
        }
        if self.request_timeout.is_zero() {
            return Err(Error::Config("request_timeout must be positive".into()));
        }
        if self.rate_limit_per_api == 0 {
            return Err(Error::Config("rate_limit_per_api must be positive".into()));
        }
        if self.group_msg_per_second == 0 {
            return Err(Error::Config(
                "group_msg_per_second must be positive".into(),
            ));
        }
        Ok(())
    }
}

fn default_usersig_ttl() -> Duration {
    DEFAULT_USERSIG_TTL
}

fn default_request_timeout() -> Duration {
    DEFAULT_REQUEST_TIMEOUT
}

fn default_rate_limit() -> u32 {
    DEFAULT_RATE_LIMIT_PER_API
}

fn default_group_msg_per_second() -> u32 {
    DEFAULT_GROUP_MSG_PER_SECOND
}

/// Parses `"500ms"`, `"3s"`, `"10m"`, `"2h"`, `"7d"`, or a bare integer of milliseconds.
pub fn parse_duration(text: &str) -> Result<Duration, Error> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let value: u64 = digits
        .parse()
        .map_err(|_| Error::Config(format!("duration {text:?} has no leading integer")))?;
    let unit_ms: u64 = match unit.trim() {
        "" | "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        other => {
            return Err(Error::Config(format!(
                "duration unit {other:?} is not one of ms, s, m, h, d"
            )));
        }
    };
    value
        .checked_mul(unit_ms)
        .map(Duration::from_millis)
        .ok_or_else(|| Error::Config(format!("duration {text:?} overflows")))
}

/// Serde adapter for [`parse_duration`]; accepts a string or an integer of milliseconds.
pub fn deserialize_duration<'de, D: Deserializer<'de>>(de: D) -> Result<Duration, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Millis(u64),
        Text(String),
    }
    match Raw::deserialize(de)? {
        Raw::Millis(ms) => Ok(Duration::from_millis(ms)),
        Raw::Text(text) => parse_duration(&text).map_err(serde::de::Error::custom),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_every_unit() {
        assert_eq!(
            parse_duration("500ms").ok(),
            Some(Duration::from_millis(500))
        );
        assert_eq!(parse_duration("3s").ok(), Some(Duration::from_secs(3)));
        assert_eq!(parse_duration("10m").ok(), Some(Duration::from_secs(600)));
        assert_eq!(parse_duration("2h").ok(), Some(Duration::from_secs(7200)));
        assert_eq!(parse_duration("7d").ok(), Some(DEFAULT_USERSIG_TTL));
        assert_eq!(parse_duration("250").ok(), Some(Duration::from_millis(250)));
        assert!(parse_duration("3 weeks").is_err());
        assert!(parse_duration("s").is_err());
    }

    #[test]
    fn config_deserializes_with_defaults_and_redacts_secret() {
        let json = r#"{"base_url":"http://127.0.0.1:1","sdk_app_id":1400000001,
            "admin_identifier":"administrator","secret_key":"hunter2-very-secret",
            "request_timeout":"1500ms"}"#;
        let cfg: ClientConfig = serde_json::from_str(json).expect("valid config");
        assert_eq!(cfg.usersig_ttl, DEFAULT_USERSIG_TTL);
        assert_eq!(cfg.request_timeout, Duration::from_millis(1500));
        assert_eq!(cfg.rate_limit_per_api, DEFAULT_RATE_LIMIT_PER_API);
        let shown = format!("{cfg:?} {}", cfg.secret_key);
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("***"));
        assert!(cfg.validate().is_ok());
    }
}
