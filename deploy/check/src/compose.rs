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

use crate::instances::Platform;
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
    // Every published mapping: (service, as written, parsed).
    let mut published: Vec<(String, String, PortMapping)> = Vec::new();
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
        let (replicas, replica_problem) = replicas(service);
        problems.extend(replica_problem.map(|problem| format!("compose: {name} {problem}")));
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
                // README.md#trust-boundary: the compose stack's listeners
                // have development credentials or none at all.
                problems.push(format!(
                    "compose: {name} publishes {text} on every interface; publish it on 127.0.0.1 only (\"127.0.0.1:{text}\")"
                ));
            }
            problems.extend(mapping.check_replicas(name, &text, replicas));
            published.push((name.clone(), text, mapping));
        }
        if replicas > 1 {
            for key in ["container_name", "hostname"] {
                if service.get(key).is_some() {
                    problems.push(format!(
                        "compose: {name} runs {replicas} replicas but sets {key}, which every replica would share"
                    ));
                }
            }
        }
        if let (Some(app), Some(config)) = (model.app(name), effective.get(name)) {
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

    for (at, (name, text, mapping)) in published.iter().enumerate() {
        for (other_name, other_text, other) in &published[at + 1..] {
            if mapping.host_overlaps(other) {
                problems.push(format!(
                    "compose: {name} publishes {text} and {other_name} publishes {other_text}: the host ports overlap"
                ));
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

/// How many containers compose runs for a service: `deploy.replicas` or
/// `scale`, and a problem when they disagree (compose refuses such a file;
/// the larger count is checked meanwhile) or are not numbers.
fn replicas(service: &Value) -> (u64, Option<String>) {
    let read = |value: Option<&Value>| -> Result<Option<u64>, String> {
        match value {
            None => Ok(None),
            Some(value) => yaml::scalar_text(value)
                .and_then(|text| text.parse().ok())
                .map(Some)
                .ok_or_else(|| format!("replica count {value} is not a number")),
        }
    };
    let (deploy, scale) = match (
        read(service.pointer("/deploy/replicas")),
        read(service.get("scale")),
    ) {
        (Ok(deploy), Ok(scale)) => (deploy, scale),
        (Err(problem), _) | (_, Err(problem)) => return (1, Some(problem)),
    };
    match (deploy, scale) {
        (Some(deploy), Some(scale)) if deploy != scale => (
            deploy.max(scale),
            Some(format!(
                "sets deploy.replicas {deploy} and scale {scale}; compose requires them to agree"
            )),
        ),
        (deploy, scale) => (deploy.or(scale).unwrap_or(1), None),
    }
}

/// One entry of a compose service's `ports:`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortMapping {
    /// Host address the ports bind to; empty: every address.
    pub host_ip: String,
    /// Host ports, first and last; `None`: Docker picks a free port per
    /// container.
    pub host: Option<(u16, u16)>,
    /// Container ports, first and last.
    pub container: (u16, u16),
    /// `tcp` or `udp`.
    pub protocol: String,
}

/// Parses a `ports:` entry: the short syntax
/// `[HOST_IP:][HOST[-HOST_END]:]CONTAINER[-CONTAINER_END][/PROTOCOL]` or the
/// long syntax (`target`, `published`, `host_ip`, `protocol`).
pub fn parse_port_mapping(entry: &Value) -> Result<PortMapping, String> {
    let mapping = match entry {
        Value::Object(long) => {
            let text = |key: &str| long.get(key).and_then(yaml::scalar_text);
            let target = text("target").ok_or("no target port")?;
            PortMapping {
                host_ip: text("host_ip").unwrap_or_default(),
                host: text("published")
                    .map(|text| port_range(&text))
                    .transpose()?,
                container: port_range(&target)?,
                protocol: text("protocol").unwrap_or_else(|| "tcp".into()),
            }
        }
        other => {
            let text = yaml::scalar_text(other).ok_or("not a port mapping")?;
            let (ports, protocol) = text.rsplit_once('/').unwrap_or((&text, "tcp"));
            // A bracketed IPv6 host address holds colons of its own.
            let (host_ip, ports) = match ports.strip_prefix('[') {
                Some(rest) => {
                    let (ip, rest) = rest.split_once("]:").ok_or("unclosed [ in the host IP")?;
                    (format!("[{ip}]"), rest)
                }
                None => (String::new(), ports),
            };
            let parts: Vec<&str> = ports.split(':').collect();
            let (host_ip, host, container) = match (parts.as_slice(), host_ip.is_empty()) {
                ([container], true) => (String::new(), "", *container),
                ([host, container], true) => (String::new(), *host, *container),
                ([ip, host, container], true) => (ip.to_string(), *host, *container),
                ([host, container], false) => (host_ip, *host, *container),
                _ => return Err("expected [HOST_IP:][HOST:]CONTAINER".into()),
            };
            PortMapping {
                host_ip,
                host: (!host.is_empty()).then(|| port_range(host)).transpose()?,
                container: port_range(container)?,
                protocol: protocol.to_string(),
            }
        }
    };
    let length = |(first, last): (u16, u16)| u32::from(last - first) + 1;
    if let Some(host) = mapping.host
        && length(mapping.container) > 1
        && length(host) != length(mapping.container)
    {
        return Err("a container port range needs a host range of the same length".into());
    }
    if !matches!(mapping.protocol.as_str(), "tcp" | "udp" | "sctp") {
        return Err(format!("unknown protocol {}", mapping.protocol));
    }
    Ok(mapping)
}

/// `7101` or `7101-7103`.
fn port_range(text: &str) -> Result<(u16, u16), String> {
    let parse = |port: &str| {
        port.trim()
            .parse::<u16>()
            .ok()
            .filter(|port| *port > 0)
            .ok_or_else(|| format!("`{port}` is not a port"))
    };
    let (first, last) = match text.split_once('-') {
        Some((first, last)) => (parse(first)?, parse(last)?),
        None => (parse(text)?, parse(text)?),
    };
    if first > last {
        return Err(format!("range {text} runs backwards"));
    }
    Ok((first, last))
}

impl PortMapping {
    /// Whether the host side binds a loopback address only (`127.0.0.1`,
    /// `[::1]`); no address means every interface.
    pub fn is_loopback(&self) -> bool {
        self.host_ip
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
    }

    /// Problems with running `replicas` containers of `service` with this
    /// mapping (`text` as written). Each container binds its own host port:
    /// one picked from a range when it maps one container port, the whole
    /// range when it maps several.
    fn check_replicas(&self, service: &str, text: &str, replicas: u64) -> Vec<String> {
        let Some((first, last)) = self.host else {
            return Vec::new();
        };
        let host_ports = u64::from(last - first) + 1;
        let (container, container_last) = self.container;
        if container != container_last {
            return (replicas > 1)
                .then(|| {
                    format!(
                        "compose: {service} publishes {text} for {replicas} replicas: every replica would bind the whole host range"
                    )
                })
                .into_iter()
                .collect();
        }
        if host_ports >= replicas {
            return Vec::new();
        }
        let wanted = u16::try_from(replicas - 1)
            .ok()
            .and_then(|extra| first.checked_add(extra))
            .map_or_else(
                || "a larger range".to_string(),
                |end| format!("\"{first}-{end}:{container}\""),
            );
        vec![format!(
            "compose: {service} publishes {text} ({host_ports} host port(s)) for {replicas} replicas: the others fail with \"port is already allocated\"; publish {wanted}"
        )]
    }

    /// Whether two mappings can claim the same host port.
    fn host_overlaps(&self, other: &PortMapping) -> bool {
        let (Some((first, last)), Some((other_first, other_last))) = (self.host, other.host) else {
            return false;
        };
        let same_address =
            self.host_ip.is_empty() || other.host_ip.is_empty() || self.host_ip == other.host_ip;
        same_address
            && self.protocol == other.protocol
            && first <= other_last
            && other_first <= last
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<PortMapping, String> {
        parse_port_mapping(&Value::from(text))
    }

    fn mapping(host: Option<(u16, u16)>, container: (u16, u16)) -> PortMapping {
        PortMapping {
            host_ip: String::new(),
            host,
            container,
            protocol: "tcp".into(),
        }
    }

    #[test]
    fn short_and_long_port_syntax() {
        assert_eq!(parse("7101").unwrap(), mapping(None, (7101, 7101)));
        assert_eq!(
            parse("7101:7101").unwrap(),
            mapping(Some((7101, 7101)), (7101, 7101))
        );
        assert_eq!(
            parse("7101-7103:7101").unwrap(),
            mapping(Some((7101, 7103)), (7101, 7101))
        );
        assert_eq!(
            parse("8000-8002:9000-9002").unwrap(),
            mapping(Some((8000, 8002)), (9000, 9002))
        );
        let bound = parse("127.0.0.1:7111-7113:7102/tcp").unwrap();
        assert_eq!(
            (bound.host_ip.as_str(), bound.host),
            ("127.0.0.1", Some((7111, 7113)))
        );
        let ephemeral = parse("127.0.0.1::7102").unwrap();
        assert_eq!(
            (ephemeral.host_ip.as_str(), ephemeral.host),
            ("127.0.0.1", None)
        );
        let v6 = parse("[::1]:7101:7101/udp").unwrap();
        assert_eq!(
            (v6.host_ip.as_str(), v6.protocol.as_str()),
            ("[::1]", "udp")
        );
        assert!(bound.is_loopback() && v6.is_loopback());
        for open in [
            "7101:7101",
            "0.0.0.0:7101:7101",
            "[::]:7101:7101",
            "10.0.0.1:7101:7101",
        ] {
            assert!(!parse(open).unwrap().is_loopback(), "{open}");
        }
        let long =
            parse_port_mapping(&serde_json::json!({"target": 7101, "published": "7101-7103"}));
        assert_eq!(long.unwrap(), mapping(Some((7101, 7103)), (7101, 7101)));
        for bad in [
            "7103-7101:7101",
            "x:7101",
            "7101:0",
            "1-2:3-5",
            "a:b:c:d",
            "7101/icmp",
            "[::1:7101",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn replicas_need_a_host_port_each() {
        let range = parse("7101-7103:7101").unwrap();
        assert!(range.check_replicas("svc", "r", 3).is_empty());
        let short = range.check_replicas("svc", "r", 4);
        assert!(
            short[0].contains("3 host port(s)) for 4 replicas"),
            "{short:?}"
        );
        let fixed = parse("7101:7101")
            .unwrap()
            .check_replicas("svc", "7101:7101", 3);
        assert!(fixed[0].contains("publish \"7101-7103:7101\""), "{fixed:?}");
        assert!(
            parse("7101:7101")
                .unwrap()
                .check_replicas("svc", "f", 1)
                .is_empty()
        );
        assert!(
            parse("7101")
                .unwrap()
                .check_replicas("svc", "e", 5)
                .is_empty()
        );
        assert!(
            !parse("8000-8001:8000-8001")
                .unwrap()
                .check_replicas("svc", "m", 2)
                .is_empty()
        );
    }

    #[test]
    fn replica_counts_and_overlaps() {
        assert_eq!(replicas(&serde_json::json!({})), (1, None));
        assert_eq!(
            replicas(&serde_json::json!({"deploy": {"replicas": 3}})),
            (3, None)
        );
        assert_eq!(replicas(&serde_json::json!({"scale": "2"})), (2, None));
        let (count, problem) =
            replicas(&serde_json::json!({"scale": 2, "deploy": {"replicas": 3}}));
        assert_eq!(count, 3);
        assert!(problem.unwrap().contains("agree"));
        assert!(replicas(&serde_json::json!({"scale": "many"})).1.is_some());
        let grpc = parse("7101-7103:7101").unwrap();
        assert!(grpc.host_overlaps(&parse("7102:7102").unwrap()));
        assert!(!grpc.host_overlaps(&parse("7111-7113:7102").unwrap()));
        assert!(!grpc.host_overlaps(&parse("7102:7102/udp").unwrap()));
        assert!(
            !parse("127.0.0.1:7101:7101")
                .unwrap()
                .host_overlaps(&parse("10.0.0.1:7101:7101").unwrap())
        );
        assert!(
            parse("127.0.0.1:7101:7101")
                .unwrap()
                .host_overlaps(&parse("7101:7101").unwrap())
        );
    }
}
