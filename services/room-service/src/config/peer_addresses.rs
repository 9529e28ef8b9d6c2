//! `peer_addresses`: which holder addresses this instance dials when it
//! forwards a call. A holder's address is read from its room lease, a value
//! in Redis; whoever can write Redis must not be able to point forwarded
//! calls (and their deadlines and trace context) at a host of their choice.
//! An address is dialled only when its scheme is this instance's own (TLS
//! fleets stay TLS), its port is `port` (when set) and its host matches one
//! of `hosts`: an IP network (`10.0.0.0/8`, `fd00::/8`), a DNS suffix
//! starting with a dot (`.room-service-peers.hyapp.svc.cluster.local`) or
//! one exact host; `*` matches any host (a development stack whose
//! instances are named by container ids). With `hosts` empty only loopback
//! hosts match, which fits a single-machine stack; a listener off loopback
//! must then list them.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::Config;
use crate::Error;

/// The `peer_addresses` section.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PeerAddressConfig {
    /// The port every instance's gRPC listener uses; 0 = any port.
    pub port: u16,
    /// Host patterns a holder's address must match (see the module doc);
    /// empty = loopback hosts only.
    pub hosts: Vec<String>,
}

/// One entry of `hosts`, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
enum HostPattern {
    Any,
    Network { base: IpAddr, prefix: u8 },
    Suffix(String),
    Exact(String),
}

impl HostPattern {
    fn parse(entry: &str) -> Result<Self, String> {
        if entry == "*" {
            return Ok(Self::Any);
        }
        if let Some((base, prefix)) = entry.split_once('/') {
            let base: IpAddr = base
                .parse()
                .map_err(|_| format!("`{entry}`: `{base}` is not an IP address"))?;
            let bits = if base.is_ipv4() { 32 } else { 128 };
            let prefix = prefix
                .parse::<u8>()
                .ok()
                .filter(|prefix| *prefix <= bits)
                .ok_or_else(|| format!("`{entry}`: the prefix must be 0..={bits}"))?;
            return Ok(Self::Network { base, prefix });
        }
        let valid = !entry.is_empty()
            && entry
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'));
        if !valid || entry == "." {
            return Err(format!("`{entry}` is not a network, a .suffix or a host"));
        }
        let lower = entry.to_ascii_lowercase();
        Ok(if entry.starts_with('.') {
            Self::Suffix(lower)
        } else {
            Self::Exact(
                lower
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .to_owned(),
            )
        })
    }

    fn matches(&self, host: &str) -> bool {
        match self {
            Self::Any => true,
            Self::Network { base, prefix } => host
                .parse::<IpAddr>()
                .is_ok_and(|address| in_network(address, *base, *prefix)),
            Self::Suffix(suffix) => host.len() > suffix.len() && host.ends_with(suffix.as_str()),
            Self::Exact(exact) => host == exact,
        }
    }
}

fn in_network(address: IpAddr, base: IpAddr, prefix: u8) -> bool {
    let (address, base, bits) = match (address, base) {
        (IpAddr::V4(a), IpAddr::V4(b)) => (u128::from(u32::from(a)), u128::from(u32::from(b)), 32),
        (IpAddr::V6(a), IpAddr::V6(b)) => (u128::from(a), u128::from(b), 128),
        _ => return false,
    };
    let shift = bits - u32::from(prefix);
    shift >= bits || (address >> shift) == (base >> shift)
}

/// The rule above, ready to check addresses against this instance's own
/// advertised URL.
#[derive(Debug, Clone)]
pub struct PeerAddressPolicy {
    scheme: String,
    port: u16,
    hosts: Vec<HostPattern>,
}

impl PeerAddressPolicy {
    /// The policy of `config` for an instance advertising `own_url`.
    pub fn new(config: &PeerAddressConfig, own_url: &str) -> Result<Self, Error> {
        let hosts = config
            .hosts
            .iter()
            .map(|entry| HostPattern::parse(entry))
            .collect::<Result<_, _>>()
            .map_err(|problem| Error::Config(format!("peer_addresses.hosts: {problem}")))?;
        Ok(Self {
            scheme: scheme_of(own_url).to_owned(),
            port: config.port,
            hosts,
        })
    }

