//! Durations in configuration files, written the way the original configs
//! write them (`"500ms"`, `"1s"`, `"5m"`, `"1h"`, `"7d"`).
//!
//! **The one spelling of a duration**, the same in config files, environment
//! variables, the relay's operator commands and console, the Tencent IM
//! client's settings, xtask's flags and deploy-check ([`spelling::parse_millis`]
//! is the one function that reads it):
//!
//! - an optional `-`, one or more ASCII digits, optional spaces, then a unit:
//!   exactly `ms`, `s`, `m`, `h` or `d`; surrounding whitespace is ignored;
//! - a bare integer is **milliseconds** — as text (`"250"`) and as a YAML or
//!   JSON number (`250`) alike. Where a person might mean seconds (a
//!   command-line flag) a bare integer is refused instead
//!   ([`spelling::parse_millis_with_unit`]); it never means another unit;
//! - nothing else: no fractions (`1.5s`), no compounds (`1h30m`), no `+`, no
//!   other or uppercase units (`us`, `w`, `sec`, `5S`); a value beyond `i64`
//!   milliseconds is refused.
//!
//! A zero or negative value is accepted by the parser and reported as
//! [`ConfigDuration::is_positive`] == false, so the owning config can fall back
//! to its default (`poll_interval <= 0` must never become a busy loop;
//! docs/design.md#configuration-names) instead of refusing to start.

pub mod spelling;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::time::Duration;

/// A signed duration as written in config, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct ConfigDuration {
    millis: i64,
}

impl ConfigDuration {
    /// A duration of `millis` milliseconds.
    pub const fn from_millis(millis: i64) -> Self {
        Self { millis }
    }

    /// A duration of `secs` seconds.
    pub const fn from_secs(secs: i64) -> Self {
        Self {
            millis: secs * 1000,
        }
    }

    /// Milliseconds (possibly zero or negative).
    pub const fn as_millis(self) -> i64 {
        self.millis
    }

    /// True when strictly greater than zero.
    pub const fn is_positive(self) -> bool {
        self.millis > 0
    }

    /// This value when positive, else `default` — the fallback rule of
    /// docs/design.md#configuration-names.
    pub fn positive_or(self, default: ConfigDuration) -> ConfigDuration {
        if self.is_positive() { self } else { default }
    }

    /// As a std duration; non-positive values become zero.
    pub fn as_std(self) -> Duration {
        Duration::from_millis(u64::try_from(self.millis).unwrap_or(0))
    }

    /// Parses the one spelling of a duration (this module's doc): `"<int><unit>"`
    /// with unit ms, s, m, h or d; a bare integer is milliseconds.
    pub fn parse(text: &str) -> Result<Self, String> {
        spelling::parse_millis(text).map(Self::from_millis)
    }
}

impl std::fmt::Display for ConfigDuration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let millis = self.millis;
        if millis != 0 && millis % 86_400_000 == 0 {
            write!(f, "{}d", millis / 86_400_000)
        } else if millis != 0 && millis % 3_600_000 == 0 {
            write!(f, "{}h", millis / 3_600_000)
        } else if millis != 0 && millis % 60_000 == 0 {
            write!(f, "{}m", millis / 60_000)
        } else if millis != 0 && millis % 1_000 == 0 {
            write!(f, "{}s", millis / 1_000)
        } else {
            write!(f, "{millis}ms")
        }
    }
}

impl Serialize for ConfigDuration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ConfigDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Millis(i64),
            Text(String),
        }
        match Raw::deserialize(deserializer)? {
            Raw::Millis(millis) => Ok(Self::from_millis(millis)),
            Raw::Text(text) => Self::parse(&text).map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_original_duration_spellings() {
        assert_eq!(ConfigDuration::parse("1s").unwrap().as_millis(), 1_000);
        assert_eq!(ConfigDuration::parse("5m").unwrap().as_millis(), 300_000);
        assert_eq!(ConfigDuration::parse("250ms").unwrap().as_millis(), 250);
        assert_eq!(
            ConfigDuration::parse("7d").unwrap().as_millis(),
            604_800_000
        );
        assert_eq!(ConfigDuration::parse("42").unwrap().as_millis(), 42);
        assert_eq!(ConfigDuration::parse("-1s").unwrap().as_millis(), -1_000);
    }

    #[test]
    fn rejects_garbage_with_the_text() {
        let error = ConfigDuration::parse("fast").unwrap_err();
        assert!(error.contains("fast"), "{error}");
        let error = ConfigDuration::parse("3 weeks").unwrap_err();
        assert!(error.contains("weeks"), "{error}");
    }

    #[test]
    fn non_positive_falls_back() {
        let default = ConfigDuration::from_secs(1);
        assert_eq!(ConfigDuration::from_millis(0).positive_or(default), default);
        assert_eq!(
            ConfigDuration::from_millis(-5).positive_or(default),
            default
        );
        assert_eq!(
            ConfigDuration::from_millis(7)
                .positive_or(default)
                .as_millis(),
            7
        );
    }

    #[test]
    fn display_round_trips() {
        for text in ["1s", "5m", "250ms", "2h", "7d", "0ms"] {
            assert_eq!(ConfigDuration::parse(text).unwrap().to_string(), text);
        }
    }
}
