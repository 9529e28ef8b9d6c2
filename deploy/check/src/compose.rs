//! `deploy/docker-compose.yml` (and the `deploy/Dockerfile` it builds) against
//! the code: service names, binaries, config files, env overrides, ports,
//! health checks, `depends_on`, host references and the topics.
//!
//! A service may run several replicas (`deploy.replicas` or `scale`): each
//! replica then needs a host port of its own from every published range (a
//! fixed host port can be bound by one replica only), no two services may
//! publish overlapping host ports, `container_name` and `hostname` must be
//! left to Docker (they would be shared by every replica), and the replicas
//! get a per-instance identity and reachable address ([`crate::instances`]).

use crate::compose_ports::{PortMapping, parse_port_mapping, replicas};
use crate::instances::Platform;
use crate::{AppService, Model, Service, env_map, host_references, port_of, strings, yaml};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// Where the Dockerfile puts the docker configs.
const CONFIG_DIR: &str = "/etc/hyapp/";

/// What every service's checks read: the model, the compose services, the
/// Dockerfile and each service's ports and effective config.
struct Context<'a> {
    model: &'a Model,
    services: &'a serde_json::Map<String, Value>,
    dockerfile: &'a str,
    dockerfile_bins: BTreeSet<String>,
    /// Each service's listening ports (needed to check references to it).
    ports: BTreeMap<String, BTreeSet<u16>>,
    /// Each app service's config as it would run: defaults, file, env.
    effective: BTreeMap<String, Value>,
}

/// Checks a parsed compose file and the Dockerfile text; returns the problems.
pub fn check_compose(model: &Model, compose: &Value, dockerfile: &str) -> Vec<String> {
    let Some(services) = compose.get("services").and_then(Value::as_object) else {
        return vec!["compose: no `services` map".into()];
    };
    let mut context = Context {
        model,
        services,
        dockerfile,
        dockerfile_bins: dockerfile_binaries(dockerfile),
        ports: BTreeMap::new(),
        effective: BTreeMap::new(),
    };
    let mut problems = check_dockerfile(&context);
    collect_ports(&mut context);
    let mut consumer_groups = BTreeSet::new();
    // Every published mapping: (service, as written, parsed).
    let mut published: Vec<(String, String, PortMapping)> = Vec::new();
    for (name, service) in services {
        if let Some(Service::App(app)) = model.services.get(name) {
            consumer_groups.extend(app.consumer_groups.iter().cloned());
        }
        problems.extend(check_service(&context, name, service, &mut published));
    }
    problems.extend(check_overlaps(&published));
    let all_text = compose.to_string();
    for group in consumer_groups {
        if !all_text.contains(&format!("{group}.dlq")) {
            problems.push(format!(
                "compose: dead-letter topic {group}.dlq of a running consumer is never created"
            ));
        }
    }
    problems
}

/// The Dockerfile builds workspace binaries only and runs as a non-root user.
fn check_dockerfile(context: &Context<'_>) -> Vec<String> {
    let mut problems = Vec::new();
    for bin in &context.dockerfile_bins {
        if !context.model.binaries.contains(bin) {
            problems.push(format!("Dockerfile: --bin {bin} is not a workspace binary"));
        }
    }
    if !context.dockerfile.lines().any(|line| {
        line.trim()
            .strip_prefix("USER ")
            .is_some_and(|user| !user.trim().starts_with("root") && !user.trim().starts_with('0'))
    }) {
        problems.push("Dockerfile: no non-root USER".into());
    }
    problems
}

