//! Client configuration. Its secret key is a `service_kit::Secret` and its
//! durations are spelled as everywhere else (`service_kit::duration`:
//! `"500ms"`, `"3s"`, `"10m"`, `"2h"`, `"7d"`, a bare integer is
//! milliseconds), read by the same parser; only a negative value, which a
//! std `Duration` cannot hold, is refused here.

use std::time::Duration;

use serde::{Deserialize, Deserializer};
use service_kit::Secret;
use service_kit::duration::ConfigDuration;

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

/// `duration` as a std duration, or `None` when it is negative.
fn non_negative(duration: ConfigDuration) -> Option<Duration> {
    u64::try_from(duration.as_millis())
        .ok()
        .map(Duration::from_millis)
}

/// Serde adapter: a duration as `ConfigDuration` reads it (a string, or an
/// integer of milliseconds), refused when negative.
fn deserialize_duration<'de, D: Deserializer<'de>>(de: D) -> Result<Duration, D::Error> {
    let duration = ConfigDuration::deserialize(de)?;
    non_negative(duration)
        .ok_or_else(|| serde::de::Error::custom(format!("duration {duration} is negative")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads `text` the way a config file's duration is read.
    fn parse_duration(text: &str) -> Result<Duration, serde_json::Error> {
        deserialize_duration(serde_json::Value::String(text.to_owned()))
    }

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
        assert!(parse_duration("-1s").is_err());
    }

    #[test]
    fn a_bare_integer_means_what_it_means_in_every_config() {
        for text in ["250", "0", "1500"] {
            let millis = service_kit::duration::spelling::parse_millis(text).unwrap();
            let expected = Duration::from_millis(millis.try_into().unwrap());
            assert_eq!(parse_duration(text).ok(), Some(expected), "{text}");
            let json = format!(
                r#"{{"base_url":"http://127.0.0.1:1","sdk_app_id":1,"admin_identifier":"a",
                "secret_key":"k","request_timeout":"{text}","usersig_ttl":{text}}}"#
            );
            let cfg: ClientConfig = serde_json::from_str(&json).expect("valid config");
            assert_eq!((cfg.request_timeout, cfg.usersig_ttl), (expected, expected));
        }
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
