//! `deploy/k8s/*.yaml` against the code: Deployments name workspace binaries
//! and mount a ConfigMap whose config file has only real keys; env variables,
//! container ports, probes (`/readyz`, `/healthz` on the HTTP port), scrape
//! annotations and `terminationGracePeriodSeconds` agree with the config;
//! Services and PodDisruptionBudgets select a Deployment. Env values are
//! resolved as in a pod ([`crate::pod_env`]: downward API fields, `$(VAR)`),
//! so a Deployment whose pods run side by side (several replicas, or a rolling
//! update) is checked for a per-pod identity and an advertised address other
//! pods reach ([`crate::instances`]); NetworkPolicies are checked by
//! [`crate::network_policy`].

use crate::instances::Platform;
use crate::k8s_objects::{Deployment, NAME_LABEL, name_of};
use crate::{AppService, Model, network_policy, pod_env, yaml};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// The pod label naming a consumer Deployment's group.
const GROUP_LABEL: &str = "hyapp.io/consumer-group";

/// Checks every Kubernetes document (all files together); returns the problems.
pub fn check_k8s(model: &Model, documents: &[Value]) -> Vec<String> {
    let mut problems = Vec::new();
    let of_kind = |kind: &str| -> Vec<&Value> {
        documents
            .iter()
            .filter(|doc| doc.get("kind").and_then(Value::as_str) == Some(kind))
            .collect()
    };
    let config_maps: BTreeMap<String, &Value> = of_kind("ConfigMap")
        .into_iter()
        .map(|doc| (name_of(doc), doc))
        .collect();
    let mut used_config_maps = BTreeSet::new();
    let mut deployments: BTreeMap<String, Deployment> = BTreeMap::new();

    for deployment in of_kind("Deployment") {
        let name = name_of(deployment);
        let Some(app) = model.app(&name) else {
            problems.push(format!("k8s: Deployment {name} is not one of the services"));
            continue;
        };
        let spec = deployment.get("spec").cloned().unwrap_or(Value::Null);
        let replicas = spec.get("replicas").and_then(Value::as_i64).unwrap_or(1);
        let pod = spec.get("template").cloned().unwrap_or(Value::Null);
        let pod_labels = pod
            .pointer("/metadata/labels")
            .cloned()
            .unwrap_or(Value::Null);
        let pod_name = pod_labels
            .get(NAME_LABEL)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if pod_name != name {
            problems.push(format!(
                "k8s: Deployment {name} pods are labelled {pod_name}"
            ));
        }
        let selector = spec
            .pointer("/selector/matchLabels")
            .cloned()
            .unwrap_or(Value::Null);
        if !labels_match(&selector, &pod_labels) {
            problems.push(format!(
                "k8s: Deployment {name} selector does not match its pods"
            ));
        }
        if let Some(group) = pod_labels.get(GROUP_LABEL).and_then(Value::as_str)
            && !app.consumer_groups.contains(group)
        {
            problems.push(format!(
                "k8s: Deployment {name} is labelled consumer group {group}, but it joins {:?}",
                app.consumer_groups
            ));
        }
        let pod_spec = pod.get("spec").cloned().unwrap_or(Value::Null);
        let containers = pod_spec
            .get("containers")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let Some(container) = containers.iter().find(|c| name_of_container(c) == name) else {
            problems.push(format!(
                "k8s: Deployment {name} has no container named {name}"
            ));
            continue;
        };
        let command: Vec<String> = container
            .get("command")
            .or_else(|| container.get("args"))
            .and_then(Value::as_array)
            .map(|items| items.iter().filter_map(yaml::scalar_text).collect())
            .unwrap_or_default();
        if command.first() != Some(&name) {
            problems.push(format!(
                "k8s: Deployment {name} runs {:?}, not its binary",
                command.first()
            ));
        }

        // The config file: --config <mountPath>/<file> from a mounted ConfigMap.
        let mut file_config = Value::Null;
        match command
            .iter()
            .position(|arg| arg == "--config")
            .and_then(|at| command.get(at + 1))
        {
            None => problems.push(format!("k8s: Deployment {name} passes no --config")),
            Some(path) => {
                match mounted_config_map(&pod_spec, container, path) {
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
                            Err(error) => problems.push(format!("k8s: ConfigMap {map_name}/{file}: {error}")),
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
                }
            }
        }

        // Env: names must be keys, except helpers (no prefix) that a later
        // variable uses as `$(NAME)`; resolved values join the effective config.
        let env_items = container
            .get("env")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let namespace = deployment
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("default");
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
        let effective = app.effective(&file_config, &resolved_env);
        problems.extend(app.check_listen(&name, &effective));
        // Pods of one Deployment run side by side with several replicas and,
        // with the default RollingUpdate strategy, during every rollout.
        let recreate = spec.pointer("/strategy/type").and_then(Value::as_str) == Some("Recreate");
        problems.extend(
            app.check_instances(
                &name,
                &effective,
                &per_pod_keys,
                replicas > 1 || !recreate,
                Platform::Kubernetes {
                    pod_ip: pod_env::SAMPLE_POD_IP,
                },
            )
            .into_iter()
            .map(|problem| format!("k8s: {problem}")),
        );
        let listen = AppService::listen_ports(&effective);
        let listen_ports: BTreeSet<u16> = listen.values().copied().collect();
        let http_port = listen.get("http_listen").copied();

        // Ports: exactly the listen ports.
        let container_ports: BTreeSet<u16> = container
            .get("ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|port| port.get("containerPort").and_then(Value::as_u64))
            .filter_map(|port| u16::try_from(port).ok())
            .collect();
        if container_ports != listen_ports {
            problems.push(format!(
                "k8s: Deployment {name} container ports {container_ports:?}, but it listens on {listen_ports:?}"
            ));
        }
        let named_ports: BTreeMap<String, u16> = container
            .get("ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|port| {
                Some((
                    port.get("name")?.as_str()?.to_string(),
                    u16::try_from(port.get("containerPort")?.as_u64()?).ok()?,
                ))
            })
            .collect();

        // Probes.
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

        // Termination grace ≥ preStop sleep + the service's own shutdown bound.
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
        let needed_ms = pre_stop_s * 1_000 + app.shutdown_grace_ms(&effective);
        if grace_s * 1_000 <= needed_ms {
            problems.push(format!(
                "k8s: Deployment {name} terminationGracePeriodSeconds {grace_s} does not exceed preStop {pre_stop_s}s + shutdown grace {}ms",
                app.shutdown_grace_ms(&effective)
            ));
        }
        let peer_port = app
            .advertise
            .as_ref()
            .and_then(|advertise| listen.get(&advertise.listen_key).copied());
        deployments.insert(
            name.clone(),
            Deployment {
                namespace: namespace.to_string(),
                pod_name,
                pod_labels,
                replicas,
                ports: container_ports,
                named_ports,
                peer_port,
            },
        );
    }

    for (name, service) in &model.services {
        if matches!(service, crate::Service::App(_)) && !deployments.contains_key(name) {
            problems.push(format!("k8s: service {name} has no Deployment"));
        }
    }
    for name in config_maps.keys() {
        if !used_config_maps.contains(name) {
            problems.push(format!("k8s: ConfigMap {name} is mounted by no Deployment"));
        }
    }

    for service in of_kind("Service") {
        let name = name_of(service);
        let selected = service
            .pointer("/spec/selector")
            .and_then(|selector| selector.get(NAME_LABEL))
            .and_then(Value::as_str)
            .unwrap_or("");
        let Some(Deployment { ports, .. }) = deployments
            .values()
            .find(|deployment| deployment.pod_name == selected)
        else {
            problems.push(format!(
                "k8s: Service {name} selects no Deployment ({selected})"
            ));
            continue;
        };
        for port in service
            .pointer("/spec/ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let target = port
                .get("targetPort")
                .or_else(|| port.get("port"))
                .and_then(Value::as_u64)
                .and_then(|port| u16::try_from(port).ok());
            if !target.is_some_and(|target| ports.contains(&target)) {
                problems.push(format!(
                    "k8s: Service {name} targets port {target:?}, not one of {ports:?}"
                ));
            }
        }
    }

    let mut protected = BTreeSet::new();
    for pdb in of_kind("PodDisruptionBudget") {
        let name = name_of(pdb);
        let selected = pdb
            .pointer("/spec/selector/matchLabels")
            .and_then(|labels| labels.get(NAME_LABEL))
            .and_then(Value::as_str)
            .unwrap_or("");
        let Some((deployment, Deployment { replicas, .. })) = deployments
            .iter()
            .find(|(_, deployment)| deployment.pod_name == selected)
        else {
            problems.push(format!(
                "k8s: PodDisruptionBudget {name} selects no Deployment"
            ));
            continue;
        };
        protected.insert(deployment.clone());
        if let Some(min) = pdb.pointer("/spec/minAvailable").and_then(Value::as_i64)
            && min >= *replicas
        {
            problems.push(format!(
                    "k8s: PodDisruptionBudget {name} minAvailable {min} >= replicas {replicas}: no pod can ever be evicted"
                ));
        }
    }
    for name in deployments.keys() {
        if !protected.contains(name) {
            problems.push(format!("k8s: Deployment {name} has no PodDisruptionBudget"));
        }
    }
    problems.extend(network_policy::check(
        &of_kind("NetworkPolicy"),
        &deployments,
    ));
    problems
}

fn name_of_container(container: &Value) -> &str {
    container.get("name").and_then(Value::as_str).unwrap_or("")
}

fn labels_match(selector: &Value, labels: &Value) -> bool {
    selector.as_object().is_some_and(|selector| {
        !selector.is_empty()
            && selector
                .iter()
                .all(|(key, value)| labels.get(key) == Some(value))
    })
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