/// Each service's ports and, for an app, its effective config.
fn collect_ports(context: &mut Context<'_>) {
    for (name, service) in context.services {
        let env = env_map(service.get("environment"));
        match context.model.services.get(name) {
            Some(Service::App(app)) => {
                let file = config_file(service)
                    .and_then(|file| app.config_files.get(&file).cloned())
                    .unwrap_or(Value::Null);
                let config = app.effective(&file, &env);
                context.ports.insert(
                    name.clone(),
                    AppService::listen_ports(&config).into_values().collect(),
                );
                context.effective.insert(name.clone(), config);
            }
            Some(Service::Fake(fake)) => {
                context.ports.insert(name.clone(), fake.ports(&env));
            }
            None => {
                if let Some(infra) = context.model.infra.get(name) {
                    context.ports.insert(name.clone(), infra.ports.clone());
                }
            }
        }
    }
}

/// Every check of one compose service; its published ports go to `published`.
fn check_service(
    context: &Context<'_>,
    name: &str,
    service: &Value,
    published: &mut Vec<(String, String, PortMapping)>,
) -> Vec<String> {
    let env = env_map(service.get("environment"));
    let mut problems = check_image(context, name, service);
    problems.extend(check_settings(context, name, service, &env));
    let (replicas, replica_problem) = replicas(service);
    problems.extend(replica_problem.map(|problem| format!("compose: {name} {problem}")));
    problems.extend(check_ports(context, name, service, replicas, published));
    problems.extend(check_replicas(context, name, service, replicas));
    problems.extend(check_healthcheck(context, name, service));
    problems.extend(check_depends_on(name, service, context.services));
    problems.extend(check_host_references(context, name, service, &env));
    problems
}

/// An app image runs its own workspace binary, built by the Dockerfile; any
/// other image is known infrastructure.
fn check_image(context: &Context<'_>, name: &str, service: &Value) -> Vec<String> {
    let model = context.model;
    let image = service.get("image").and_then(Value::as_str).unwrap_or("");
    let is_app_image =
        service.get("build").is_some() || image.split(':').next() == Some(model.app_image.as_str());
    let mut problems = Vec::new();
    if is_app_image {
        if !model.binaries.contains(name) {
            problems.push(format!("compose: service {name} is not a workspace binary"));
        }
        match command_args(service).first() {
            Some(bin) if bin == name => {}
            other => problems.push(format!(
                "compose: service {name} runs {other:?}, not its own binary"
            )),
        }
        if !context.dockerfile_bins.contains(name) {
            problems.push(format!("Dockerfile: does not build --bin {name}"));
        }
    } else if let Some(infra) = model.infra.get(name) {
        if !infra.images.iter().any(|prefix| image.starts_with(prefix)) {
            problems.push(format!(
                "compose: {name} uses image {image}, expected one of {:?}",
                infra.images
            ));
        }
    } else {
        problems.push(format!(
            "compose: service {name} is neither a workspace binary nor known infrastructure"
        ));
    }
    problems
}

/// An app's config file (copied by the Dockerfile, its docker file), env keys
/// and listeners; a fake's env keys are its flags.
fn check_settings(
    context: &Context<'_>,
    name: &str,
    service: &Value,
    env: &BTreeMap<String, String>,
) -> Vec<String> {
    let mut problems = Vec::new();
    match context.model.services.get(name) {
        Some(Service::App(app)) => {
            problems.extend(check_config_file(context, name, service, app));
            for key in env.keys() {
                problems.extend(app.check_env(name, key));
            }
            if let Some(config) = context.effective.get(name) {
                problems.extend(app.check_listen(name, config));
            }
        }
        Some(Service::Fake(fake)) => {
            for key in env.keys() {
                if !fake.env_flags.contains_key(key) {
                    problems.push(format!(
                        "compose: {name} env {key} is not one of its flags ({:?})",
                        fake.env_flags.keys().collect::<Vec<_>>()
                    ));
                }
            }
        }
        None => {}
    }
    problems
}

