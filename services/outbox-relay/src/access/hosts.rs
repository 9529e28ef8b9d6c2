//! Which `Host` names the console and `/admin/*` answer to
//! (`admin_allowed_hosts`). A browser sends the name it resolved, so a page
//! on `evil.example` whose name was re-pointed at 127.0.0.1 (DNS rebinding)
//! reaches a developer's local relay with `Host: evil.example` — and with a
//! matching `Origin`, so a same-origin check alone does not stop it. Only a
//! list of the names the operators really use does.
//!
//! The probes and `/metrics` stay host-agnostic: Kubernetes and Prometheus
//! call them by pod IP.

use crate::Error;
use std::collections::BTreeSet;

/// The names allowed when `admin_allowed_hosts` is not set: the loopback
/// names a local browser or `kubectl port-forward` uses.
pub const DEFAULT_ALLOWED_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];

/// The allowed host names, lower case, without ports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedHosts {
    names: BTreeSet<String>,
}

impl Default for AllowedHosts {
    fn default() -> Self {
        Self {
            names: DEFAULT_ALLOWED_HOSTS
                .iter()
                .map(|&name| name.into())
                .collect(),
        }
    }
}

impl AllowedHosts {
    /// The configured names, checked, plus the address `http_listen` binds
    /// when it is a specific one (a listener on 10.0.0.5 is reached as
    /// 10.0.0.5). An empty list means [`DEFAULT_ALLOWED_HOSTS`].
    pub fn from_config(configured: &[String], http_listen: &str) -> Result<Self, Error> {
        let mut names = BTreeSet::new();
        for (index, entry) in configured.iter().enumerate() {
            names.insert(checked_name(index, entry)?);
        }
        if names.is_empty() {
            names = Self::default().names;
        }
        if let Ok(addr) = http_listen.parse::<std::net::SocketAddr>()
            && !addr.ip().is_unspecified()
        {
            names.insert(match addr {
                std::net::SocketAddr::V4(v4) => v4.ip().to_string(),
                std::net::SocketAddr::V6(v6) => format!("[{}]", v6.ip()),
            });
        }
        Ok(Self { names })
    }

    /// Whether `authority` (a `Host` header value, port optional) names an
    /// allowed host.
    pub fn allows(&self, authority: &str) -> bool {
        host_of(authority).is_some_and(|host| self.names.contains(&host))
    }

    /// The names, for messages and docs.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(String::as_str)
    }
}

/// The host of an authority (`name`, `name:port`, `[v6]:port`), lower case,
/// without a trailing dot; None when it is not one.
pub fn host_of(authority: &str) -> Option<String> {
    let authority = authority.trim();
    let host = if authority.starts_with('[') {
        let end = authority.find(']')?;
        let (host, rest) = authority.split_at(end + 1);
        if !(rest.is_empty() || port_ok(rest.strip_prefix(':')?)) {
            return None;
        }
        host
    } else {
        match authority.split_once(':') {
            Some((host, port)) if port_ok(port) => host,
            Some(_) => return None,
            None => authority,
        }
    };
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    (!host.is_empty()).then_some(host)
}

fn port_ok(port: &str) -> bool {
    !port.is_empty() && port.len() <= 5 && port.bytes().all(|byte| byte.is_ascii_digit())
}

/// One configured name: a DNS name, an IPv4 address or a bracketed IPv6
/// address, without a port or a wildcard.
fn checked_name(index: usize, entry: &str) -> Result<String, Error> {
    let refuse = |why: &str| {
        Error::Config(format!(
            "admin_allowed_hosts[{index}] `{}` {why}; give host names such as \
             `relay.internal` or `127.0.0.1` (no scheme, port or wildcard)",
            entry.escape_debug()
        ))
    };
    let name = entry.trim().trim_end_matches('.').to_ascii_lowercase();
    if name.is_empty() {
        return Err(refuse("is empty"));
    }
    if let Some(inner) = name
        .strip_prefix('[')
        .and_then(|rest| rest.strip_suffix(']'))
    {
        return match inner.parse::<std::net::Ipv6Addr>() {
            Ok(ip) => Ok(format!("[{ip}]")),
            Err(_) => Err(refuse("is not a bracketed IPv6 address")),
        };
    }
    if name.parse::<std::net::Ipv6Addr>().is_ok() {
        return Err(refuse("is an IPv6 address without brackets"));
    }
    let valid_label = |label: &str| {
        !label.is_empty()
            && label.len() <= 63
            && !label.starts_with('-')
            && label
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-')
    };
    if name.len() > 253 || !name.split('.').all(valid_label) {
        return Err(refuse("is not a host name"));
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_matched_without_their_port() {
        let hosts = AllowedHosts::from_config(&["Relay.Internal".into()], "0.0.0.0:7201").unwrap();
        assert!(hosts.allows("relay.internal:7201"));
        assert!(hosts.allows("RELAY.internal."));
        assert!(!hosts.allows("evil.example"));
        assert!(
            !hosts.allows("127.0.0.1:7201"),
            "a list replaces the default"
        );
        assert!(!hosts.allows("relay.internal:70x"));
        let local = AllowedHosts::from_config(&[], "10.0.0.5:7201").unwrap();
        for authority in ["localhost:7201", "127.0.0.1", "[::1]:7201", "10.0.0.5:7201"] {
            assert!(local.allows(authority), "{authority}");
        }
        assert!(!local.allows("evil.example:7201"));
        assert!(!local.allows(""));
    }

    #[test]
    fn bad_names_are_refused_with_their_index() {
        for bad in ["", "*.example", "relay:7201", "http://relay", "::1", "a..b"] {
            let error = AllowedHosts::from_config(&["ok".into(), bad.into()], "127.0.0.1:0")
                .unwrap_err()
                .to_string();
            assert!(error.contains("admin_allowed_hosts[1]"), "{bad}: {error}");
        }
        AllowedHosts::from_config(&["[::1]".into(), "10.1.2.3".into()], "x").unwrap();
    }
}
