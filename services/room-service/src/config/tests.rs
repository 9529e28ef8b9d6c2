//! The configuration's unit tests: defaults, the shipped files, the
//! messages naming their key, and what becomes of a value out of range
//! (refused, or replaced with a warning: docs/style.md, "Configuration").

use super::*;
use room_core::RoomRules;

#[test]
fn defaults_are_valid() {
    let config = Config::default().validate().unwrap();
    assert!(!config.node_id.is_empty());
    assert_eq!(config.room.rules.to_rules(), RoomRules::default());
}

#[test]
fn treasure_wakeups_need_a_relay_that_can_publish_them() {
    let mut config = Config::default();
    config.rocketmq.treasure_open.enabled = true;
    config.outbox_worker.publish_mode = "direct".into();
    let error = config.clone().validate().unwrap_err().to_string();
    assert!(
        error.contains("outbox_worker.publish_mode mq or dual"),
        "{error}"
    );
    config.rocketmq.enabled = true;
    config.rocketmq.room_outbox.enabled = true;
    config.outbox_worker.publish_mode = "mq".into();
    config.clone().validate().unwrap();
    config.outbox_worker.publish_mode = "direct".into();
    config.outbox_worker.enabled = false;
    config
        .validate()
        .expect("a standalone relay publishes the wake-ups");
}

#[test]
fn messages_name_the_key() {
    type Mutation = fn(&mut Config);
    let cases: Vec<(Mutation, &str)> = vec![
        (|c| c.room.snapshot_every_n = 0, "room.snapshot_every_n"),
        (
            |c| c.room.group_commit_max_batch = 0,
            "room.group_commit_max_batch",
        ),
        (
            |c| c.room.shared_commit_lanes = 65,
            "room.shared_commit_lanes",
        ),
        (
            |c| c.room.shared_commit_max_rooms = 0,
            "room.shared_commit_max_rooms",
        ),
        (|c| c.wallet.endpoint = "wallet:1".into(), "wallet.endpoint"),
        (
            |c| c.wallet.keepalive_interval = ConfigDuration::from_secs(0),
            "wallet.keepalive_interval",
        ),
        (|c| c.redis.url = "localhost".into(), "redis.url"),
        (|c| c.grpc_listen = "nowhere".into(), "grpc_listen"),
        (|c| c.node_id = "bad node".into(), "node_id"),
        (
            |c| c.room.rules.treasure_thresholds = vec![5, 5],
            "room.rules.treasure_thresholds",
        ),
        (|c| c.tencent_im.enabled = true, "tencent_im.sdk_app_id"),
    ];
    for (mutate, key) in cases {
        let mut config = Config::default();
        mutate(&mut config);
        let error = config.validate().unwrap_err().to_string();
        assert!(error.contains(key), "{error} should name {key}");
    }
}

#[test]
fn room_caps_must_be_at_least_one() {
    type Mutation = fn(&mut RulesConfig);
    let cases: [(Mutation, &str); 4] = [
        (|r| r.max_members = 0, "room.rules.max_members"),
        (|r| r.max_admins = 0, "room.rules.max_admins"),
        (|r| r.max_bans = 0, "room.rules.max_bans"),
        (|r| r.max_contributors = 0, "room.rules.max_contributors"),
    ];
    for (mutate, key) in cases {
        let mut config = Config::default();
        mutate(&mut config.room.rules);
        let error = config.validate().unwrap_err().to_string();
        assert!(error.contains(key), "{error} should name {key}");
    }
    let mut config = Config::default();
    config.room.rules.max_members = 1;
    config.room.rules.max_admins = 1;
    config.room.rules.max_bans = 1;
    config.room.rules.max_contributors = 1;
    let rules = config.validate().unwrap().room.rules.to_rules();
    assert_eq!(
        (
            rules.max_members,
            rules.max_admins,
            rules.max_bans,
            rules.max_contributors
        ),
        (1, 1, 1, 1)
    );
}

#[test]
fn max_refund_attempts_must_be_at_least_one() {
    let mut config = Config::default();
    config.saga.max_refund_attempts = 0;
    let error = config.clone().validate().unwrap_err().to_string();
    assert!(error.contains("saga.max_refund_attempts"), "{error}");
    config.saga.max_refund_attempts = 1;
    assert_eq!(config.validate().unwrap().saga.max_refund_attempts, 1);
}

fn shipped(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("configs")
        .join(name)
}

