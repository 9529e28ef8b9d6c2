//! Unit tests of the Redis client settings: schemes, Sentinel URLs, CA files,
//! the transport rule, redaction and the builder's bounds.

use super::*;

const KEYS: RedisKeys = RedisKeys {
    url: "redis.url",
    tls_ca_file: "redis.tls_ca_file",
};

fn refusal(url: &str, ca: &str) -> String {
    match client_config(KEYS, url, ca) {
        Ok(_) => panic!("accepted {url} with CA `{ca}`"),
        Err(error) => error.to_string(),
    }
}

#[test]
fn plain_and_tls_urls_are_accepted() {
    assert!(
        !client_config(KEYS, "redis://127.0.0.1:6379", "")
            .unwrap()
            .uses_tls()
    );
    assert!(
        client_config(KEYS, "rediss://127.0.0.1:6380", "")
            .unwrap()
            .uses_tls()
    );
}

#[test]
fn bad_settings_are_refused_naming_the_key() {
    assert!(refusal("localhost:6379", "").contains("redis.url"));
    assert!(
        refusal("redis://127.0.0.1:6379", "/etc/hostname").contains("redis.tls_ca_file is set")
    );
    let missing = refusal("rediss://127.0.0.1:6380", "/nonexistent/ca.pem");
    assert!(
        missing.contains("redis.tls_ca_file `/nonexistent/ca.pem`"),
        "{missing}"
    );
    // A file that exists but holds no certificate.
    let not_pem = std::env::temp_dir().join(format!("hyapp-not-pem-{}", std::process::id()));
    std::fs::write(&not_pem, "not a certificate\n").unwrap();
    let empty = refusal("rediss://127.0.0.1:6380", not_pem.to_str().unwrap());
    let _ = std::fs::remove_file(&not_pem);
    assert!(empty.contains("no certificate"), "{empty}");
}

#[test]
fn a_remote_redis_needs_tls_and_a_password_unless_allowed() {
    let allow = "redis.allow_insecure_transport";
    let check = |url: &str, allowed: bool| check_transport(KEYS, allow, url, allowed);
    for (url, why) in [
        ("redis://:hunter2@redis.internal:6379", "is not TLS"),
        ("redis://redis.internal:6379", "is not TLS"),
        ("rediss://redis.internal:6380", "carries no password"),
        ("rediss://room@redis.internal:6380/0", "carries no password"),
    ] {
        let error = check(url, false).unwrap_err().to_string();
        assert!(
            error.contains(why)
                && error.contains("`redis.internal`")
                && error.contains("redis.url")
                && error.contains(allow)
                && !error.contains("hunter2"),
            "{error}"
        );
        check(url, true).expect("explicitly allowed");
    }
    for url in [
        "rediss://:hunter2@redis.internal:6380",
        "rediss://room:hunter2@redis.internal:6380/0",
        "redis://127.0.0.1:6379",
        "redis://localhost:6379/1",
        "redis://[::1]:6379",
    ] {
        check(url, false).expect(url);
    }
}

#[test]
fn a_password_in_the_url_stays_out_of_the_message() {
    let error = refusal("redis://:hunter2@127.0.0.1:6379", "/etc/hostname");
    assert!(!error.contains("hunter2"), "{error}");
}

#[test]
fn sentinel_urls_name_every_sentinel_and_the_service() {
    use fred::types::config::ServerConfig;
    let config = client_config(
        KEYS,
        "redis-sentinel://:data-pw@127.0.0.1:26379/2?sentinelServiceName=hyapp\
         &node=127.0.0.1:26380&node=localhost:26381&sentinelPassword=sentinel-pw",
        "",
    )
    .unwrap();
    assert!(!config.uses_tls());
    assert_eq!(config.password.as_deref(), Some("data-pw"));
    assert_eq!(config.database, Some(2));
    let ServerConfig::Sentinel {
        hosts,
        service_name,
        password,
        ..
    } = &config.server
    else {
        panic!("not a Sentinel config: {:?}", config.server);
    };
    assert_eq!(service_name, "hyapp");
    assert_eq!(password.as_deref(), Some("sentinel-pw"));
    let mut ports: Vec<u16> = hosts.iter().map(|server| server.port).collect();
    ports.sort_unstable();
    assert_eq!(ports, [26379, 26380, 26381]);
    assert!(
        client_config(
            KEYS,
            "rediss-sentinel://s1.internal?sentinelServiceName=m",
            ""
        )
        .unwrap()
        .uses_tls()
    );
}