/// The `--config` an app reads: one of its configs/, its docker file, copied
/// into the image.
fn check_config_file(
    context: &Context<'_>,
    name: &str,
    service: &Value,
    app: &AppService,
) -> Vec<String> {
    let mut problems = Vec::new();
    match config_file(service) {
        Some(file) if app.config_files.contains_key(&file) => {
            if !context.dockerfile.contains(&format!("configs/{file}")) {
                problems.push(format!("Dockerfile: does not copy {file} used by {name}"));
            }
            if file != app.docker_file {
                problems.push(format!(
                    "compose: {name} reads {file}, expected {}",
                    app.docker_file
                ));
            }
        }
        Some(file) => problems.push(format!(
            "compose: {name} --config {file}: no such file in its configs/"
        )),
        None => problems.push(format!(
            "compose: {name} has no `--config {CONFIG_DIR}<file>`"
        )),
    }
    problems
}

/// Each published port is one the service listens on, on loopback only,
/// with a host port per replica.
fn check_ports(
    context: &Context<'_>,
    name: &str,
    service: &Value,
    replicas: u64,
    published: &mut Vec<(String, String, PortMapping)>,
) -> Vec<String> {
    let own_ports = context.ports.get(name).cloned().unwrap_or_default();
    let mut problems = Vec::new();
    for mapping in service
        .get("ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let text = yaml::scalar_text(mapping).unwrap_or_else(|| mapping.to_string());
        let mapping = match parse_port_mapping(mapping) {
            Ok(mapping) => mapping,
            Err(error) => {
                problems.push(format!("compose: {name} ports entry {text}: {error}"));
                continue;
            }
        };
        let (first, last) = mapping.container;
        if !(first..=last).all(|port| own_ports.contains(&port)) {
            problems.push(format!(
                "compose: {name} publishes {text}, but listens on {own_ports:?}"
            ));
        }
        if !mapping.is_loopback() {
            // docs/operations.md#trust-boundary: the compose stack's listeners
            // have development credentials or none at all.
            problems.push(format!(
                "compose: {name} publishes {text} on every interface; publish it on 127.0.0.1 only (\"127.0.0.1:{text}\")"
            ));
        }
        problems.extend(mapping.check_replicas(name, &text, replicas));
        published.push((name.to_string(), text, mapping));
    }
    problems
}

/// Replicas share no container name or hostname and get an identity each.
fn check_replicas(
    context: &Context<'_>,
    name: &str,
    service: &Value,
    replicas: u64,
) -> Vec<String> {
    let mut problems = Vec::new();
    if replicas > 1 {
        for key in ["container_name", "hostname"] {
            if service.get(key).is_some() {
                problems.push(format!(
                    "compose: {name} runs {replicas} replicas but sets {key}, which every replica would share"
                ));
            }
        }
    }
    if let (Some(app), Some(config)) = (context.model.app(name), context.effective.get(name)) {
        problems.extend(
            app.check_instances(
                name,
                config,
                &BTreeSet::new(),
                replicas > 1,
                Platform::Compose,
            )
            .into_iter()
            .map(|problem| format!("compose: {problem}")),
        );
    }
    problems
}

/// A service of the model has a healthcheck on its own port; an app's asks
/// `/readyz`.
fn check_healthcheck(context: &Context<'_>, name: &str, service: &Value) -> Vec<String> {
    let model = context.model;
    if !model.services.contains_key(name) {
        return Vec::new();
    }
    let own_ports = context.ports.get(name).cloned().unwrap_or_default();
    let health = service
        .get("healthcheck")
        .and_then(|check| check.get("test"))
        .map(|test| strings(test).join(" "));
    let Some(test) = health else {
        return vec![format!("compose: {name} has no healthcheck")];
    };
    let mut problems = Vec::new();
    for url in test
        .split_whitespace()
        .filter(|word| word.starts_with("http"))
    {
        match port_of(url) {
            Some(port) if own_ports.contains(&port) => {}
            _ => problems.push(format!(
                "compose: {name} healthcheck {url} is not one of its ports {own_ports:?}"
            )),
        }
    }
    if model.app(name).is_some() && !test.contains("/readyz") {
        problems.push(format!("compose: {name} healthcheck does not use /readyz"));
    }
    problems
}

