//! A configuration secret (SASL password, Tencent IM key, admin token, DB
//! password) that never prints: Debug, Display and Serialize all show `***`,
//! so `--dump-config`, logs and error messages cannot leak it. Also the
//! redaction of the two places a secret hides inside ordinary text: the
//! userinfo of a URL and the value of a client property named like a secret.
//! And the one comparison of a presented secret with the expected one
//! ([`equal_in_constant_time`]).

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A string that must not appear in logs or dumps.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret itself, for the one place that must use it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// True when no secret was configured.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Self(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Self(value.to_owned())
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_empty() { "\"\"" } else { "\"***\"" })
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_empty() { "" } else { "***" })
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(if self.0.is_empty() { "" } else { "***" })
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Secret)
    }
}

/// Whether `left` and `right` hold the same bytes, compared without an early
/// exit (`subtle`), so the time taken does not tell a caller how much of a
/// guessed token, signature or CSRF token was right. The one place a secret
/// is compared: every bearer token, admin token, session signature and
/// operator hash goes through here. Lengths are not secret (tokens have
/// public minimums), so unequal lengths return at once.
pub fn equal_in_constant_time(left: &[u8], right: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    left.len() == right.len() && bool::from(left.ct_eq(right))
}

/// `url` with the password of its userinfo (`scheme://user:password@host`)
/// and the value of every query parameter named like a secret
/// (`?sentinelPassword=…`, see [`is_secret_property`]) replaced by `***`.
/// The services take passwords as [`Secret`]s, but an operator may still
/// paste one into a URL; this keeps it out of dumps and logs.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, password)) if !password.is_empty() => format!("{user}:***@{host}"),
            _ => authority.to_string(),
        },
        None => authority.to_string(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let parameters: Vec<String> = query
                .split('&')
                .map(|parameter| match parameter.split_once('=') {
                    Some((key, value)) if !value.is_empty() && is_secret_property(key) => {
                        format!("{key}=***")
                    }
                    _ => parameter.to_string(),
                })
                .collect();
            format!("{path}?{}", parameters.join("&"))
        }
        None => tail.to_string(),
    };
    format!("{scheme}://{authority}{tail}")
}

/// `serialize_with` for URL fields that may carry a password.
pub fn serialize_redacted_url<S: Serializer>(url: &str, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&redact_url(url))
}

/// Whether a client property (librdkafka `sasl.password`,
/// `ssl.key.password`, `sasl.jaas.config`, `sasl.oauthbearer.client.secret`,
/// `ssl.key.pem`…) holds a secret, judged by its name: an operator may pass
/// any property through `consumer.client_properties`, so the names of the
/// known ones are not enough.
pub fn is_secret_property(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    [
        "password",
        "secret",
        "token",
        "credential",
        "jaas",
        "oauthbearer.config",
        "key.pem",
        "private",
    ]
    .iter()
    .any(|word| key.contains(word))
}

/// The value of property `key` as it may be shown: `***` for a secret
/// property, a URL without its password otherwise.
pub fn redact_property(key: &str, value: &str) -> String {
    if is_secret_property(key) && !value.is_empty() {
        "***".to_owned()
    } else {
        redact_url(value)
    }
}

/// `serialize_with` for a map of client properties (`consumer.client_properties`).
pub fn serialize_redacted_properties<S: Serializer>(
    properties: &std::collections::BTreeMap<String, String>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_map(
        properties
            .iter()
            .map(|(key, value)| (key, redact_property(key, value))),
    )
}

/// Debug of a list of client properties with their secrets redacted.
pub struct RedactedProperties<'a>(pub &'a [(String, String)]);

impl std::fmt::Debug for RedactedProperties<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(
                self.0
                    .iter()
                    .map(|(key, value)| (key, redact_property(key, value))),
            )
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_properties_are_redacted() {
        for key in [
            "sasl.password",
            "ssl.key.password",
            "sasl.jaas.config",
            "sasl.oauthbearer.client.secret",
            "ssl.key.pem",
            "SASL.PASSWORD",
        ] {
            assert_eq!(redact_property(key, "hunter2"), "***", "{key}");
        }
        assert_eq!(redact_property("client.id", "relay"), "relay");
        assert_eq!(
            redact_property("sasl.oauthbearer.token.endpoint.url", "https://u:pw@idp/t"),
            "***"
        );
        assert_eq!(
            redact_property("bootstrap.servers", "http://u:pw@broker:9092"),
            "http://u:***@broker:9092"
        );
        let list = vec![("sasl.password".to_owned(), "hunter2".to_owned())];
        assert!(!format!("{:?}", RedactedProperties(&list)).contains("hunter2"));
    }

    #[test]
    fn url_passwords_are_redacted() {
        assert_eq!(
            redact_url("mysql://root:hunter2@db:3306/hyapp?ssl=1"),
            "mysql://root:***@db:3306/hyapp?ssl=1"
        );
        assert_eq!(
            redact_url("redis://:p@ss@cache:6379"),
            "redis://:***@cache:6379"
        );
        assert_eq!(
            redact_url(
                "redis-sentinel://:pw@s1/0?sentinelServiceName=m&sentinelPassword=hunter2&node=s2:26379"
            ),
            "redis-sentinel://:***@s1/0?sentinelServiceName=m&sentinelPassword=***&node=s2:26379"
        );
        for unchanged in [
            "mysql://root@db/hyapp",
            "redis://cache:6379",
            "not a url",
            "redis-sentinel://s1?sentinelServiceName=m&node=s2:26379",
        ] {
            assert_eq!(redact_url(unchanged), unchanged);
        }
    }

    #[test]
    fn equal_only_when_every_byte_and_the_length_agree() {
        assert!(equal_in_constant_time(b"abc", b"abc"));
        assert!(equal_in_constant_time(b"", b""));
        assert!(!equal_in_constant_time(b"abc", b"abd"));
        assert!(!equal_in_constant_time(b"abc", b"abcd"));
        assert!(!equal_in_constant_time(b"abcd", b"abc"));
        assert!(!equal_in_constant_time(b"", b"a"));
    }

    #[test]
    fn never_prints_the_value() {
        let secret = Secret::new("hunter2");
        assert_eq!(format!("{secret:?}"), "\"***\"");
        assert_eq!(secret.to_string(), "***");
        assert_eq!(serde_json::to_string(&secret).unwrap(), "\"***\"");
        assert_eq!(secret.expose(), "hunter2");
    }
}
