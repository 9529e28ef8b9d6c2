//! Checks that the files in `deploy/` agree with the code: every service is a
//! workspace binary, every port is one the service listens on, every
//! `PREFIX__SECTION__KEY` environment variable and ConfigMap key exists in the
//! service's configuration, every metric an alert or dashboard panel queries is
//! registered, and the Kubernetes objects reference each other correctly.
//! Services that run as several instances (compose replicas, Deployment pods)
//! are checked for a per-instance identity and an advertised address the other
//! instances can reach ([`instances`]), compose replicas for host ports they
//! would fight over, and the NetworkPolicy for admitting the instances (and
//! only the expected callers) to each other.
//!
//! The checks are pure functions over a [`Model`] of the code (built by
//! `tests/consistency.rs` from the real config types and sources) and the
//! parsed deploy files; each returns the list of problems it found, so a unit
//! test can feed a deliberately wrong reference and see it reported.

pub mod alert_eval;
pub mod grpc_callers;
pub mod images;
pub mod instances;
pub mod pod_env;
pub mod promql;
pub mod readme;
pub mod readme_keys;
pub mod source;
pub mod transport;
pub mod yaml;

mod compose;
mod compose_ports;
mod k8s;
mod k8s_container;
mod k8s_objects;
mod k8s_operations;
mod network_policy;
mod observability;
// The one spelling of a duration (service_kit::duration), std-only, compiled
// in: deploy-check reads the shipped durations exactly as the services do.
#[path = "../../../crates/service-kit/src/duration/spelling.rs"]
#[allow(
    dead_code,
    reason = "deploy files are config: a bare number is milliseconds"
)]
mod spelling;

pub use compose::check_compose;
pub use compose_ports::{PortMapping, parse_port_mapping};
pub use instances::{Advertise, Platform};
pub use k8s::check_k8s;
pub use k8s_operations::{Kustomize, check_k8s_operations};
pub use observability::{
    RUNBOOKS, SCRAPE_SERIES, check_alerts, check_dashboard, check_runbooks, markdown_anchors,
};

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// What the code says about one deployable binary.
#[derive(Debug, Clone)]
pub enum Service {
    /// One of the five services: layered config with an env prefix.
    App(AppService),
    /// A fake: clap flags, each with an environment variable.
    Fake(FakeService),
}

/// A service configured by defaults → YAML → `PREFIX__…` environment.
#[derive(Debug, Clone)]
pub struct AppService {
    /// Environment prefix without the trailing `__` (`ROOM`).
    pub env_prefix: String,
    /// The config struct's `Default`, serialized: the complete key tree.
    pub defaults: Value,
    /// The shipped config files (`configs/*.yaml`) by file name.
    pub config_files: BTreeMap<String, Value>,
    /// The docker config file's name (`room-service.docker.yaml`).
    pub docker_file: String,
    /// Config keys holding durations the shutdown may take (`shutdown_grace`).
    pub grace_keys: Vec<String>,
    /// Consumer groups the service joins.
    pub consumer_groups: BTreeSet<String>,
    /// Config keys naming one instance (`node_id`): with several instances
    /// each must be empty (the service derives it) or set per instance.
    pub instance_keys: Vec<String>,
    /// How instances reach each other, for a service whose instances call
    /// one another (room-service forwards to a room's lease holder).
    pub advertise: Option<Advertise>,
}

/// A fake configured by flags.
#[derive(Debug, Clone)]
pub struct FakeService {
    /// Environment variable → the flag's default value ("" when none).
    pub env_flags: BTreeMap<String, String>,
}

/// An infrastructure container (database, cache, broker).
#[derive(Debug, Clone)]
pub struct Infra {
    /// Accepted image prefixes (`mysql:8`).
    pub images: Vec<String>,
    /// Ports it listens on.
    pub ports: BTreeSet<u16>,
}

/// Everything the checks compare the deploy files against.
#[derive(Debug, Clone)]
pub struct Model {
    /// Every binary the workspace builds.
    pub binaries: BTreeSet<String>,
    /// The deployable services by binary name.
    pub services: BTreeMap<String, Service>,
    /// Every metric series name the services expose.
    pub metrics: BTreeSet<String>,
    /// Infrastructure containers compose may run, by service name.
    pub infra: BTreeMap<String, Infra>,
    /// The image name the Dockerfile's image is tagged with (without tag).
    pub app_image: String,
    /// The subcommands of each binary's CLI (`room-service` → `migrate`, …).
    pub subcommands: BTreeMap<String, BTreeSet<String>>,
    /// Every topic the platform needs: the relay's topics and each consumer
    /// group's `<group>.dlq`.
    pub topics: BTreeSet<String>,
}

