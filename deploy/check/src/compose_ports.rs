//! The published ports and replica counts of a compose service: the
//! `ports:` entries in short and long syntax, whether each replica gets a
//! host port of its own, and whether two services' host ports overlap.

use crate::yaml;
use serde_json::Value;

/// How many containers compose runs for a service: `deploy.replicas` or
/// `scale`, and a problem when they disagree (compose refuses such a file;
/// the larger count is checked meanwhile) or are not numbers.
pub(crate) fn replicas(service: &Value) -> (u64, Option<String>) {
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
    pub(crate) fn check_replicas(&self, service: &str, text: &str, replicas: u64) -> Vec<String> {
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
    pub(crate) fn host_overlaps(&self, other: &PortMapping) -> bool {
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
