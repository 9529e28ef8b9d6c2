//! A Deployment's container against its service: its ports, the config
//! file it mounts from a ConfigMap, its env as a pod resolves it, its probes
//! and its termination grace (the parts of [`crate::k8s`]'s check of one
//! Deployment).

use crate::{AppService, pod_env, yaml};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// A container's ports: every `containerPort`, and the named ones by name.
pub(crate) fn container_ports(container: &Value) -> (BTreeSet<u16>, BTreeMap<String, u16>) {
    let ports = container
        .get("ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten();
    let numbers = ports
        .clone()
        .filter_map(|port| port.get("containerPort").and_then(Value::as_u64))
        .filter_map(|port| u16::try_from(port).ok())
        .collect();
    let named = ports
        .filter_map(|port| {
            Some((
                port.get("name")?.as_str()?.to_string(),
                u16::try_from(port.get("containerPort")?.as_u64()?).ok()?,
            ))
        })
        .collect();
    (numbers, named)
}

/// Readiness and liveness probes GET `/readyz` and `/healthz` on the HTTP
/// port, and a scrape annotation names that port.
pub(crate) fn check_probes(
    name: &str,
    container: &Value,
    pod: &Value,
    named_ports: &BTreeMap<String, u16>,
    http_port: Option<u16>,
) -> Vec<String> {
    let mut problems = Vec::new();
    for (probe, path) in [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")] {
        let Some(get) = container.get(probe).and_then(|p| p.get("httpGet")) else {
            problems.push(format!("k8s: Deployment {name} has no {probe} httpGet"));
            continue;
        };
        if get.get("path").and_then(Value::as_str) != Some(path) {
            problems.push(format!("k8s: Deployment {name} {probe} must GET {path}"));
        }
        let port = match get.get("port") {
            Some(Value::String(named)) => named_ports.get(named).copied(),
            Some(other) => other.as_u64().and_then(|port| u16::try_from(port).ok()),
            None => None,
        };
        if port.is_none() || port != http_port {
            problems.push(format!(
                "k8s: Deployment {name} {probe} port {port:?} is not the HTTP port {http_port:?}"
            ));
        }
    }
    if let Some(scrape) = pod
        .pointer("/metadata/annotations")
        .and_then(|annotations| annotations.get("prometheus.io/port"))
        .and_then(yaml::scalar_text)
        && scrape.parse::<u16>().ok() != http_port
    {
        problems.push(format!(
            "k8s: Deployment {name} scrapes port {scrape}, but /metrics is on {http_port:?}"
        ));
    }
    problems
}

/// Termination grace ≥ preStop sleep + the service's own shutdown bound.
pub(crate) fn check_grace(
    name: &str,
    pod_spec: &Value,
    container: &Value,
    app: &AppService,
    effective: &Value,
) -> Vec<String> {
    let mut problems = Vec::new();
    let grace_s = pod_spec
        .get("terminationGracePeriodSeconds")
        .and_then(Value::as_u64)
        .unwrap_or(30);
    let pre_stop_s = container
        .pointer("/lifecycle/preStop/exec/command")
        .and_then(Value::as_array)
        .and_then(|words| {
            let words: Vec<String> = words.iter().filter_map(yaml::scalar_text).collect();
            (words.first().map(String::as_str) == Some("sleep"))
                .then(|| words.get(1)?.parse::<u64>().ok())
                .flatten()
        })
        .unwrap_or(0);
    let needed_ms = pre_stop_s * 1_000 + app.shutdown_grace_ms(effective);
    if grace_s * 1_000 <= needed_ms {
        problems.push(format!(
            "k8s: Deployment {name} terminationGracePeriodSeconds {grace_s} does not exceed preStop {pre_stop_s}s + shutdown grace {}ms",
            app.shutdown_grace_ms(effective)
        ));
    }
    problems
}

/// The config file: `--config <mountPath>/<file>` from a mounted ConfigMap
/// whose keys are all keys of the service's config; its parsed content.
#[allow(
    clippy::too_many_arguments,
    reason = "one Deployment's parts, read once"
)]
pub(crate) fn config_file(
    name: &str,
    app: &AppService,
    command: &[String],
    pod_spec: &Value,
    container: &Value,
    config_maps: &BTreeMap<String, &Value>,
    used_config_maps: &mut BTreeSet<String>,
    problems: &mut Vec<String>,
) -> Value {
    let mut file_config = Value::Null;
    match command
        .iter()
        .position(|arg| arg == "--config")
        .and_then(|at| command.get(at + 1))
    {
        None => problems.push(format!("k8s: Deployment {name} passes no --config")),
        Some(path) => match mounted_config_map(&pod_spec, container, path) {
            None => problems.push(format!(
                "k8s: Deployment {name} --config {path} is not in a mounted ConfigMap"
            )),
            Some((map_name, file)) => {
                used_config_maps.insert(map_name.clone());
                match config_maps
                    .get(&map_name)
                    .and_then(|map| map.pointer("/data").and_then(|data| data.get(&file)))
                    .and_then(Value::as_str)
                {
                    None => problems.push(format!(
                        "k8s: ConfigMap {map_name} has no data key {file} (Deployment {name})"
                    )),
                    Some(text) => match yaml::parse_one(text) {
                        Err(error) => {
                            problems.push(format!("k8s: ConfigMap {map_name}/{file}: {error}"))
                        }
                        Ok(value) => {
                            for key in yaml::key_paths(&value) {
                                if !app.has_key(&key) {
                                    problems.push(format!(
                                        "k8s: ConfigMap {map_name}/{file}: `{key}` is not a key of {name}'s config"
                                    ));
                                }
                            }
                            file_config = value;
                        }
                    },
                }
            }
        },
    }
    file_config
}

