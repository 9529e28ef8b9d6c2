//! The Kubernetes manifests are secure as shipped: every connection to the
//! infrastructure crosses a network the services do not trust, so the
//! ConfigMaps must ask for a verified transport and the pods must not carry
//! what they do not need. Checked here, so a manifest that regresses fails:
//!
//! - `mysql.ssl_mode` is `verify_ca` or `verify_identity` (absent means
//!   `preferred`, a silent downgrade) with an `ssl_ca`;
//! - a `rocketmq` section speaks `sasl_ssl` with SCRAM and names a CA file;
//! - a Redis URL is never written in a ConfigMap (it carries the password):
//!   room-service's and the relay's come from a Secret, and every Redis URL
//!   env variable is a `secretKeyRef`;
//! - no `allow_insecure_transport` key is set anywhere;
//! - every pod spec says `automountServiceAccountToken: false`;
//! - the kustomization pins the image tag (not `latest`, not absent);
//! - room-service's gRPC port runs mutual TLS with identities
//!   (`grpc_callers`).

use crate::yaml;
use serde_json::Value;

/// The Deployment containers whose Redis URL must come from a Secret:
/// (binary, env variable) — room-service's lease pool, the relay's nudge.
pub const REDIS_URL_FROM_SECRET: [(&str, &str); 2] = [
    ("room-service", "ROOM__REDIS__URL"),
    ("outbox-relay", "RELAY__OUTBOX_WORKER__REDIS_URL"),
];

/// Every problem of `documents` (the manifests) and `kustomization`.
pub fn check_k8s_transport(documents: &[Value], kustomization: &Value) -> Vec<String> {
    let mut problems = check_image_tag(kustomization);
    for document in documents {
        let kind = document.get("kind").and_then(Value::as_str).unwrap_or("");
        let name = crate::k8s_objects::name_of(document);
        if kind == "ConfigMap" {
            let data = document.get("data").and_then(Value::as_object);
            for (file, text) in data.into_iter().flatten() {
                let Some(text) = text.as_str() else { continue };
                let Ok(config) = yaml::parse_one(text) else {
                    continue; // not a service config (the k8s checks report bad YAML)
                };
                let at = format!("ConfigMap {name} {file}");
                problems.extend(check_service_config(&at, &config));
                if file == crate::grpc_callers::ROOM_SERVICE_FILE {
                    problems.extend(crate::grpc_callers::check_room_service_callers(
                        &at, &config,
                    ));
                }
            }
        }
        if let Some(pod) = pod_spec(kind, document) {
            problems.extend(check_pod(&format!("{kind} {name}"), kind, pod));
        }
    }
    problems
}

/// The pod spec of a workload, `None` for other kinds.
fn pod_spec<'a>(kind: &str, document: &'a Value) -> Option<&'a Value> {
    let path = match kind {
        "Deployment" | "StatefulSet" | "DaemonSet" | "Job" => "/spec/template/spec",
        "CronJob" => "/spec/jobTemplate/spec/template/spec",
        "Pod" => "/spec",
        _ => return None,
    };
    document.pointer(path)
}

/// The transport settings of one service config (a ConfigMap's file).
pub fn check_service_config(at: &str, config: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let mut insecure = Vec::new();
    find_insecure_keys(config, String::new(), &mut insecure);
    for key in insecure {
        problems.push(format!(
            "{at}: {key} is set; it is for development stacks only"
        ));
    }
    if let Some(mysql) = yaml::get(config, "mysql") {
        let mode = text(mysql, "ssl_mode");
        if !matches!(mode.as_str(), "verify_ca" | "verify_identity") {
            problems.push(format!(
                "{at}: mysql.ssl_mode is `{}`; use verify_identity (or verify_ca) with mysql.ssl_ca",
                if mode.is_empty() { "preferred (default)" } else { &mode }
            ));
        } else if text(mysql, "ssl_ca").is_empty() {
            problems.push(format!("{at}: mysql.ssl_ca is missing"));
        }
    }
    if let Some(mq) = yaml::get(config, "rocketmq") {
        let protocol = text(mq, "security_protocol");
        if protocol != "sasl_ssl" {
            problems.push(format!(
                "{at}: rocketmq.security_protocol is `{protocol}`; use sasl_ssl"
            ));
        }
        if !text(mq, "sasl_mechanism")
            .to_ascii_uppercase()
            .starts_with("SCRAM-")
        {
            problems.push(format!(
                "{at}: rocketmq.sasl_mechanism must be SCRAM-SHA-256 or SCRAM-SHA-512"
            ));
        }
        if yaml::get(mq, "tls.ca_file")
            .and_then(yaml::scalar_text)
            .unwrap_or_default()
            .is_empty()
        {
            problems.push(format!("{at}: rocketmq.tls.ca_file is missing"));
        }
    }
    for key in ["redis.url", "outbox_worker.redis_url"] {
        if yaml::get(config, key).is_some() {
            problems.push(format!(
                "{at}: {key} is written in the ConfigMap; it carries the password, so it \
                 comes from a Secret (a rediss:// URL with an ACL user)"
            ));
        }
    }
    problems
}

