//! Services that run as several instances at once (compose replicas, a
//! Deployment's pods, the old and new pod during a rolling update): values
//! that name one instance must differ between them, and an instance that other
//! instances call (room-service forwards a call to the room's lease holder at
//! the URL the holder advertised) must advertise an address they can reach.
//!
//! Compose and Kubernetes differ in one point only, which address is per
//! instance and resolvable: a compose container's hostname (its short id) is
//! in Docker's DNS on the compose network, a Deployment pod's name is in no
//! DNS at all, so there the pod IP from the downward API is the only choice.

use crate::{AppService, port_of, yaml};
use serde_json::Value;
use std::collections::BTreeSet;

/// How one instance tells the others where to reach it.
#[derive(Debug, Clone)]
pub struct Advertise {
    /// The config key holding the URL (`advertise_url`); empty = derived from
    /// the listen address as the service does.
    pub key: String,
    /// The listen key the URL must reach (`grpc_listen`).
    pub listen_key: String,
}

/// Where the instances run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Platform {
    /// `docker compose`: containers on one user-defined network.
    Compose,
    /// A Kubernetes Deployment.
    Kubernetes {
        /// The sample pod IP the resolved env stands in for `status.podIP`
        /// with, so an advertised host can be recognised as the pod's own.
        pod_ip: &'static str,
    },
}

/// The host the service derives when the advertise key is empty and it
/// listens on every interface (`http://$HOSTNAME:<port>`).
pub const DERIVED_HOST: &str = "$HOSTNAME";

impl AppService {
    /// Problems with the instance-specific values of `effective`, the config
    /// every instance of `service` gets. `per_instance` holds the config
    /// paths whose value is filled in per instance (Kubernetes downward API);
    /// `several` says whether instances can run side by side at all.
    pub fn check_instances(
        &self,
        service: &str,
        effective: &Value,
        per_instance: &BTreeSet<String>,
        several: bool,
        platform: Platform,
    ) -> Vec<String> {
        let mut problems = Vec::new();
        if !several {
            return problems;
        }
        let text = |path: &str| {
            yaml::get(effective, path)
                .and_then(yaml::scalar_text)
                .unwrap_or_default()
        };
        for key in &self.instance_keys {
            let value = text(key);
            // Empty means "derived per instance" (hostname, pid): fine.
            if !value.is_empty() && !per_instance.contains(key) {
                problems.push(format!(
                    "{service}: {key} is `{value}` in every instance; leave it empty (derived per instance) or set it per instance"
                ));
            }
        }
        let Some(advertise) = &self.advertise else {
            return problems;
        };
        let listen = text(&advertise.listen_key);
        let listen_port = port_of(&listen);
        let explicit = text(&advertise.key);
        let (url, varies) = if !explicit.is_empty() {
            (explicit, per_instance.contains(&advertise.key))
        } else if unspecified(host_of(&listen)) {
            (
                format!("http://{DERIVED_HOST}:{}", listen_port.unwrap_or(0)),
                true,
            )
        } else {
            (format!("http://{listen}"), false)
        };
        let host = host_of(&url);
        if port_of(&url) != listen_port {
            problems.push(format!(
                "{service}: {} {url} is not the port of {} ({listen})",
                advertise.key, advertise.listen_key
            ));
        }
        if unspecified(host) || loopback(host) {
            problems.push(format!(
                "{service}: advertises {url} ({}), which other instances cannot reach",
                advertise.key
            ));
        } else if !varies {
            problems.push(format!(
                "{service}: every instance advertises {url} ({}); calls forwarded to a room's holder would reach any instance",
                advertise.key
            ));
        } else if let Platform::Kubernetes { pod_ip } = platform
            && host != pod_ip
        {
            problems.push(format!(
                "{service}: advertises {url} ({}), but a Deployment pod is reachable only at its IP; set it from status.podIP",
                advertise.key
            ));
        }
        problems
    }
}

/// The host of `host:port` or `scheme://host:port/path` (brackets kept).
pub fn host_of(address: &str) -> &str {
    let address = address.split_once("://").map_or(address, |(_, rest)| rest);
    let authority = address.split('/').next().unwrap_or("");
    authority
        .rsplit_once(':')
        .map_or(authority, |(host, _)| host)
}

fn unspecified(host: &str) -> bool {
    matches!(host, "0.0.0.0" | "[::]" | "::" | "")
}

fn loopback(host: &str) -> bool {
    host == "localhost" || host.starts_with("127.") || host == "[::1]"
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn app() -> AppService {
        AppService {
            env_prefix: "ROOM".into(),
            defaults: serde_json::json!({
                "grpc_listen": "127.0.0.1:7101", "node_id": "", "advertise_url": ""
            }),
            config_files: BTreeMap::new(),
            docker_file: String::new(),
            grace_keys: Vec::new(),
            consumer_groups: BTreeSet::new(),
            instance_keys: vec!["node_id".into(), "advertise_url".into()],
            advertise: Some(Advertise {
                key: "advertise_url".into(),
                listen_key: "grpc_listen".into(),
            }),
        }
    }

    fn check(config: Value, per_instance: &[&str], platform: Platform) -> Vec<String> {
        let per_instance = per_instance.iter().map(ToString::to_string).collect();
        app().check_instances("svc", &config, &per_instance, true, platform)
    }

    const K8S: Platform = Platform::Kubernetes { pod_ip: "10.9.9.9" };

    #[test]
    fn derived_hostname_serves_compose_but_not_kubernetes() {
        let config =
            serde_json::json!({"grpc_listen": "0.0.0.0:7101", "node_id": "", "advertise_url": ""});
        assert_eq!(
            check(config.clone(), &[], Platform::Compose),
            Vec::<String>::new()
        );
        let problems = check(config, &[], K8S);
        assert!(
            problems[0].contains("http://$HOSTNAME:7101"),
            "{problems:?}"
        );
    }

    #[test]
    fn pod_ip_with_the_listen_port_is_the_kubernetes_answer() {
        let good = serde_json::json!({"grpc_listen": "0.0.0.0:7101", "node_id": "pod-a",
            "advertise_url": "http://10.9.9.9:7101"});
        assert_eq!(
            check(good.clone(), &["node_id", "advertise_url"], K8S),
            Vec::<String>::new()
        );
        // The same values, literal: every pod would claim the same identity.
        let problems = check(good, &[], K8S);
        assert!(
            problems
                .iter()
                .any(|p| p.contains("node_id is `pod-a` in every instance"))
        );
        assert!(
            problems
                .iter()
                .any(|p| p.contains("every instance advertises"))
        );
        let wrong_port = serde_json::json!({"grpc_listen": "0.0.0.0:7101", "node_id": "",
            "advertise_url": "http://10.9.9.9:7102"});
        let problems = check(wrong_port, &["advertise_url"], K8S);
        assert!(
            problems[0].contains("is not the port of grpc_listen"),
            "{problems:?}"
        );
    }

    #[test]
    fn loopback_listeners_are_unreachable() {
        let config = serde_json::json!({"grpc_listen": "127.0.0.1:7101", "node_id": "", "advertise_url": ""});
        let problems = check(config, &[], Platform::Compose);
        assert!(problems[0].contains("cannot reach"), "{problems:?}");
        assert_eq!(host_of("http://[::1]:7101/x"), "[::1]");
        assert_eq!(host_of("room-service:7101"), "room-service");
    }
}