/// Env: names must be keys, except helpers (no prefix) that a later
/// variable uses as `$(NAME)`; returns the resolved values that join the
/// effective config and the config keys whose value differs per pod.
pub(crate) fn resolve_env(
    name: &str,
    app: &AppService,
    namespace: &str,
    container: &Value,
    problems: &mut Vec<String>,
) -> (BTreeMap<String, String>, BTreeSet<String>) {
    let env_items = container
        .get("env")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let (pod_env, env_problems) = pod_env::resolve(
        &format!("k8s: Deployment {name}"),
        &name,
        namespace,
        &env_items,
    );
    problems.extend(env_problems);
    let mut resolved_env = BTreeMap::new();
    let mut per_pod_keys = BTreeSet::new();
    for (env_name, value) in &pod_env.values {
        match app.env_path(env_name) {
            None if pod_env.referenced.contains(env_name) => {}
            None => problems.extend(app.check_env(&name, env_name).map(|problem| {
                format!("{problem}, and no later variable uses it as $({env_name})")
            })),
            Some(path) => {
                problems.extend(app.check_env(&name, env_name));
                if pod_env.per_pod.contains(env_name) {
                    per_pod_keys.insert(path);
                }
                resolved_env.insert(env_name.clone(), value.clone());
            }
        }
    }
    (resolved_env, per_pod_keys)
}

/// The ConfigMap and data key behind a file path inside the container.
fn mounted_config_map(pod_spec: &Value, container: &Value, path: &str) -> Option<(String, String)> {
    let (dir, file) = path.rsplit_once('/')?;
    let mount = container
        .get("volumeMounts")?
        .as_array()?
        .iter()
        .find(|mount| {
            mount
                .get("mountPath")
                .and_then(Value::as_str)
                .map(|p| p.trim_end_matches('/'))
                == Some(dir)
        })?;
    let volume_name = mount.get("name")?.as_str()?;
    let volume = pod_spec
        .get("volumes")?
        .as_array()?
        .iter()
        .find(|volume| volume.get("name").and_then(Value::as_str) == Some(volume_name))?;
    let map_name = volume.pointer("/configMap/name")?.as_str()?;
    Some((map_name.to_string(), file.to_string()))
}
