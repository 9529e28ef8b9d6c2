//! Layered configuration, the same for every service: built-in defaults (the
//! config struct's `Default`, via `#[serde(default)]`) → a YAML file
//! (`configs/<service>.yaml` when present, or the `--config FILE` given, which
//! must exist) → environment variables (`ROOM__OUTBOX_WORKER__BATCH_SIZE=500`
//! style: prefix, then the key path, separated by `__`) → the service's own
//! validation. Environment values keep their exact text and are typed by the
//! field they land in; secrets may come from files (`…_FILE`; `config/env.rs`).

mod env;

use crate::Error;
use env::EnvLayer;
use serde::de::DeserializeOwned;
use std::path::{Path, PathBuf};

/// Where a service's configuration comes from.
#[derive(Debug, Clone)]
pub struct ConfigSources<'a> {
    /// Service name; the default file is `configs/<service>.yaml`.
    pub service: &'static str,
    /// Environment prefix, e.g. `ROOM` for `ROOM__OUTBOX_WORKER__BATCH_SIZE`.
    pub env_prefix: &'static str,
    /// An explicit file (`--config`), which must exist.
    pub file: Option<PathBuf>,
    /// Keys whose environment value is a comma-separated list.
    pub list_keys: &'static [&'static str],
    /// Keys holding a secret (passwords, keys, tokens, URLs that may carry a
    /// password), which may also be given as `<VARIABLE>_FILE=<path>`.
    pub secret_keys: &'a [&'a str],
}

impl ConfigSources<'_> {
    /// Loads and deserializes the layered configuration.
    pub fn load<T: DeserializeOwned>(&self) -> Result<T, Error> {
        self.load_with_env(None)
    }

    /// Like [`ConfigSources::load`], reading environment variables from `env`
    /// instead of the process environment when given (tests).
    pub fn load_with_env<T: DeserializeOwned>(
        &self,
        env: Option<std::collections::HashMap<String, String>>,
    ) -> Result<T, Error> {
        let default_file = PathBuf::from(format!("configs/{}.yaml", self.service));
        let (path, required) = match &self.file {
            Some(path) => (path.clone(), true),
            None => (default_file, false),
        };
        if required && !path.exists() {
            return Err(Error::Config(format!(
                "config file {} does not exist",
                path.display()
            )));
        }
        let vars = match env {
            Some(vars) => vars.into_iter().collect(),
            None => process_env(self.env_prefix)?,
        };
        let environment =
            EnvLayer::resolve(self.env_prefix, self.list_keys, self.secret_keys, vars)?;
        config::Config::builder()
            .add_source(file_source(&path).required(required))
            .add_source(environment)
            .build()
            .and_then(config::Config::try_deserialize)
            .map_err(|error| Error::Config(format!("{}: {error}", path.display())))
    }
}

/// The process environment. A variable under `prefix` whose value is not
/// UTF-8 is refused rather than mangled: it may be a password.
fn process_env(prefix: &str) -> Result<Vec<(String, String)>, Error> {
    let prefix = format!("{prefix}__").to_lowercase();
    let mut vars = Vec::new();
    for (name, value) in std::env::vars_os() {
        let Ok(name) = name.into_string() else {
            continue;
        };
        match value.into_string() {
            Ok(value) => vars.push((name, value)),
            Err(_) if name.to_lowercase().starts_with(&prefix) => {
                return Err(Error::Config(format!("{name} is not valid UTF-8")));
            }
            Err(_) => {}
        }
    }
    Ok(vars)
}

fn file_source(path: &Path) -> config::File<config::FileSourceFile, config::FileFormat> {
    config::File::from(path).format(config::FileFormat::Yaml)
}

/// Checks a listen address (`host:port`) before anything is started, so a
/// typo is refused naming its key instead of failing later at bind time.
pub fn check_listen(key: &str, value: &str) -> Result<(), Error> {
    value
        .parse::<std::net::SocketAddr>()
        .map(drop)
        .map_err(|_| Error::Config(format!("{key} `{value}` is not a host:port socket address")))
}

/// Whether `host` (a URL's host, brackets allowed around IPv6) is this
/// machine: `localhost`, 127.0.0.0/8 or ::1. Connections to anything else
/// cross a network the services do not trust (docs/operations.md#trust-boundary), so
/// the MySQL, Redis and Kafka settings refuse an unverified or plaintext
/// transport there unless their `allow_insecure_transport` says otherwise.
pub fn is_loopback_host(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|address| address.is_loopback())
}

