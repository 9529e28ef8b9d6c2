//! A known secret planted in every secret key of a service's config, for the
//! test each service has that `--dump-config` and `Debug` show none of them.
//! Every secret contains [`MARK`], so one search finds any leak; odd keys
//! are given as `<VARIABLE>_FILE` (a Kubernetes secret file), even ones as
//! the variable itself, so both forms of the environment layer are covered.

use std::collections::HashMap;
use std::path::PathBuf;

/// Text contained in every planted secret.
pub const MARK: &str = "PLANTED";

/// A `consumer:` section whose client properties are named like secrets
/// (plus one that is not), for the services that carry a `consumer` section.
/// Not `sasl.*`/`ssl.*`, which start-up refuses there (they belong to the
/// `rocketmq` section): a librdkafka plugin's own properties
/// (`plugin.library.paths`) may hold secrets too.
pub const CONSUMER_PROPERTIES_YAML: &str = "consumer:
  client_properties:
    interceptor.password: \"PLANTED-p1\"
    interceptor.client.secret: \"PLANTED-p2\"
    interceptor.jaas.config: \"LoginModule required username='u' password='PLANTED-p3';\"
    client.rack: \"rack-1\"
";

/// Asserts that the properties of [`CONSUMER_PROPERTIES_YAML`] arrived in
/// `dump`: the secret ones as `***`, the other as given.
///
/// # Panics
/// When a property is missing or shown differently.
pub fn assert_client_properties_redacted(dump: &str) {
    let dump: serde_json::Value = serde_json::from_str(dump).expect("dump is JSON");
    let properties = &dump["consumer"]["client_properties"];
    for key in [
        "interceptor.password",
        "interceptor.client.secret",
        "interceptor.jaas.config",
    ] {
        assert_eq!(properties[key], "***", "{key} in {properties}");
    }
    assert_eq!(properties["client.rack"], "rack-1", "{properties}");
}

/// The planted-secrets check of a consumer service: plants a secret in each
/// of `secret_keys`, dumps the config of `exe` (the consumer base config plus
/// secret-named client properties), loads the same config in-process with
/// `load`, and asserts that neither the dump nor the config's `Debug` nor
/// the resolved consumer settings' `Debug` (`settings`, which carry the SASL
/// password as a client property) shows any of them.
///
/// # Panics
/// When a secret leaks or a planted key did not arrive.
pub fn assert_consumer_secrets_hidden<C: std::fmt::Debug, S: std::fmt::Debug>(
    exe: &str,
    prefix: &str,
    secret_keys: &[&str],
    load: impl FnOnce(PathBuf, HashMap<String, String>) -> C,
    settings: impl FnOnce(&C) -> S,
) {
    let planted = PlantedSecrets::new(prefix, secret_keys);
    let yaml = format!("{}{CONSUMER_PROPERTIES_YAML}", crate::binary::CONSUMER_BASE);
    let (dump, path) = planted.dump(exe, &yaml);
    assert_client_properties_redacted(&dump);
    let config = load(path, planted.env_map());
    planted.assert_hidden(&dump, &format!("{config:?}"));
    let settings = settings(&config);
    assert!(!format!("{settings:?}").contains(MARK), "{settings:?}");
}

/// The password of the Kafka client key: accepted only next to the
/// certificate and key it unlocks, over TLS.
const KAFKA_KEY_PASSWORD: &str = "rocketmq.tls.key_password";

/// What a planted `rocketmq.tls.key_password` needs beside it to be a valid
/// setting: TLS and a client certificate with its key (a test PKI's, copied
/// into `dir`).
fn kafka_client_certificate(prefix: &str, dir: &std::path::Path) -> Vec<(String, String)> {
    let pki = crate::pki::TestPki::generate(&["localhost"]);
    let cert = dir.join("kafka-client.pem");
    let key = dir.join("kafka-client-key.pem");
    std::fs::copy(&pki.client_cert, &cert).expect("copy client certificate");
    std::fs::copy(&pki.client_key, &key).expect("copy client key");
    let path = |file: PathBuf| file.to_str().expect("utf-8 path").to_owned();
    vec![
        (
            format!("{prefix}__ROCKETMQ__SECURITY_PROTOCOL"),
            "ssl".to_owned(),
        ),
        (format!("{prefix}__ROCKETMQ__TLS__CERT_FILE"), path(cert)),
        (format!("{prefix}__ROCKETMQ__TLS__KEY_FILE"), path(key)),
    ]
}

/// Keys that may come from a file but are an identity, not a secret (the SASL
/// user): planted with a visible value, which the dump must show as given.
const IDENTITIES: &[&str] = &["rocketmq.access_key"];

/// The planted environment of one service.
#[derive(Debug)]
pub struct PlantedSecrets {
    /// Variables to start the service with (`ROOM__MYSQL__PASSWORD_FILE=…`).
    pub env: Vec<(String, String)>,
    keys: Vec<String>,
    dir: PathBuf,
}