#[test]
fn shipped_files_load_and_env_overrides_them() {
    let env = |pairs: &[(&str, &str)]| {
        Some(
            pairs
                .iter()
                .map(|(key, value)| (key.to_string(), value.to_string()))
                .collect(),
        )
    };
    let local = Config::load_with_env(
        Some(shipped("room-service.yaml")),
        env(&[
            ("ROOM__OUTBOX_WORKER__BATCH_SIZE", "500"),
            ("ROOM__ROOM__RULES__TREASURE_THRESHOLDS", "10,20"),
        ]),
    )
    .unwrap();
    assert_eq!(local.outbox_worker.batch_size, 500);
    assert_eq!(local.room.rules.treasure_thresholds, vec![10, 20]);
    let docker =
        Config::load_with_env(Some(shipped("room-service.docker.yaml")), env(&[])).unwrap();
    assert_eq!(docker.grpc_listen, "0.0.0.0:7101");
    // The example's certificate paths are the deployment's; a test PKI
    // stands in for its files.
    let pki = testkit::pki::TestPki::generate(&["room-service.hyapp.internal"]);
    let (cert, key, ca) = (
        pki.server_cert.display().to_string(),
        pki.server_key.display().to_string(),
        pki.ca.display().to_string(),
    );
    let files = [
        ("ROOM__GRPC_TLS__CERT_FILE", cert.as_str()),
        ("ROOM__GRPC_TLS__KEY_FILE", key.as_str()),
        ("ROOM__GRPC_TLS__CLIENT_CA_FILE", ca.as_str()),
        ("ROOM__PEER_TLS__CERT_FILE", cert.as_str()),
        ("ROOM__PEER_TLS__KEY_FILE", key.as_str()),
        ("ROOM__PEER_TLS__CA_FILE", ca.as_str()),
    ];
    let with_secret: Vec<(&str, &str)> = files
        .iter()
        .copied()
        .chain([("ROOM__TENCENT_IM__SECRET_KEY", "real-secret-key")])
        .collect();
    let tencent = Config::load_with_env(
        Some(shipped("room-service.tencent.example.yaml")),
        env(&with_secret),
    )
    .unwrap();
    assert!(tencent.grpc_tls.requires_client_cert());
    assert_eq!(tencent.outbox_worker.publish_mode, "mq");
    let dump = service_kit::config::dump(&tencent);
    assert!(!dump.contains("real-secret-key"), "{dump}");
    assert!(dump.contains("***"));
    // Without the secret the example refuses to start and names the key.
    let error = Config::load_with_env(
        Some(shipped("room-service.tencent.example.yaml")),
        env(&files),
    )
    .unwrap_err()
    .to_string();
    assert!(error.contains("tencent_im.secret_key"), "{error}");
}

#[test]
fn non_positive_durations_fall_back() {
    let mut config = Config::default();
    config.room.presence_sweep_interval = ConfigDuration::from_millis(0);
    config.saga.sweep_interval = ConfigDuration::from_millis(-5);
    let config = config.validate().unwrap();
    assert_eq!(
        config.room.presence_sweep_interval,
        ConfigDuration::from_secs(5)
    );
    assert_eq!(config.saga.sweep_interval, ConfigDuration::from_secs(30));
}

#[test]
fn a_non_positive_duration_is_replaced_by_its_default_and_warned() {
    type Field = fn(&mut Config) -> &mut ConfigDuration;
    let cases: [(Field, &str, i64); 9] = [
        (|c| &mut c.forward_timeout, "forward_timeout", 5),
        (|c| &mut c.shutdown_grace, "shutdown_grace", 20),
        (|c| &mut c.redis.command_timeout, "redis.command_timeout", 1),
        (|c| &mut c.room.idle_ttl, "room.idle_ttl", 300),
        (|c| &mut c.room.presence_ttl, "room.presence_ttl", 60),
        (
            |c| &mut c.room.presence_sweep_interval,
            "room.presence_sweep_interval",
            5,
        ),
        (|c| &mut c.wallet.timeout, "wallet.timeout", 2),
        (|c| &mut c.saga.sweep_interval, "saga.sweep_interval", 30),
        (|c| &mut c.saga.stuck_after, "saga.stuck_after", 60),
    ];
    for (field, key, default_secs) in cases {
        let mut config = Config::default();
        *field(&mut config) = ConfigDuration::from_millis(-5);
        let mut config = config.validate().unwrap();
        let default = ConfigDuration::from_secs(default_secs);
        assert_eq!(*field(&mut config), default, "{key}");
        let expected = Adjusted {
            key: key.to_string(),
            given: ConfigDuration::from_millis(-5).to_string(),
            used: default.to_string(),
        };
        assert_eq!(config.adjusted(), [expected], "{key} is warned");
    }
    let config = Config::default().validate().unwrap();
    assert!(config.adjusted().is_empty(), "{:?}", config.adjusted());
}

#[test]
fn a_redis_pool_outside_1_to_64_is_refused_naming_the_key() {
    for refused in [0, 65] {
        let mut config = Config::default();
        config.redis.pool_size = refused;
        let error = config.validate().unwrap_err().to_string();
        assert!(error.contains("redis.pool_size"), "{error}");
        assert!(error.contains(&format!("got {refused}")), "{error}");
    }
    for accepted in [1, 64] {
        let mut config = Config::default();
        config.redis.pool_size = accepted;
        assert_eq!(config.validate().unwrap().redis.pool_size, accepted);
    }
}
