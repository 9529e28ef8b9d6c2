//! The operational objects of `deploy/k8s` against the code and each other:
//! - the kustomize base lists every manifest and sets the application image
//!   once (its `images:` transformer); every container names the bare image;
//! - every Job and CronJob running the application image calls a binary and a
//!   subcommand its CLI has; a migration Job (`room-service … migrate`) and a
//!   purge CronJob (`outbox-relay … purge`) exist; the topic Job creates
//!   every topic the code needs;
//! - every Deployment is scraped by exactly one ServiceMonitor (through a
//!   Service of its pods, on the port that reaches its `http` port), and
//!   every `job` an alert names is such a scrape job;
//! - the PrometheusRule carries exactly the groups of `deploy/prometheus/alerts.yml`.

use crate::k8s_objects::{NAME_LABEL, name_of};
use crate::{Model, yaml};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// The kustomization and the files beside it.
#[derive(Debug, Clone)]
pub struct Kustomize<'a> {
    /// `kustomization.yaml`, parsed.
    pub kustomization: &'a Value,
    /// The other manifest files in the directory, by name.
    pub files: BTreeSet<String>,
}

/// Checks the operational objects; `documents` are every manifest's objects.
pub fn check_k8s_operations(
    model: &Model,
    documents: &[Value],
    kustomize: &Kustomize<'_>,
    alerts: &Value,
) -> Vec<String> {
    let mut problems = check_kustomization(model, documents, kustomize);
    problems.extend(check_jobs(model, documents));
    problems.extend(check_scraping(model, documents, alerts));
    problems.extend(check_prometheus_rule(documents, alerts));
    problems
}

fn of_kind<'a>(documents: &'a [Value], kind: &str) -> Vec<&'a Value> {
    documents
        .iter()
        .filter(|doc| doc.get("kind").and_then(Value::as_str) == Some(kind))
        .collect()
}

/// The pod spec of a Deployment, Job or CronJob.
fn pod_spec(doc: &Value) -> Option<&Value> {
    doc.pointer("/spec/template/spec")
        .or_else(|| doc.pointer("/spec/jobTemplate/spec/template/spec"))
}

fn containers(doc: &Value) -> Vec<&Value> {
    pod_spec(doc)
        .and_then(|spec| spec.get("containers"))
        .and_then(Value::as_array)
        .map(|items| items.iter().collect())
        .unwrap_or_default()
}

fn words(container: &Value, key: &str) -> Vec<String> {
    container
        .get(key)
        .and_then(Value::as_array)
        .map(|items| items.iter().filter_map(yaml::scalar_text).collect())
        .unwrap_or_default()
}

fn check_kustomization(
    model: &Model,
    documents: &[Value],
    kustomize: &Kustomize<'_>,
) -> Vec<String> {
    let mut problems = Vec::new();
    let listed: BTreeSet<String> = kustomize
        .kustomization
        .get("resources")
        .map(crate::strings)
        .unwrap_or_default()
        .into_iter()
        .collect();
    for file in kustomize.files.difference(&listed) {
        problems.push(format!("k8s: kustomization.yaml does not list {file}"));
    }
    for file in listed.difference(&kustomize.files) {
        problems.push(format!(
            "k8s: kustomization.yaml lists {file}, which does not exist"
        ));
    }
    let images: Vec<&Value> = kustomize
        .kustomization
        .get("images")
        .and_then(Value::as_array)
        .map(|items| items.iter().collect())
        .unwrap_or_default();
    let app_entries: Vec<&&Value> = images
        .iter()
        .filter(|image| image.get("name").and_then(Value::as_str) == Some(&model.app_image))
        .collect();
    match app_entries.as_slice() {
        [entry] if entry.get("newTag").is_some() || entry.get("digest").is_some() => {}
        [_] => problems.push(format!(
            "k8s: kustomization.yaml images entry {} sets neither newTag nor digest",
            model.app_image
        )),
        _ => problems.push(format!(
            "k8s: kustomization.yaml must set image {} exactly once under images:",
            model.app_image
        )),
    }
    for doc in documents {
        for container in containers(doc) {
            let image = container.get("image").and_then(Value::as_str).unwrap_or("");
            if image.contains(&model.app_image) && image != model.app_image {
                problems.push(format!(
                    "k8s: {} {} container {} uses image {image}: name the bare `{}` and let kustomization.yaml set registry and tag",
                    doc.get("kind").and_then(Value::as_str).unwrap_or("?"),
                    name_of(doc),
                    container.get("name").and_then(Value::as_str).unwrap_or("?"),
                    model.app_image
                ));
            }
        }
    }
    problems
}