impl PlantedSecrets {
    /// Plants a secret in each of `secret_keys` under `prefix` (`ROOM`). A key
    /// ending in `url` gets a URL with the secret as its password (`redis`
    /// in the key name gives a `redis://` URL, else `mysql://`), which the
    /// service must accept.
    ///
    /// # Panics
    /// When the temporary directory is not writable.
    pub fn new(prefix: &str, secret_keys: &[&str]) -> Self {
        let dir = std::env::temp_dir().join(crate::unique("hyapp-secrets-"));
        std::fs::create_dir_all(&dir).expect("create secrets dir");
        let mut env = Vec::new();
        for (index, key) in secret_keys.iter().enumerate() {
            let value = planted_value(index, key);
            let variable = format!("{prefix}__{}", key.replace('.', "__").to_uppercase());
            if index % 2 == 1 {
                let file = dir.join(format!("secret-{index}"));
                // The newline a secret file usually ends with must be trimmed.
                std::fs::write(&file, format!("{value}\n")).expect("write secret file");
                let path = file.to_str().expect("utf-8 path").to_owned();
                env.push((format!("{variable}_FILE"), path));
            } else {
                env.push((variable, value));
            }
        }
        if secret_keys.contains(&KAFKA_KEY_PASSWORD) {
            env.extend(kafka_client_certificate(prefix, &dir));
        }
        Self {
            env,
            keys: secret_keys.iter().map(|key| (*key).to_owned()).collect(),
            dir,
        }
    }

    /// The environment as `load_with_env` takes it.
    pub fn env_map(&self) -> HashMap<String, String> {
        self.env.iter().cloned().collect()
    }

    /// The environment as [`crate::binary::run`] takes it.
    pub fn env_pairs(&self) -> Vec<(&str, &str)> {
        self.env
            .iter()
            .map(|(key, value)| (key.as_str(), value.as_str()))
            .collect()
    }

    /// Runs `exe --config <yaml> --dump-config` with the planted environment
    /// and returns the dump, after checking it succeeded and printed no
    /// planted secret on stderr. Also returns the config file's path, for
    /// loading the same config in-process.
    ///
    /// # Panics
    /// When the dump fails or stderr leaks.
    pub fn dump(&self, exe: &str, yaml: &str) -> (String, PathBuf) {
        let path = self.dir.join("config.yaml");
        std::fs::write(&path, yaml).expect("write config");
        let config = path.to_str().expect("utf-8 path");
        let run = crate::binary::run(
            exe,
            &["--config", config, "--dump-config"],
            &self.env_pairs(),
        );
        assert!(
            run.status.success(),
            "--dump-config failed:\n{}",
            run.stderr
        );
        assert!(!run.stderr.contains(MARK), "stderr leaks:\n{}", run.stderr);
        (run.stdout, path)
    }

    /// Asserts that `dump` (`--dump-config`'s JSON) and `debug` (the config's
    /// `{:?}`) contain no planted secret, and that every planted key arrived:
    /// shown as `***`, as a URL with `***` for its password, or, for an
    /// identity, as planted. A key the loader ignored would otherwise pass as
    /// "not leaked".
    ///
    /// # Panics
    /// When a secret leaks or a planted key did not arrive.
    pub fn assert_hidden(&self, dump: &str, debug: &str) {
        assert!(
            !dump.contains(MARK),
            "a planted secret is in the dump:\n{dump}"
        );
        assert!(
            !debug.contains(MARK),
            "a planted secret is in Debug:\n{debug}"
        );
        let dump: serde_json::Value = serde_json::from_str(dump).expect("dump is JSON");
        for (index, key) in self.keys.iter().enumerate() {
            let pointer = format!("/{}", key.replace('.', "/"));
            let shown = dump.pointer(&pointer).and_then(serde_json::Value::as_str);
            let arrived = match shown {
                Some(text) if IDENTITIES.contains(&key.as_str()) => {
                    text == planted_value(index, key)
                }
                Some(text) => text == "***" || text.contains(":***@"),
                None => false,
            };
            assert!(arrived, "{key} did not arrive as planted: {shown:?}");
        }
    }
}

impl Drop for PlantedSecrets {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The value planted in `key`.
fn planted_value(index: usize, key: &str) -> String {
    if IDENTITIES.contains(&key) {
        format!("user-{index}")
    } else if key.ends_with("url") {
        let scheme = if key.contains("redis") {
            "redis"
        } else {
            "mysql"
        };
        format!("{scheme}://user:{MARK}-{index}@127.0.0.1:1/0")
    } else {
        // Longer than the 32 characters a bearer token needs at least.
        format!("007{index}-{MARK}-0123456789abcdef01234567")
    }
}
