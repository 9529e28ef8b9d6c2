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
use crate::k8s_container::{check_grace, check_probes, config_file, container_ports, resolve_env};
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
        if let Some(checked) = check_deployment(
            &name,
            app,
            deployment,
            &config_maps,
            &mut used_config_maps,
            &mut problems,
        ) {
            deployments.insert(name, checked);
        }
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

    problems.extend(check_services(&of_kind("Service"), &deployments));

    problems.extend(check_disruption_budgets(
        &of_kind("PodDisruptionBudget"),
        &deployments,
    ));
    problems.extend(network_policy::check(
        &of_kind("NetworkPolicy"),
        &deployments,
    ));
    problems
}

/// One Deployment of a service: its pods, container, config file, env,
/// instances, ports, probes and grace; what the later checks need of it.
fn check_deployment(
    name: &str,
    app: &AppService,
    deployment: &Value,
    config_maps: &BTreeMap<String, &Value>,
    used_config_maps: &mut BTreeSet<String>,
    problems: &mut Vec<String>,
) -> Option<Deployment> {
    let name = name.to_string();
    let spec = deployment.get("spec").cloned().unwrap_or(Value::Null);
    let replicas = spec.get("replicas").and_then(Value::as_i64).unwrap_or(1);
    let pod = spec.get("template").cloned().unwrap_or(Value::Null);
    let pod_labels = pod
        .pointer("/metadata/labels")
        .cloned()
        .unwrap_or(Value::Null);
    let pod_name = check_pod_labels(&name, app, &spec, &pod_labels, problems);
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
        return None;
    };
    let command = container_command(container);
    if command.first() != Some(&name) {
        problems.push(format!(
            "k8s: Deployment {name} runs {:?}, not its binary",
            command.first()
        ));
    }

    let file_config = config_file(
        &name,
        app,
        &command,
        &pod_spec,
        container,
        &config_maps,
        used_config_maps,
        problems,
    );

    let namespace = deployment
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("default");
    let (resolved_env, per_pod_keys) = resolve_env(&name, app, namespace, container, problems);
    let effective = app.effective(&file_config, &resolved_env);
    problems.extend(app.check_listen(&name, &effective));
    problems.extend(check_pods_side_by_side(
        &name,
        app,
        &spec,
        &effective,
        &per_pod_keys,
        replicas,
    ));
    let listen = AppService::listen_ports(&effective);
    let listen_ports: BTreeSet<u16> = listen.values().copied().collect();
    let http_port = listen.get("http_listen").copied();

    // Ports: exactly the listen ports.
    let (container_ports, named_ports) = container_ports(container);
    if container_ports != listen_ports {
        problems.push(format!(
            "k8s: Deployment {name} container ports {container_ports:?}, but it listens on {listen_ports:?}"
        ));
    }
    problems.extend(check_probes(
        &name,
        container,
        &pod,
        &named_ports,
        http_port,
    ));

    problems.extend(check_grace(&name, &pod_spec, container, app, &effective));
    let peer_port = app
        .advertise
        .as_ref()
        .and_then(|advertise| listen.get(&advertise.listen_key).copied());
    Some(Deployment {
        namespace: namespace.to_string(),
        pod_name,
        pod_labels,
        replicas,
        ports: container_ports,
        named_ports,
        peer_port,
    })
}

/// The container's command line (`command`, else `args`).
fn container_command(container: &Value) -> Vec<String> {
    container
        .get("command")
        .or_else(|| container.get("args"))
        .and_then(Value::as_array)
        .map(|items| items.iter().filter_map(yaml::scalar_text).collect())
        .unwrap_or_default()
}

/// Pods of one Deployment run side by side with several replicas and,
/// with the default RollingUpdate strategy, during every rollout: then each
/// needs its own identity and an address the others reach.
fn check_pods_side_by_side(
    name: &str,
    app: &AppService,
    spec: &Value,
    effective: &Value,
    per_pod_keys: &BTreeSet<String>,
    replicas: i64,
) -> Vec<String> {
    let recreate = spec.pointer("/strategy/type").and_then(Value::as_str) == Some("Recreate");
    app.check_instances(
        name,
        effective,
        per_pod_keys,
        replicas > 1 || !recreate,
        Platform::Kubernetes {
            pod_ip: pod_env::SAMPLE_POD_IP,
        },
    )
    .into_iter()
    .map(|problem| format!("k8s: {problem}"))
    .collect()
}

/// The pods' name label is the Deployment's, its selector matches them and
/// a consumer-group label names a group the service joins; the pod name.
fn check_pod_labels(
    name: &str,
    app: &AppService,
    spec: &Value,
    pod_labels: &Value,
    problems: &mut Vec<String>,
) -> String {
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
    pod_name
}

/// Every Service selects a Deployment and targets one of its ports.
fn check_services(services: &[&Value], deployments: &BTreeMap<String, Deployment>) -> Vec<String> {
    let mut problems = Vec::new();
    for service in services {
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
    problems
}

/// Every Deployment has a PodDisruptionBudget that lets a pod be evicted.
fn check_disruption_budgets(
    budgets: &[&Value],
    deployments: &BTreeMap<String, Deployment>,
) -> Vec<String> {
    let mut problems = Vec::new();
    let mut protected = BTreeSet::new();
    for pdb in budgets {
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