/// Host references in env values, the command and the effective config name
/// a service and one of its ports.
fn check_host_references(
    context: &Context<'_>,
    name: &str,
    service: &Value,
    env: &BTreeMap<String, String>,
) -> Vec<String> {
    let mut texts: Vec<String> = env.values().cloned().collect();
    texts.extend(command_args(service));
    if let Some(config) = context.effective.get(name) {
        texts.extend(strings(config));
    }
    let mut problems = Vec::new();
    for text in texts {
        for (host, port) in host_references(&text) {
            match context.ports.get(&host) {
                Some(known) if known.contains(&port) => {}
                Some(known) => problems.push(format!(
                    "compose: {name} refers to {host}:{port}, but {host} listens on {known:?}"
                )),
                None => problems.push(format!(
                    "compose: {name} refers to {host}:{port}, and there is no service {host}"
                )),
            }
        }
    }
    problems
}

/// No two services publish overlapping host ports.
fn check_overlaps(published: &[(String, String, PortMapping)]) -> Vec<String> {
    let mut problems = Vec::new();
    for (at, (name, text, mapping)) in published.iter().enumerate() {
        for (other_name, other_text, other) in &published[at + 1..] {
            if mapping.host_overlaps(other) {
                problems.push(format!(
                    "compose: {name} publishes {text} and {other_name} publishes {other_text}: the host ports overlap"
                ));
            }
        }
    }
    problems
}

fn check_depends_on(
    name: &str,
    service: &Value,
    services: &serde_json::Map<String, Value>,
) -> Vec<String> {
    let mut problems = Vec::new();
    let deps: Vec<(String, Option<String>)> = match service.get("depends_on") {
        Some(Value::Object(map)) => map
            .iter()
            .map(|(dep, spec)| {
                let condition = spec
                    .get("condition")
                    .and_then(Value::as_str)
                    .map(str::to_string);
                (dep.clone(), condition)
            })
            .collect(),
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(Value::as_str)
            .map(|dep| (dep.to_string(), None))
            .collect(),
        _ => Vec::new(),
    };
    for (dep, condition) in deps {
        let Some(target) = services.get(&dep) else {
            problems.push(format!("compose: {name} depends on unknown service {dep}"));
            continue;
        };
        match condition.as_deref() {
            None | Some("service_started") | Some("service_completed_successfully") => {}
            Some("service_healthy") => {
                if target.get("healthcheck").is_none() {
                    problems.push(format!(
                        "compose: {name} waits for {dep} to be healthy, but {dep} has no healthcheck"
                    ));
                }
            }
            Some(other) => problems.push(format!(
                "compose: {name} depends on {dep} with unknown condition {other}"
            )),
        }
    }
    problems
}

/// The command as a list of words.
fn command_args(service: &Value) -> Vec<String> {
    match service.get("command") {
        Some(Value::Array(items)) => items.iter().filter_map(yaml::scalar_text).collect(),
        Some(Value::String(text)) => text.split_whitespace().map(str::to_string).collect(),
        _ => Vec::new(),
    }
}

/// The file name after `--config /etc/hyapp/`.
fn config_file(service: &Value) -> Option<String> {
    let args = command_args(service);
    let at = args.iter().position(|arg| arg == "--config")?;
    args.get(at + 1)?
        .strip_prefix(CONFIG_DIR)
        .map(str::to_string)
}

/// The `--bin NAME` arguments of the Dockerfile's build.
pub fn dockerfile_binaries(dockerfile: &str) -> BTreeSet<String> {
    let words: Vec<&str> = dockerfile.split_whitespace().collect();
    words
        .windows(2)
        .filter(|pair| pair[0] == "--bin")
        .map(|pair| pair[1].to_string())
        .collect()
}
