//! "Services bind to configured addresses only", checked on the running
//! demo stack from `/proc` (std only): for each service process started by
//! this xtask (children of this process, recognised by executable name), its
//! socket inodes (`/proc/<pid>/fd` → `socket:[inode]`) are matched against
//! the LISTEN entries of `/proc/<pid>/net/tcp` and `tcp6`. A listener on any
//! other address or port (a `0.0.0.0` bind, a stray debug port) fails the
//! check; so does a configured address nobody listens on, or a running
//! service whose process is not found (the check would be vacuous).

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;

/// TCP state `LISTEN` in `/proc/net/tcp`.
const TCP_LISTEN: &str = "0A";

/// Checks `expected` (service name → its configured listen addresses);
/// `Ok(summary)` when every service listens on exactly those.
pub fn check(expected: &BTreeMap<&str, Vec<SocketAddr>>) -> Result<String, String> {
    let processes = children_by_name(expected.keys().copied().collect())?;
    let mut problems = Vec::new();
    let mut summary = Vec::new();
    for (name, configured) in expected {
        let Some(pids) = processes.get(name) else {
            problems.push(format!("{name}: process not found"));
            continue;
        };
        let mut listening = BTreeSet::new();
        for pid in pids {
            listening.extend(listeners_of(*pid)?);
        }
        let configured: BTreeSet<SocketAddr> = configured.iter().copied().collect();
        for extra in listening.difference(&configured) {
            problems.push(format!(
                "{name} listens on {extra}, which is not configured"
            ));
        }
        for missing in configured.difference(&listening) {
            problems.push(format!(
                "{name} does not listen on its configured {missing}"
            ));
        }
        summary.push(format!(
            "{name} {}",
            listening
                .iter()
                .map(SocketAddr::to_string)
                .collect::<Vec<_>>()
                .join(",")
        ));
    }
    if problems.is_empty() {
        Ok(summary.join("; "))
    } else {
        Err(problems.join("; "))
    }
}

/// Children of this process whose executable is one of `names`.
fn children_by_name(names: BTreeSet<&str>) -> Result<BTreeMap<&str, Vec<u32>>, String> {
    let me = std::process::id();
    let mut found: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    let entries = std::fs::read_dir("/proc").map_err(|error| format!("read /proc: {error}"))?;
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        // A process may exit between listing and reading: skip it.
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        if parent_of(&stat) != Some(me) {
            continue;
        }
        let Ok(exe) = std::fs::read_link(format!("/proc/{pid}/exe")) else {
            continue;
        };
        let file = exe.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        // A binary rebuilt while running shows as "name (deleted)".
        let file = file.trim_end_matches(" (deleted)");
        if let Some(name) = names.iter().find(|name| **name == file) {
            found.entry(name).or_default().push(pid);
        }
    }
    Ok(found)
}

/// The parent pid from `/proc/<pid>/stat` (the field after `(comm) state`;
/// comm may contain spaces and parentheses, so parse after the last `)`).
fn parent_of(stat: &str) -> Option<u32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// TCP addresses `pid` listens on.
fn listeners_of(pid: u32) -> Result<BTreeSet<SocketAddr>, String> {
    let fd_dir = format!("/proc/{pid}/fd");
    let mut inodes = BTreeSet::new();
    let entries = std::fs::read_dir(&fd_dir).map_err(|error| format!("read {fd_dir}: {error}"))?;
    for entry in entries.flatten() {
        if let Ok(target) = std::fs::read_link(entry.path())
            && let Some(inode) = target
                .to_str()
                .and_then(|t| t.strip_prefix("socket:["))
                .and_then(|t| t.strip_suffix(']'))
        {
            inodes.insert(inode.to_string());
        }
    }
    let mut listening = BTreeSet::new();
    for table in ["tcp", "tcp6"] {
        let path = format!("/proc/{pid}/net/{table}");
        let text = std::fs::read_to_string(Path::new(&path))
            .map_err(|error| format!("read {path}: {error}"))?;
        for (addr, inode) in listen_entries(&text) {
            if inodes.contains(&inode) {
                listening.insert(addr);
            }
        }
    }
    Ok(listening)
}

/// `(local address, inode)` of the LISTEN rows of a `/proc/net/tcp{,6}` table.
fn listen_entries(table: &str) -> Vec<(SocketAddr, String)> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.get(3) != Some(&TCP_LISTEN) {
                return None;
            }
            let addr = parse_address(fields.get(1)?)?;
            Some((addr, fields.get(9)?.to_string()))
        })
        .collect()
}

/// `0100007F:1F90` (IPv4) or 32 hex digits + port (IPv6): each 32-bit word
/// is in host (little-endian) byte order; the port is big-endian hex.
fn parse_address(text: &str) -> Option<SocketAddr> {
    let (ip, port) = text.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let words: Vec<u32> = (0..ip.len() / 8)
        .map(|i| u32::from_str_radix(&ip[i * 8..i * 8 + 8], 16).map(u32::swap_bytes))
        .collect::<Result<_, _>>()
        .ok()?;
    let ip: std::net::IpAddr = match words.as_slice() {
        [word] => Ipv4Addr::from(*word).into(),
        [a, b, c, d] => {
            let v6 = Ipv6Addr::from(
                (u128::from(*a) << 96)
                    | (u128::from(*b) << 64)
                    | (u128::from(*c) << 32)
                    | u128::from(*d),
            );
            v6.to_ipv4_mapped().map_or(v6.into(), Into::into)
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_net_rows_parse() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 4242 1 0 100 0 0 10 0\n\
   1: 0100007F:1F91 0100007F:D431 01 00000000:00000000 00:00000000 00000000  1000        0 4343 1 0 100 0 0 10 0\n";
        assert_eq!(
            listen_entries(table),
            vec![("127.0.0.1:8080".parse().unwrap(), "4242".to_string())]
        );
        assert_eq!(
            parse_address("00000000000000000000000000000000:1F90"),
            Some("[::]:8080".parse().unwrap())
        );
        assert_eq!(
            parse_address("0000000000000000FFFF00000100007F:0050"),
            Some("127.0.0.1:80".parse().unwrap())
        );
        assert_eq!(parent_of("12 (a) b) S 34 12 12"), Some(34));
    }
}