impl AppService {
    /// Whether `path` (`outbox_worker.batch_size`) is a settable key.
    pub fn has_key(&self, path: &str) -> bool {
        has_key(&self.defaults, path)
    }

    /// The effective config: defaults, then `file`, then env overrides.
    pub fn effective(&self, file: &Value, env: &BTreeMap<String, String>) -> Value {
        let mut config = self.defaults.clone();
        yaml::overlay(&mut config, file);
        for (name, value) in env {
            if let Some(path) = self.env_path(name) {
                let item = match yaml::get(&self.defaults, &path) {
                    Some(Value::Array(_)) => Value::Array(
                        value
                            .split(',')
                            .map(|item| Value::from(item.trim()))
                            .collect(),
                    ),
                    _ => Value::from(value.as_str()),
                };
                yaml::set(&mut config, &path, item);
            }
        }
        config
    }

    /// `ROOM__OUTBOX_WORKER__BATCH_SIZE` → `outbox_worker.batch_size` (this
    /// service's prefix only).
    pub fn env_path(&self, name: &str) -> Option<String> {
        let rest = name.strip_prefix(&format!("{}__", self.env_prefix))?;
        Some(rest.to_ascii_lowercase().replace("__", "."))
    }

    /// Checks an environment variable name: this service's prefix and an existing key.
    pub fn check_env(&self, service: &str, name: &str) -> Option<String> {
        match self.env_path(name) {
            None => Some(format!(
                "{service}: env {name} does not start with {}__",
                self.env_prefix
            )),
            Some(path) if !self.has_key(&path) => Some(format!(
                "{service}: env {name} names `{path}`, which is not a key of its config"
            )),
            Some(_) => None,
        }
    }

    /// Listen address keys (`grpc_listen`, `http_listen`) → port.
    pub fn listen_ports(config: &Value) -> BTreeMap<String, u16> {
        yaml::key_paths(config)
            .into_iter()
            .filter(|path| path.ends_with("_listen"))
            .filter_map(|path| {
                let port = yaml::get(config, &path)
                    .and_then(Value::as_str)
                    .and_then(port_of)?;
                Some((path, port))
            })
            .collect()
    }

    /// Ports a listen key may use: its built-in default or the docker config's.
    pub fn allowed_listen_ports(&self, key: &str) -> BTreeSet<u16> {
        let mut ports = BTreeSet::new();
        ports.extend(Self::listen_ports(&self.defaults).get(key));
        if let Some(docker) = self.config_files.get(&self.docker_file) {
            ports.extend(Self::listen_ports(docker).get(key));
        }
        ports
    }

    /// Problems with the listen ports of an effective config.
    pub fn check_listen(&self, service: &str, effective: &Value) -> Vec<String> {
        Self::listen_ports(effective)
            .into_iter()
            .filter_map(|(key, port)| {
                let allowed = self.allowed_listen_ports(&key);
                (!allowed.contains(&port)).then(|| {
                    format!(
                        "{service}: {key} port {port} is neither the default nor the docker config's ({allowed:?})"
                    )
                })
            })
            .collect()
    }

    /// The longest shutdown duration among `grace_keys`, in milliseconds.
    pub fn shutdown_grace_ms(&self, effective: &Value) -> u64 {
        self.grace_keys
            .iter()
            .filter_map(|key| yaml::get(effective, key).and_then(yaml::scalar_text))
            .filter_map(|text| parse_duration_ms(&text))
            .max()
            .unwrap_or(0)
    }
}

impl FakeService {
    /// The ports of the fake's listen flags, given the env values set.
    pub fn ports(&self, env: &BTreeMap<String, String>) -> BTreeSet<u16> {
        self.env_flags
            .iter()
            .filter(|(name, _)| name.ends_with("_LISTEN"))
            .filter_map(|(name, default)| port_of(env.get(name).unwrap_or(default)))
            .collect()
    }
}

impl Model {
    /// The app service named `name`, if it is one.
    pub fn app(&self, name: &str) -> Option<&AppService> {
        match self.services.get(name) {
            Some(Service::App(app)) => Some(app),
            _ => None,
        }
    }
}