/// The host of a `host:port` or `[v6]:port` address (a Kafka bootstrap entry).
pub fn host_of_address(address: &str) -> &str {
    let address = address.trim();
    if let Some(rest) = address.strip_prefix('[') {
        return rest.split_once(']').map_or(rest, |(host, _)| host);
    }
    match address.rsplit_once(':') {
        // Two colons or more without brackets: a bare IPv6 address.
        Some((host, _)) if !host.contains(':') => host,
        Some(_) => address,
        None => address,
    }
}

/// Renders a config for `--dump-config`. Secrets are [`crate::Secret`]s, which
/// serialize as `***`, so the dump is safe to paste into a ticket.
pub fn dump<T: serde::Serialize>(config: &T) -> String {
    serde_json::to_string_pretty(config).unwrap_or_else(|error| format!("<unprintable: {error}>"))
}

/// `Debug` for a config section that holds secrets inside ordinary strings
/// (URLs, client properties): its `--dump-config` rendering, which redacts
/// them through `serialize_with`. Written as one line per section, it cannot
/// fall behind when a field is added, as a hand-written field list could.
pub fn debug_as_dump<T: serde::Serialize>(
    config: &T,
    f: &mut std::fmt::Formatter<'_>,
) -> std::fmt::Result {
    match serde_json::to_string(config) {
        Ok(json) => f.write_str(&json),
        Err(error) => write!(f, "<unprintable: {error}>"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts_are_recognised() {
        for host in [
            "localhost",
            "LOCALHOST",
            "127.0.0.1",
            "127.8.9.10",
            "::1",
            "[::1]",
        ] {
            assert!(is_loopback_host(host), "{host}");
        }
        for host in ["db", "10.0.0.5", "localhost.example", "mysql", "::2", ""] {
            assert!(!is_loopback_host(host), "{host}");
        }
        assert_eq!(host_of_address("kafka:9092"), "kafka");
        assert_eq!(host_of_address("[::1]:9092"), "::1");
        assert_eq!(host_of_address("127.0.0.1:9092"), "127.0.0.1");
        assert_eq!(host_of_address("broker"), "broker");
    }
    use crate::{Secret, duration::ConfigDuration};
    use serde::{Deserialize, Serialize};

    #[derive(Debug, Default, Deserialize, Serialize)]
    #[serde(default, deny_unknown_fields)]
    struct Worker {
        batch_size: i64,
        poll_interval: ConfigDuration,
    }

    #[derive(Debug, Default, Deserialize, Serialize)]
    #[serde(default, deny_unknown_fields)]
    struct Sample {
        outbox_worker: Worker,
        password: Secret,
        servers: Vec<String>,
        enabled: bool,
        name: String,
    }

    fn write_temp(name: &str, body: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("service-kit-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("sample.yaml");
        std::fs::write(&path, body).unwrap();
        path
    }

    fn sources(file: PathBuf, prefix: &'static str) -> ConfigSources<'static> {
        ConfigSources {
            service: "sample",
            env_prefix: prefix,
            file: Some(file),
            list_keys: &["servers"],
            secret_keys: &["password"],
        }
    }

    #[test]
    fn file_then_env_layers() {
        let path = write_temp(
            "layers",
            "outbox_worker:\n  batch_size: 100\n  poll_interval: \"1s\"\npassword: \"s3cret\"\n",
        );
        let env = [
            ("SKTEST1__OUTBOX_WORKER__BATCH_SIZE", "500"),
            ("SKTEST1__SERVERS", "a:1,b:2"),
        ]
        .into_iter()
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .collect();
        let config: Sample = sources(path, "SKTEST1").load_with_env(Some(env)).unwrap();
        assert_eq!(config.outbox_worker.batch_size, 500);
        assert_eq!(config.outbox_worker.poll_interval.as_millis(), 1_000);
        assert_eq!(config.servers, vec!["a:1".to_string(), "b:2".to_string()]);
        assert_eq!(config.password.expose(), "s3cret");
        assert!(!dump(&config).contains("s3cret"));
    }

    #[test]
    fn unknown_key_is_named() {
        let path = write_temp("unknown", "outbox_worker:\n  batch_sise: 100\n");
        let error = sources(path, "SKTEST2")
            .load::<Sample>()
            .unwrap_err()
            .to_string();
        assert!(error.contains("batch_sise"), "{error}");
    }

    #[test]
    fn bad_duration_is_named() {
        let path = write_temp("duration", "outbox_worker:\n  poll_interval: \"soon\"\n");
        let error = sources(path, "SKTEST3")
            .load::<Sample>()
            .unwrap_err()
            .to_string();
        assert!(error.contains("soon"), "{error}");
    }

    #[test]
    fn missing_explicit_file_is_an_error() {
        let error = sources(PathBuf::from("/nonexistent/x.yaml"), "SKTEST4")
            .load::<Sample>()
            .unwrap_err()
            .to_string();
        assert!(error.contains("/nonexistent/x.yaml"), "{error}");
    }

    fn env_of(pairs: &[(&str, &str)]) -> std::collections::HashMap<String, String> {
        pairs
            .iter()
            .map(|(key, value)| (key.to_string(), value.to_string()))
            .collect()
    }

    fn load_env(prefix: &'static str, pairs: &[(&str, &str)]) -> Result<Sample, Error> {
        let path = write_temp(prefix, "name: \"from-file\"\n");
        sources(path, prefix).load_with_env(Some(env_of(pairs)))
    }

    #[test]
    fn env_strings_keep_their_exact_text_and_numbers_still_parse() {
        let config = load_env(
            "SKTEST5",
            &[
                ("SKTEST5__PASSWORD", "007123"),
                ("SKTEST5__NAME", "1e3"),
                ("SKTEST5__ENABLED", "true"),
                ("SKTEST5__OUTBOX_WORKER__BATCH_SIZE", "0500"),
                ("SKTEST5__OUTBOX_WORKER__POLL_INTERVAL", "250"),
                ("SKTEST5__SERVERS", "7"),
            ],
        )
        .unwrap();
        assert_eq!(config.password.expose(), "007123");
        assert_eq!(config.name, "1e3");
        assert!(config.enabled);
        assert_eq!(config.outbox_worker.batch_size, 500);
        assert_eq!(config.outbox_worker.poll_interval.as_millis(), 250);
        // A one-item list of something number-like is still a list.
        assert_eq!(config.servers, vec!["7".to_string()]);
        let error = load_env("SKTEST6", &[("SKTEST6__OUTBOX_WORKER__BATCH_SIZE", "many")])
            .unwrap_err()
            .to_string();
        assert!(error.contains("batch_size"), "{error}");
    }

    #[test]
    fn secret_comes_from_its_file_without_the_trailing_newline() {
        let file = write_temp("secret-file", "");
        std::fs::write(&file, "007123 with spaces \n").unwrap();
        let config = load_env(
            "SKTEST7",
            &[("SKTEST7__PASSWORD_FILE", file.to_str().unwrap())],
        )
        .unwrap();
        assert_eq!(config.password.expose(), "007123 with spaces ");
    }

    #[test]
    fn secret_given_twice_or_from_a_missing_file_is_refused() {
        let file = write_temp("secret-twice", "");
        std::fs::write(&file, "a\n").unwrap();
        let error = load_env(
            "SKTEST8",
            &[
                ("SKTEST8__PASSWORD", "b"),
                ("SKTEST8__PASSWORD_FILE", file.to_str().unwrap()),
            ],
        )
        .unwrap_err()
        .to_string();
        assert!(
            error.contains("password") && error.contains("SKTEST8__PASSWORD_FILE"),
            "{error}"
        );
        let error = load_env(
            "SKTEST9",
            &[("SKTEST9__PASSWORD_FILE", "/nonexistent/secret")],
        )
        .unwrap_err()
        .to_string();
        assert!(
            error.contains("password") && error.contains("/nonexistent/secret"),
            "{error}"
        );
    }

    #[test]
    fn file_form_of_a_key_that_is_no_secret_is_an_unknown_key() {
        let error = load_env("SKTEST10", &[("SKTEST10__NAME_FILE", "/etc/hostname")])
            .unwrap_err()
            .to_string();
        assert!(error.contains("name_file"), "{error}");
    }
}
