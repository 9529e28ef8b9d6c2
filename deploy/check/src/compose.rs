//! `deploy/docker-compose.yml` (and the `deploy/Dockerfile` it builds) against
//! the code: service names, binaries, config files, env overrides, ports,
//! health checks, `depends_on`, host references and the topics.

use crate::{AppService, Model, Service, env_map, host_references, port_of, strings, yaml};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// Where the Dockerfile puts the docker configs.
const CONFIG_DIR: &str = "/etc/hyapp/";

/// Checks a parsed compose file and the Dockerfile text; returns the problems.
pub fn check_compose(model: &Model, compose: &Value, dockerfile: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let Some(services) = compose.get("services").and_then(Value::as_object) else {
        return vec!["compose: no `services` map".into()];
    };
    let dockerfile_bins = dockerfile_binaries(dockerfile);
    for bin in &dockerfile_bins {
        if !model.binaries.contains(bin) {
            problems.push(format!("Dockerfile: --bin {bin} is not a workspace binary"));
        }
    }
    if !dockerfile.lines().any(|line| {
        line.trim()
            .strip_prefix("USER ")
            .is_some_and(|user| !user.trim().starts_with("root") && !user.trim().starts_with('0'))
    }) {
        problems.push("Dockerfile: no non-root USER".into());
    }

    // Pass 1: each service's ports (needed to check references to it).
    let mut ports: BTreeMap<String, BTreeSet<u16>> = BTreeMap::new();
    let mut effective: BTreeMap<String, Value> = BTreeMap::new();
    for (name, service) in services {
        let env = env_map(service.get("environment"));
        match model.services.get(name) {
            Some(Service::App(app)) => {
                let file = config_file(service)
                    .and_then(|file| app.config_files.get(&file).cloned())
                    .unwrap_or(Value::Null);
                let config = app.effective(&file, &env);
                ports.insert(
                    name.clone(),
                    AppService::listen_ports(&config).into_values().collect(),
                );
                effective.insert(name.clone(), config);
            }
            Some(Service::Fake(fake)) => {
                ports.insert(name.clone(), fake.ports(&env));
            }
            None => {
                if let Some(infra) = model.infra.get(name) {
                    ports.insert(name.clone(), infra.ports.clone());
                }
            }
        }
    }

    let mut consumer_groups = BTreeSet::new();
    for (name, service) in services {
        let image = service.get("image").and_then(Value::as_str).unwrap_or("");
        let is_app_image = service.get("build").is_some()
            || image.split(':').next() == Some(model.app_image.as_str());
        let env = env_map(service.get("environment"));
        let command = command_args(service);

        if is_app_image {
            if !model.binaries.contains(name) {
                problems.push(format!("compose: service {name} is not a workspace binary"));
            }
            match command.first() {
                Some(bin) if bin == name => {}
                other => problems.push(format!(
                    "compose: service {name} runs {other:?}, not its own binary"
                )),
            }
            if !dockerfile_bins.contains(name) {
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

        match model.services.get(name) {
            Some(Service::App(app)) => {
                consumer_groups.extend(app.consumer_groups.iter().cloned());
                match config_file(service) {
                    Some(file) if app.config_files.contains_key(&file) => {
                        if !dockerfile.contains(&format!("configs/{file}")) {
                            problems
                                .push(format!("Dockerfile: does not copy {file} used by {name}"));
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
                for key in env.keys() {
                    problems.extend(app.check_env(name, key));
                }
                if let Some(config) = effective.get(name) {
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

        let own_ports = ports.get(name).cloned().unwrap_or_default();
        for mapping in service
            .get("ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let text = yaml::scalar_text(mapping).unwrap_or_default();
            let container = text.rsplit(':').next().unwrap_or("");
            let container = container.split('/').next().unwrap_or("");
            match container.parse::<u16>() {
                Ok(port) if own_ports.contains(&port) => {}
                _ => problems.push(format!(
                    "compose: {name} publishes {text}, but listens on {own_ports:?}"
                )),
            }
        }

        let health = service
            .get("healthcheck")
            .and_then(|check| check.get("test"))
            .map(|test| strings(test).join(" "));
        if model.services.contains_key(name) {
            match &health {
                None => problems.push(format!("compose: {name} has no healthcheck")),
                Some(test) => {
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
                }
            }
        }

        problems.extend(check_depends_on(name, service, services));

        // Host references in env values and the effective config.
        let mut texts: Vec<String> = env.values().cloned().collect();
        texts.extend(command.iter().cloned());
        if let Some(config) = effective.get(name) {
            texts.extend(strings(config));
        }
        for text in texts {
            for (host, port) in host_references(&text) {
                match ports.get(&host) {
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
    }

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
