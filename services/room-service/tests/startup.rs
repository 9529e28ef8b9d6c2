//! The `room-service` binary as an operator starts it: invalid configs are
//! refused naming the key (file and environment), and `--dump-config`
//! redacts every secret it holds.

use testkit::binary::{ConfigCase, assert_dump_redacts, assert_start_refused, trace_export_cases};

const EXE: &str = env!("CARGO_BIN_EXE_room-service");

/// Valid apart from the case's damage; MySQL and Redis are unreachable, so a
/// wrongly accepted config fails on connect without naming the key.
const BASE: &str = "mysql:
  url: \"mysql://root@127.0.0.1:1/none\"
redis:
  url: \"redis://127.0.0.1:1\"
";

#[test]
fn invalid_configs_are_refused_naming_the_key() {
    let env = |name, key, value, names| ConfigCase::env(name, BASE, key, value, names);
    let file = |name, extra: &str, names| ConfigCase::file(name, &format!("{BASE}{extra}"), names);
    let cases = [
        file("unknown top-level key", "grpc_lisen: \"x\"\n", "grpc_lisen"),
        env(
            "unknown nested key from the environment",
            "ROOM__ROOM__MAILBOX_CAPASITY",
            "5",
            "mailbox_capasity",
        ),
        env(
            "gRPC listen not an address",
            "ROOM__GRPC_LISTEN",
            "nowhere",
            "grpc_listen",
        ),
        env(
            "HTTP listen without port",
            "ROOM__HTTP_LISTEN",
            "127.0.0.1",
            "http_listen",
        ),
        env(
            "redis url scheme",
            "ROOM__REDIS__URL",
            "http://127.0.0.1:6379",
            "redis.url",
        ),
        env(
            "lease too short",
            "ROOM__REDIS__LEASE_TTL",
            "500ms",
            "redis.lease_ttl",
        ),
        env(
            "liveness key outliving the lease",
            "ROOM__REDIS__LIVENESS_TTL",
            "60s",
            "redis.liveness_ttl",
        ),
        env(
            "liveness key renewed too often to be kept",
            "ROOM__REDIS__LIVENESS_TTL",
            "50ms",
            "redis.liveness_ttl",
        ),
        env(
            "zero group commit batch",
            "ROOM__ROOM__GROUP_COMMIT_MAX_BATCH",
            "0",
            "room.group_commit_max_batch",
        ),
        env(
            "decreasing thresholds",
            "ROOM__ROOM__RULES__TREASURE_THRESHOLDS",
            "5,3",
            "room.rules.treasure_thresholds",
        ),
        env(
            "wallet endpoint scheme",
            "ROOM__WALLET__ENDPOINT",
            "wallet:1",
            "wallet.endpoint",
        ),
        file(
            "IM enabled without a key",
            "tencent_im:\n  enabled: true\n  sdk_app_id: 1\n",
            "tencent_im.secret_key",
        ),
        env("node id charset", "ROOM__NODE_ID", "bad node", "node_id"),
        env("app code charset", "ROOM__APP_CODE", "a b", "app_code"),
        env("bad duration", "ROOM__ROOM__IDLE_TTL", "soon", "soon"),
        env(
            "negative count",
            "ROOM__ROOM__SNAPSHOT_EVERY_N",
            "-1",
            "snapshot_every_n",
        ),
        env(
            "gift limits overflow",
            "ROOM__ROOM__RULES__MAX_GIFT_UNIT_VALUE",
            "18446744073709551615",
            "max_gift_unit_value",
        ),
        ConfigCase {
            name: "MySQL password given as value and as file",
            yaml: BASE.to_string(),
            env: vec![
                ("ROOM__MYSQL__PASSWORD".into(), "a".into()),
                (
                    "ROOM__MYSQL__PASSWORD_FILE".into(),
                    "/nonexistent/mysql".into(),
                ),
            ],
            names: "mysql.password is set by both ROOM__MYSQL__PASSWORD and ROOM__MYSQL__PASSWORD_FILE",
        },
        env(
            "secret file missing",
            "ROOM__REDIS__URL_FILE",
            "/nonexistent/redis-url",
            "redis.url",
        ),
        env(
            "zero room cap",
            "ROOM__ROOM__RULES__MAX_MEMBERS",
            "0",
            "room.rules.max_members must be at least 1",
        ),
    ];
    let cases: Vec<ConfigCase> = cases
        .into_iter()
        .chain(trace_export_cases(BASE, "ROOM"))
        .collect();
    assert_start_refused(EXE, &cases);
}

#[test]
fn dump_config_redacts_secrets() {
    let yaml = "tencent_im:\n  secret_key: \"im-SECRET-1\"\nrocketmq:\n  access_key: \"user\"\n  secret_key: \"sasl-SECRET-2\"\n";
    let dump = assert_dump_redacts(
        EXE,
        yaml,
        &[
            ("ROOM__MYSQL__PASSWORD", "db-SECRET-3"),
            (
                "ROOM__MYSQL__URL",
                "mysql://root:url-SECRET-4@127.0.0.1:3306/hyapp",
            ),
            ("ROOM__REDIS__URL", "redis://:redis-SECRET-5@127.0.0.1:6379"),
        ],
        &["SECRET"],
        &[
            "/tencent_im/secret_key",
            "/rocketmq/secret_key",
            "/mysql/password",
        ],
    );
    assert_eq!(
        dump["mysql"]["url"],
        "mysql://root:***@127.0.0.1:3306/hyapp"
    );
    assert_eq!(dump["redis"]["url"], "redis://:***@127.0.0.1:6379");
}

#[test]
fn dump_and_debug_hide_every_planted_secret() {
    use testkit::secrets::{
        CONSUMER_PROPERTIES_YAML, PlantedSecrets, assert_client_properties_redacted,
    };
    let planted = PlantedSecrets::new("ROOM", room_service::config::SECRET_KEYS);
    let (dump, path) = planted.dump(EXE, &format!("{BASE}{CONSUMER_PROPERTIES_YAML}"));
    assert_client_properties_redacted(&dump);
    let config =
        room_service::config::Config::load_with_env(Some(path), Some(planted.env_map())).unwrap();
    planted.assert_hidden(&dump, &format!("{config:?}"));
}

#[test]
fn environment_strings_keep_their_text_and_numbers_still_parse() {
    let path = testkit::binary::write_config(BASE);
    let env = [
        ("ROOM__MYSQL__PASSWORD", "007123"),
        ("ROOM__APP_CODE", "0042"),
        ("ROOM__ROOM__SNAPSHOT_EVERY_N", "0100"),
        ("ROOM__ROOM__GROUP_COMMIT", "false"),
        ("ROOM__ROOM__IDLE_TTL", "90s"),
        ("ROOM__ROOM__RULES__TREASURE_THRESHOLDS", "0300"),
    ]
    .into_iter()
    .map(|(key, value)| (key.to_owned(), value.to_owned()))
    .collect();
    let config = room_service::config::Config::load_with_env(Some(path), Some(env)).unwrap();
    assert_eq!(config.mysql.password.expose(), "007123");
    assert_eq!(config.app_code, "0042");
    assert_eq!(config.room.snapshot_every_n, 100);
    assert!(!config.room.group_commit);
    assert_eq!(config.room.idle_ttl.as_millis(), 90_000);
    assert_eq!(config.room.rules.treasure_thresholds, vec![300]);
}