    /// Why `url` (a holder's address from its lease) may not be dialled, if
    /// it may not.
    pub fn check(&self, url: &str) -> Result<(), String> {
        let uri: tonic::transport::Uri = url.parse().map_err(|_| "not a URL".to_owned())?;
        if uri.scheme_str() != Some(self.scheme.as_str()) {
            return Err(format!("the scheme must be {}://", self.scheme));
        }
        if uri
            .path_and_query()
            .is_some_and(|path| path.as_str() != "/")
        {
            return Err("a peer URL has no path".into());
        }
        let host = uri.host().unwrap_or_default().to_ascii_lowercase();
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if self.port != 0 && uri.port_u16() != Some(self.port) {
            return Err(format!("the port must be {}", self.port));
        }
        let allowed = if self.hosts.is_empty() {
            service_kit::config::is_loopback_host(host)
        } else {
            self.hosts.iter().any(|pattern| pattern.matches(host))
        };
        if allowed {
            Ok(())
        } else {
            Err(format!(
                "host `{host}` matches no peer_addresses.hosts entry"
            ))
        }
    }
}

fn scheme_of(url: &str) -> &str {
    if url.starts_with("https://") {
        "https"
    } else {
        "http"
    }
}

impl Config {
    /// `peer_addresses.hosts` parses, and a listener reachable from other
    /// hosts names the networks its peers live on (loopback-only would
    /// refuse every real peer; "any" would dial whatever Redis says).
    pub(super) fn check_peer_addresses(&self) -> Result<(), Error> {
        PeerAddressPolicy::new(&self.peer_addresses, &self.advertise_url)?;
        if self.grpc_reachable_from_other_hosts() && self.peer_addresses.hosts.is_empty() {
            return Err(Error::Config(format!(
                "grpc_listen `{}` is reachable from other hosts, so peer_addresses.hosts must name where the other instances are (an IP network, a .dns-suffix or a host): a lease's address is only dialled when it matches",
                self.grpc_listen
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(port: u16, hosts: &[&str], own: &str) -> PeerAddressPolicy {
        let config = PeerAddressConfig {
            port,
            hosts: hosts.iter().map(|host| (*host).to_owned()).collect(),
        };
        PeerAddressPolicy::new(&config, own).unwrap()
    }

    #[test]
    fn only_addresses_of_the_fleets_scheme_port_and_networks_are_dialled() {
        let fleet = policy(
            7101,
            &["10.0.0.0/8", ".peers.hyapp.svc", "fd00::/8"],
            "https://10.1.2.3:7101",
        );
        for url in [
            "https://10.9.8.7:7101",
            "https://room-service-0.peers.hyapp.svc:7101",
            "https://[fd00::1]:7101",
        ] {
            assert_eq!(fleet.check(url), Ok(()), "{url}");
        }
        for (url, why) in [
            ("http://10.9.8.7:7101", "scheme"),
            ("https://10.9.8.7:7000", "port"),
            ("https://203.0.113.9:7101", "matches no"),
            ("https://evil.example:7101", "matches no"),
            ("https://peers.hyapp.svc.evil.example:7101", "matches no"),
            ("https://10.9.8.7:7101/x", "path"),
            ("not a url", "URL"),
        ] {
            let refused = fleet.check(url).unwrap_err();
            assert!(refused.contains(why), "{url}: {refused}");
        }
        let local = policy(0, &[], "http://127.0.0.1:7101");
        assert_eq!(local.check("http://127.0.0.1:40001"), Ok(()));
        assert!(local.check("http://10.0.0.1:40001").is_err());
    }

    #[test]
    fn malformed_patterns_are_refused_by_name() {
        for entry in ["10.0.0.0/33", "10.0.0/8", "", "bad host", "."] {
            let config = PeerAddressConfig {
                port: 0,
                hosts: vec![entry.to_owned()],
            };
            let error = PeerAddressPolicy::new(&config, "http://127.0.0.1:1")
                .unwrap_err()
                .to_string();
            assert!(error.contains("peer_addresses.hosts"), "{entry}: {error}");
        }
    }
}