#[test]
fn cluster_and_malformed_sentinel_urls_are_refused_naming_the_key() {
    let cluster = refusal("redis-cluster://:hunter2@127.0.0.1:7000", "");
    assert!(
        cluster.contains("redis.url")
            && cluster.contains("Redis Cluster, which is not supported")
            && !cluster.contains("hunter2"),
        "{cluster}"
    );
    let unnamed = refusal("redis-sentinel://127.0.0.1:26379?node=127.0.0.1:26380", "");
    assert!(unnamed.contains("sentinelServiceName=<name>"), "{unnamed}");
    let typo = refusal(
        "redis-sentinel://127.0.0.1?sentinelServiceName=m&sentinelPasword=hunter2",
        "",
    );
    assert!(typo.contains("`sentinelPasword`"), "{typo}");
    let stray = refusal("redis://127.0.0.1:6379?sentinelServiceName=m", "");
    assert!(stray.contains("does not read"), "{stray}");
    let bad_node = refusal(
        "redis-sentinel://127.0.0.1?sentinelServiceName=m&node=s2",
        "",
    );
    assert!(bad_node.contains("redis.url"), "{bad_node}");
    let ca_without_tls = refusal(
        "redis-sentinel://127.0.0.1?sentinelServiceName=m",
        "/etc/hostname",
    );
    assert!(
        ca_without_tls.contains("redis.tls_ca_file is set"),
        "{ca_without_tls}"
    );
}

#[test]
fn every_sentinel_counts_for_the_transport_rule() {
    let allow = "redis.allow_insecure_transport";
    let check = |url: &str, allowed: bool| check_transport(KEYS, allow, url, allowed);
    check(
        "redis-sentinel://127.0.0.1:26379?sentinelServiceName=m&node=localhost:26380&node=[::1]:26381",
        false,
    )
    .expect("every sentinel on this machine");
    for (url, why, host) in [
        (
            "redis-sentinel://:pw@127.0.0.1:26379?sentinelServiceName=m&node=s2.internal:26379",
            "is not TLS (use rediss-sentinel://)",
            "`s2.internal`",
        ),
        (
            "rediss-sentinel://s1.internal?sentinelServiceName=m&sentinelPassword=hunter2",
            "carries no password",
            "`s1.internal`",
        ),
    ] {
        let error = check(url, false).unwrap_err().to_string();
        assert!(
            error.contains(why) && error.contains(host) && !error.contains("hunter2"),
            "{error}"
        );
        check(url, true).expect("explicitly allowed");
    }
    check(
        "rediss-sentinel://:pw@s1.internal?sentinelServiceName=m&node=s2.internal:26379",
        false,
    )
    .expect("TLS and a password");
}

#[test]
fn the_builder_bounds_commands_connections_and_reconnects() {
    let config = || client_config(KEYS, "redis://127.0.0.1:6379", "").unwrap();
    let builder = client_builder(config(), Duration::from_millis(200)).unwrap();
    assert_eq!(
        builder.get_performance_config().default_command_timeout,
        Duration::from_millis(200)
    );
    let connection = builder.get_connection_config();
    // Opening a connection keeps its floor below a short command deadline.
    assert_eq!(connection.connection_timeout, CONNECTION_FLOOR);
    assert_eq!(connection.unresponsive.max_timeout, Some(CONNECTION_FLOOR));
    assert!(
        builder
            .get_policy()
            .is_some_and(|policy| policy.max_attempts() == 0)
    );
    let long = client_builder(config(), Duration::from_secs(2)).unwrap();
    assert_eq!(
        long.get_connection_config().internal_command_timeout,
        Duration::from_secs(2)
    );
    let zero = client_builder(config(), Duration::ZERO)
        .map(|_| ())
        .unwrap_err();
    assert!(zero.to_string().contains("must be positive"), "{zero}");
}