/// The binary and first positional argument (its subcommand) of a command line.
fn binary_and_subcommand(command: &[String]) -> (Option<&String>, Option<&String>) {
    let mut rest = command.iter().skip(1);
    let mut subcommand = None;
    while let Some(word) = rest.next() {
        if word == "--config" {
            rest.next();
        } else if !word.starts_with('-') {
            subcommand = Some(word);
            break;
        }
    }
    (command.first(), subcommand)
}

fn check_jobs(model: &Model, documents: &[Value]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut runs: BTreeSet<(String, String)> = BTreeSet::new();
    let mut topic_scripts = Vec::new();
    let mut jobs = of_kind(documents, "Job");
    jobs.extend(of_kind(documents, "CronJob"));
    for job in jobs {
        let label = format!(
            "k8s: {} {}",
            job.get("kind").and_then(Value::as_str).unwrap_or("?"),
            name_of(job)
        );
        if pod_spec(job).is_none() {
            problems.push(format!("{label} has no pod template"));
        }
        for container in containers(job) {
            let image = container.get("image").and_then(Value::as_str).unwrap_or("");
            let command = words(container, "command");
            if image != model.app_image {
                // An infrastructure image: the topic bootstrap's script.
                let mut script = command.join(" ");
                script.push(' ');
                script.push_str(&words(container, "args").join(" "));
                topic_scripts.push((label.clone(), script));
                continue;
            }
            let (binary, subcommand) = binary_and_subcommand(&command);
            let Some(binary) = binary.filter(|binary| model.binaries.contains(*binary)) else {
                problems.push(format!(
                    "{label} runs {:?}, which is no workspace binary",
                    command.first()
                ));
                continue;
            };
            let known = model.subcommands.get(binary).cloned().unwrap_or_default();
            match subcommand {
                Some(subcommand) if known.contains(subcommand) => {
                    runs.insert((binary.clone(), subcommand.clone()));
                }
                other => problems.push(format!(
                    "{label} runs `{binary} {}`, which is not a subcommand of {binary} ({known:?})",
                    other.map_or("", String::as_str)
                )),
            }
        }
    }
    for (binary, subcommand, purpose) in [
        ("room-service", "migrate", "the migration Job"),
        ("outbox-relay", "purge", "the purge CronJob"),
    ] {
        if !runs.contains(&(binary.to_string(), subcommand.to_string())) {
            problems.push(format!(
                "k8s: no Job runs `{binary} {subcommand}` ({purpose})"
            ));
        }
    }
    match topic_scripts.as_slice() {
        [] => problems.push("k8s: no topic bootstrap Job".to_string()),
        scripts => {
            for topic in &model.topics {
                let needle = format!("{topic}:");
                if !scripts.iter().any(|(_, script)| script.contains(&needle)) {
                    problems.push(format!(
                        "k8s: topic bootstrap Job does not create {topic} (`{topic}:<partitions>`)"
                    ));
                }
            }
        }
    }
    problems
}

fn labels_subset(selector: &Value, labels: &Value) -> bool {
    selector.as_object().is_some_and(|selector| {
        !selector.is_empty()
            && selector
                .iter()
                .all(|(key, value)| labels.get(key) == Some(value))
    })
}