/// Dotted paths of every `…allow_insecure…` key set to anything but false.
fn find_insecure_keys(value: &Value, prefix: String, out: &mut Vec<String>) {
    let Some(map) = value.as_object() else { return };
    for (key, item) in map {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        if key.contains("allow_insecure") && !matches!(item, Value::Bool(false)) {
            out.push(path);
        } else {
            find_insecure_keys(item, path, out);
        }
    }
}

fn text(section: &Value, key: &str) -> String {
    section
        .get(key)
        .and_then(yaml::scalar_text)
        .unwrap_or_default()
}

/// A pod spec: no service-account token; Redis URLs only from Secrets.
fn check_pod(at: &str, kind: &str, pod: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    if pod.get("automountServiceAccountToken") != Some(&Value::Bool(false)) {
        problems.push(format!("{at}: automountServiceAccountToken must be false"));
    }
    let containers = pod.get("containers").and_then(Value::as_array);
    for container in containers.into_iter().flatten() {
        let env = container.get("env").and_then(Value::as_array);
        let env = env.map(Vec::as_slice).unwrap_or_default();
        for variable in env {
            let name = variable.get("name").and_then(Value::as_str).unwrap_or("");
            let from_secret = variable.pointer("/valueFrom/secretKeyRef").is_some();
            if (name.ends_with("REDIS__URL") || name.ends_with("REDIS_URL")) && !from_secret {
                problems.push(format!("{at}: {name} must come from a secretKeyRef"));
            }
        }
        let command = container.get("command").and_then(Value::as_array);
        let command: Vec<&str> = command
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        // The long-running services; a Job's subcommand (`migrate`,
        // `purge`) never reaches Redis.
        let serves = kind == "Deployment";
        for (binary, variable) in REDIS_URL_FROM_SECRET {
            let sets = env.iter().any(|item| {
                item.get("name").and_then(Value::as_str) == Some(variable)
                    && item.pointer("/valueFrom/secretKeyRef").is_some()
            });
            if serves && command.first() == Some(&binary) && !sets {
                problems.push(format!(
                    "{at}: {binary} needs {variable} from a secretKeyRef (rediss:// with its ACL user)"
                ));
            }
        }
    }
    problems
}

/// The kustomization's images each pin a tag (or a digest), never `latest`.
pub fn check_image_tag(kustomization: &Value) -> Vec<String> {
    let images = kustomization.get("images").and_then(Value::as_array);
    let images = images.map(Vec::as_slice).unwrap_or_default();
    if images.is_empty() {
        return vec!["kustomization.yaml: images must pin the application image's tag".into()];
    }
    images
        .iter()
        .filter_map(|image| {
            let name = image.get("name").and_then(Value::as_str).unwrap_or("?");
            let tag = image.get("newTag").and_then(yaml::scalar_text).unwrap_or_default();
            let digest = image.get("digest").and_then(Value::as_str).unwrap_or("");
            (digest.is_empty() && (tag.is_empty() || tag == "latest")).then(|| {
                format!("kustomization.yaml: image {name} has tag `{tag}`; pin a release (newTag: 0.1.0)")
            })
        })
        .collect()
}
