//! What a Redis URL names, read before fred parses it: one server
//! (`redis://`, `rediss://`) or a primary found through Sentinel
//! (`redis-sentinel://`, `rediss-sentinel://`, fred's own URL form), whether
//! it uses TLS, every host the client may dial and whether the data nodes
//! get a password. Redis Cluster (`redis-cluster://`) is refused here, with
//! the reason: room-service's lease scripts read a key they derive from the
//! lease value (the holder's liveness key), which a cluster may keep on
//! another node. A query parameter fred would ignore is refused too, so a
//! URL never says more than the client does.

/// Schemes of one server.
const SINGLE: [&str; 2] = ["redis", "rediss"];
/// Schemes of a Sentinel-managed primary.
const SENTINEL: [&str; 2] = ["redis-sentinel", "rediss-sentinel"];
/// Query parameters of a Sentinel URL (fred's names).
const SENTINEL_PARAMETERS: [&str; 4] = [
    "node",
    "sentinelServiceName",
    "sentinelUsername",
    "sentinelPassword",
];

/// A Redis URL's shape, as far as the transport rule and the TLS settings
/// need it.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct RedisUrl<'a> {
    /// `rediss://` or `rediss-sentinel://`.
    pub tls: bool,
    /// A Sentinel URL: `hosts` are the sentinels, the primary is asked for.
    pub sentinel: bool,
    /// The URL's host, then each `node=` host (Sentinel): every address
    /// the client dials before it learns the primary's.
    pub hosts: Vec<&'a str>,
    /// The userinfo carries a non-empty password (AUTH or an ACL user of
    /// the data nodes).
    pub has_password: bool,
}

/// Reads `url`; the error is the reason, for a message that names the key
/// and the (redacted) URL.
pub(super) fn parse(url: &str) -> Result<RedisUrl<'_>, String> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(format!("must start with {}", accepted_schemes()));
    };
    let sentinel = SENTINEL.contains(&scheme);
    if !sentinel && !SINGLE.contains(&scheme) {
        return Err(if scheme.ends_with("-cluster") {
            "names a Redis Cluster, which is not supported: room-service's lease scripts read \
             the holder's liveness key beside the lease, and a cluster may keep the two on \
             different nodes; use one Redis, or a primary with replicas behind Sentinel \
             (redis-sentinel://)"
                .to_owned()
        } else {
            format!("must start with {}", accepted_schemes())
        });
    }
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let (userinfo, host_port) = authority.rsplit_once('@').unwrap_or(("", authority));
    let has_password = userinfo
        .split_once(':')
        .is_some_and(|(_, password)| !password.is_empty());
    let mut hosts = vec![crate::config::host_of_address(host_port)];
    let query = tail
        .split_once('?')
        .map_or("", |(_, query)| query.split('#').next().unwrap_or(""));
    let mut service_name = false;
    for parameter in query.split('&').filter(|parameter| !parameter.is_empty()) {
        let (key, value) = parameter.split_once('=').unwrap_or((parameter, ""));
        if !sentinel {
            return Err(format!(
                "has the query parameter `{key}`, which {scheme}:// does not read (`node` and \
                 the sentinel parameters need redis-sentinel:// or rediss-sentinel://)"
            ));
        }
        if !SENTINEL_PARAMETERS.contains(&key) {
            return Err(format!(
                "has the query parameter `{key}`; a Sentinel URL reads only {}",
                SENTINEL_PARAMETERS
                    .map(|known| format!("`{known}`"))
                    .join(", ")
            ));
        }
        match key {
            "node" => hosts.push(crate::config::host_of_address(value)),
            "sentinelServiceName" => service_name = !value.is_empty(),
            _ => {}
        }
    }
    if sentinel && !service_name {
        return Err(
            "needs the primary's name: ?sentinelServiceName=<name> (as in the sentinels' \
             `sentinel monitor <name> …`)"
                .to_owned(),
        );
    }
    Ok(RedisUrl {
        tls: scheme.starts_with("rediss"),
        sentinel,
        hosts,
        has_password,
    })
}

/// The schemes a message offers.
fn accepted_schemes() -> &'static str {
    "redis://, rediss:// (TLS), redis-sentinel:// or rediss-sentinel:// (Sentinel; TLS)"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_server_and_sentinel_urls_are_read() {
        assert_eq!(
            parse("rediss://room:pw@cache.internal:6380/1").unwrap(),
            RedisUrl {
                tls: true,
                sentinel: false,
                hosts: vec!["cache.internal"],
                has_password: true,
            }
        );
        assert_eq!(
            parse(
                "redis-sentinel://:pw@10.0.0.1:26379/0?sentinelServiceName=hyapp\
                 &node=10.0.0.2:26379&node=[::1]:26380&sentinelPassword=s"
            )
            .unwrap(),
            RedisUrl {
                tls: false,
                sentinel: true,
                hosts: vec!["10.0.0.1", "10.0.0.2", "::1"],
                has_password: true,
            }
        );
        let tls = parse("rediss-sentinel://s1?sentinelServiceName=m").unwrap();
        assert!(tls.tls && tls.sentinel && !tls.has_password);
    }

    #[test]
    fn cluster_unknown_schemes_and_stray_parameters_are_refused() {
        let refusal = |url: &str| parse(url).expect_err(url);
        assert!(
            refusal("redis-cluster://c1:7000").contains("Redis Cluster, which is not supported")
        );
        assert!(refusal("rediss-cluster://c1:7000").contains("not supported"));
        for url in [
            "localhost:6379",
            "valkey://c:6379",
            "redis+unix:///tmp/r.sock",
        ] {
            assert!(refusal(url).contains("must start with redis://"), "{url}");
        }
        assert!(
            refusal("redis://c:6379?sentinelServiceName=m")
                .contains("`sentinelServiceName`, which redis:// does not read")
        );
        assert!(
            refusal("redis-sentinel://s1?sentinelServicename=m").contains("`sentinelServicename`")
        );
        assert!(refusal("redis-sentinel://s1:26379").contains("sentinelServiceName=<name>"));
        assert!(
            refusal("redis-sentinel://s1?sentinelServiceName=")
                .contains("sentinelServiceName=<name>")
        );
    }
}