/// Each of a ServiceMonitor's endpoint `ports` on `service` reaches the
/// container port `http` (where `/metrics` is served) of its `deployment`.
fn check_scraped_port(
    name: &str,
    service: &Value,
    deployment: &Value,
    ports: &[String],
) -> Vec<String> {
    let service_name = name_of(service);
    let mut problems = Vec::new();
    let http_port = containers(deployment).iter().find_map(|container| {
        container
            .get("ports")?
            .as_array()?
            .iter()
            .find(|port| port.get("name").and_then(Value::as_str) == Some("http"))?
            .get("containerPort")?
            .as_u64()
    });
    for port in ports {
        let target = service
            .pointer("/spec/ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|item| item.get("name").and_then(Value::as_str) == Some(port))
            .and_then(|item| item.get("targetPort").or_else(|| item.get("port")))
            .and_then(Value::as_u64);
        if target.is_none() || target != http_port {
            problems.push(format!(
                "k8s: ServiceMonitor {name} scrapes port {port} of Service {service_name}, which does not reach /metrics (container port http {http_port:?})"
            ));
        }
    }
    problems
}

fn check_scraping(model: &Model, documents: &[Value], alerts: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let services = of_kind(documents, "Service");
    // Scrape jobs (Service names) per Deployment.
    let mut scraped: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let deployments = of_kind(documents, "Deployment");
    for monitor in of_kind(documents, "ServiceMonitor") {
        let name = name_of(monitor);
        let selector = monitor
            .pointer("/spec/selector/matchLabels")
            .cloned()
            .unwrap_or(Value::Null);
        let selected: Vec<&&Value> = services
            .iter()
            .filter(|service| {
                labels_subset(
                    &selector,
                    service.pointer("/metadata/labels").unwrap_or(&Value::Null),
                )
            })
            .collect();
        if selected.is_empty() {
            problems.push(format!("k8s: ServiceMonitor {name} selects no Service"));
        }
        let ports: Vec<String> = monitor
            .pointer("/spec/endpoints")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|endpoint| endpoint.get("port").and_then(Value::as_str))
            .map(ToString::to_string)
            .collect();
        if ports.is_empty() {
            problems.push(format!("k8s: ServiceMonitor {name} has no endpoint port"));
        }
        for service in selected {
            let service_name = name_of(service);
            let pods = service
                .pointer("/spec/selector")
                .and_then(|selector| selector.get(NAME_LABEL))
                .and_then(Value::as_str)
                .unwrap_or("");
            let Some(deployment) = deployments.iter().find(|deployment| {
                deployment
                    .pointer("/spec/template/metadata/labels")
                    .and_then(|labels| labels.get(NAME_LABEL))
                    .and_then(Value::as_str)
                    == Some(pods)
            }) else {
                continue;
            };
            problems.extend(check_scraped_port(&name, service, deployment, &ports));
            scraped
                .entry(name_of(deployment))
                .or_default()
                .push(service_name);
        }
    }
    for (name, service) in &model.services {
        if !matches!(service, crate::Service::App(_)) {
            continue;
        }
        match scraped.get(name).map(Vec::as_slice) {
            None | Some([]) => problems.push(format!(
                "k8s: Deployment {name} is scraped by no ServiceMonitor"
            )),
            Some([_]) => {}
            Some(more) => problems.push(format!(
                "k8s: Deployment {name} is scraped by several ServiceMonitors ({more:?}): its series would be doubled"
            )),
        }
    }
    let jobs: BTreeSet<String> = scraped.values().flatten().cloned().collect();
    for (alert, job) in alert_jobs(alerts) {
        if !jobs.contains(&job) {
            problems.push(format!(
                "alerts: {alert} matches job \"{job}\", which no ServiceMonitor scrapes"
            ));
        }
    }
    problems
}

/// `(alert, job)` for every `job="…"` / `job=~"a|b"` matcher in an expression.
fn alert_jobs(alerts: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for rule in alerts
        .get("groups")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|group| group.get("rules").and_then(Value::as_array))
        .flatten()
    {
        let name = rule.get("alert").and_then(Value::as_str).unwrap_or("?");
        let expr = rule.get("expr").and_then(Value::as_str).unwrap_or("");
        for (at, _) in expr.match_indices("job") {
            let rest = expr[at + 3..].trim_start();
            let Some(value) = rest
                .strip_prefix("=~")
                .or_else(|| rest.strip_prefix('='))
                .map(str::trim_start)
                .and_then(|value| value.strip_prefix('"'))
                .and_then(|value| value.split('"').next())
            else {
                continue;
            };
            for job in value.split('|') {
                out.push((name.to_string(), job.to_string()));
            }
        }
    }
    out
}

fn check_prometheus_rule(documents: &[Value], alerts: &Value) -> Vec<String> {
    let rules = of_kind(documents, "PrometheusRule");
    let [rule] = rules.as_slice() else {
        return vec![format!(
            "k8s: expected one PrometheusRule (the rules of deploy/prometheus/alerts.yml), found {}",
            rules.len()
        )];
    };
    if rule.pointer("/spec/groups") == alerts.get("groups") {
        Vec::new()
    } else {
        vec![format!(
            "k8s: PrometheusRule {} spec.groups differs from deploy/prometheus/alerts.yml groups: copy them over",
            name_of(rule)
        )]
    }
}
