//! Layered configuration, the same for every service: built-in defaults (the
//! config struct's `Default`, via `#[serde(default)]`) → a YAML file
//! (`configs/<service>.yaml` when present, or the `--config FILE` given, which
//! must exist) → environment variables (`ROOM__OUTBOX_WORKER__BATCH_SIZE=500`
//! style: prefix, then the key path, separated by `__`) → the service's own
//! validation.

use crate::Error;
use serde::de::DeserializeOwned;
use std::path::{Path, PathBuf};

/// Where a service's configuration comes from.
#[derive(Debug, Clone)]
pub struct ConfigSources {
    /// Service name; the default file is `configs/<service>.yaml`.
    pub service: &'static str,
    /// Environment prefix, e.g. `ROOM` for `ROOM__OUTBOX_WORKER__BATCH_SIZE`.
    pub env_prefix: &'static str,
    /// An explicit file (`--config`), which must exist.
    pub file: Option<PathBuf>,
    /// Keys whose environment value is a comma-separated list.
    pub list_keys: &'static [&'static str],
}

impl ConfigSources {
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
        let mut environment = config::Environment::with_prefix(self.env_prefix)
            .prefix_separator("__")
            .separator("__")
            .try_parsing(true)
            .source(env);
        if !self.list_keys.is_empty() {
            environment = environment.list_separator(",");
            for key in self.list_keys {
                environment = environment.with_list_parse_key(key);
            }
        }
        config::Config::builder()
            .add_source(file_source(&path).required(required))
            .add_source(environment)
            .build()
            .and_then(config::Config::try_deserialize)
            .map_err(|error| Error::Config(format!("{}: {error}", path.display())))
    }
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

/// Renders a config for `--dump-config`. Secrets are [`crate::Secret`]s, which
/// serialize as `***`, so the dump is safe to paste into a ticket.
pub fn dump<T: serde::Serialize>(config: &T) -> String {
    serde_json::to_string_pretty(config).unwrap_or_else(|error| format!("<unprintable: {error}>"))
}

#[cfg(test)]
mod tests {
    use super::*;
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
    }

    fn write_temp(name: &str, body: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("service-kit-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("sample.yaml");
        std::fs::write(&path, body).unwrap();
        path
    }

    fn sources(file: PathBuf, prefix: &'static str) -> ConfigSources {
        ConfigSources {
            service: "sample",
            env_prefix: prefix,
            file: Some(file),
            list_keys: &["servers"],
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
}