/// Whether `path` is a settable key of a config's key tree.
pub fn has_key(tree: &Value, path: &str) -> bool {
    yaml::key_paths(tree).iter().any(|key| {
        key == path
            || key
                .strip_suffix(".*")
                .is_some_and(|open| path.starts_with(&format!("{open}.")))
    })
}

/// The port of `host:port` or a URL (`http://host:port/path`).
pub fn port_of(address: &str) -> Option<u16> {
    let address = address.split_once("://").map_or(address, |(_, rest)| rest);
    let authority = address.split('/').next()?;
    authority.rsplit_once(':')?.1.parse().ok()
}

/// A duration of the deploy files in milliseconds, read as the services
/// read it (`service_kit::duration`: `20s`, `500ms`, `5m`, `1h`, `7d`, a bare
/// number is milliseconds); `None` for anything else or a negative value.
pub fn parse_duration_ms(text: &str) -> Option<u64> {
    spelling::parse_millis(text)
        .ok()
        .and_then(|millis| u64::try_from(millis).ok())
}

/// `host:port` references inside `text` whose host is a bare lowercase name
/// (a compose service or Kubernetes Service, not an IP or a dotted FQDN).
pub fn host_references(text: &str) -> Vec<(String, u16)> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    for (colon, _) in text.match_indices(':') {
        let digits: String = text[colon + 1..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        let Ok(port) = digits.parse::<u16>() else {
            continue;
        };
        let mut start = colon;
        while start > 0
            && (bytes[start - 1].is_ascii_lowercase()
                || bytes[start - 1].is_ascii_digit()
                || bytes[start - 1] == b'-'
                || bytes[start - 1] == b'.')
        {
            start -= 1;
        }
        let host = &text[start..colon];
        let glued =
            start > 0 && (bytes[start - 1] == b'_' || bytes[start - 1].is_ascii_alphanumeric());
        if host.is_empty()
            || glued
            || host.contains('.')
            || host == "localhost"
            || !host.starts_with(|ch: char| ch.is_ascii_lowercase())
        {
            continue;
        }
        out.push((host.to_string(), port));
    }
    out
}

/// Every string scalar inside a value.
pub fn strings(value: &Value) -> Vec<String> {
    match value {
        Value::String(text) => vec![text.clone()],
        Value::Array(items) => items.iter().flat_map(strings).collect(),
        Value::Object(map) => map.values().flat_map(strings).collect(),
        _ => Vec::new(),
    }
}

/// A YAML map or `KEY=VALUE` list of environment variables.
pub fn env_map(value: Option<&Value>) -> BTreeMap<String, String> {
    match value {
        Some(Value::Object(map)) => map
            .iter()
            .map(|(key, value)| (key.clone(), yaml::scalar_text(value).unwrap_or_default()))
            .collect(),
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(Value::as_str)
            .map(|item| {
                let (key, value) = item.split_once('=').unwrap_or((item, ""));
                (key.to_string(), value.to_string())
            })
            .collect(),
        _ => BTreeMap::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_durations_and_hosts() {
        assert_eq!(port_of("0.0.0.0:7101"), Some(7101));
        assert_eq!(port_of("http://fake-wallet:7601/x"), Some(7601));
        assert_eq!(port_of("mysql://u@mysql:3306/db"), Some(3306));
        assert_eq!(port_of("nothing"), None);
        assert_eq!(parse_duration_ms("20s"), Some(20_000));
        assert_eq!(parse_duration_ms("500ms"), Some(500));
        assert_eq!(parse_duration_ms("soon"), None);
        // The services' spelling: a bare number is milliseconds, a space
        // may precede the unit, days exist; fractions and other units do not.
        assert_eq!(parse_duration_ms("250"), Some(250));
        assert_eq!(parse_duration_ms("3 s"), Some(3_000));
        assert_eq!(parse_duration_ms("7d"), Some(604_800_000));
        assert_eq!(parse_duration_ms("1.5s"), None);
        assert_eq!(parse_duration_ms("5S"), None);
        assert_eq!(parse_duration_ms("-1s"), None);
        assert_eq!(
            host_references(
                "mysql://hyapp@mysql:3306/hyapp and 1@kafka:9093, 0.0.0.0:1, a.b:2, topic_x:8"
            ),
            [("mysql".to_string(), 3306), ("kafka".to_string(), 9093)]
        );
    }
}
