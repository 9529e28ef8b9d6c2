//! The `activity-consumer` binary as an operator starts it: invalid configs
//! (a direct entry open to other hosts without authentication, half a TLS
//! section among them) are refused naming the key, and `--dump-config`
//! redacts every secret.

use testkit::binary::{
    CONSUMER_BASE, ConfigCase, assert_consumer_dump_redacts, assert_start_refused, consumer_cases,
};

const EXE: &str = env!("CARGO_BIN_EXE_activity-consumer");

#[test]
fn invalid_configs_are_refused_naming_the_key() {
    let mut cases = consumer_cases("ACTIVITY");
    cases.extend([
        ConfigCase::env(
            "gRPC listen address not an address",
            CONSUMER_BASE,
            "ACTIVITY__GRPC_LISTEN",
            "nowhere",
            "grpc_listen",
        ),
        ConfigCase::env(
            "direct entry open to other hosts without a token or mutual TLS",
            CONSUMER_BASE,
            "ACTIVITY__GRPC_LISTEN",
            "0.0.0.0:7301",
            "grpc_auth_token",
        ),
        ConfigCase {
            name: "a bearer token shorter than 32 characters",
            yaml: CONSUMER_BASE.to_string(),
            env: vec![
                ("ACTIVITY__GRPC_LISTEN".into(), "0.0.0.0:7301".into()),
                ("ACTIVITY__GRPC_AUTH_TOKEN".into(), "short-token".into()),
            ],
            names: "grpc_auth_token is 11 characters; at least 32",
        },
        ConfigCase::env(
            "TLS certificate without its key",
            CONSUMER_BASE,
            "ACTIVITY__GRPC_TLS__CERT_FILE",
            "/nonexistent/cert.pem",
            "grpc_tls.key_file",
        ),
        ConfigCase::file(
            "TLS certificate file missing",
            &format!(
                "{CONSUMER_BASE}grpc_tls:\n  cert_file: \"/nonexistent/cert.pem\"\n  key_file: \"/nonexistent/key.pem\"\n"
            ),
            "grpc_tls.cert_file",
        ),
        ConfigCase::env(
            "broadcasts without a group",
            CONSUMER_BASE,
            "ACTIVITY__ACTIVITY__BROADCAST_GROUP_ID",
            "",
            "activity.broadcast_group_id",
        ),
        ConfigCase::file(
            "duplicate activity ids",
            &format!("{CONSUMER_BASE}activity:\n  activities:\n    - id: \"a\"\n    - id: \"a\"\n"),
            "activity.activities",
        ),
        ConfigCase::file(
            "unknown rank_by",
            &format!(
                "{CONSUMER_BASE}activity:\n  activities:\n    - id: \"a\"\n      rank_by: \"fans\"\n"
            ),
            "fans",
        ),
        ConfigCase::env(
            "negative threshold",
            CONSUMER_BASE,
            "ACTIVITY__ACTIVITY__BIG_GIFT_THRESHOLD",
            "-5",
            "big_gift_threshold",
        ),
    ]);
    assert_start_refused(EXE, &cases);
}

#[test]
fn dump_config_redacts_secrets() {
    assert_consumer_dump_redacts(EXE, "ACTIVITY");
}

#[test]
fn dump_and_debug_hide_every_planted_secret() {
    use consumer_runtime::host::ServiceConfig;
    type Config = activity_consumer::config::Config;
    testkit::secrets::assert_consumer_secrets_hidden(
        EXE,
        "ACTIVITY",
        &<Config as ServiceConfig>::secret_keys(),
        |path, env| Config::load_with_env(Some(path), Some(env)).unwrap(),
        |config| config.consumer_settings().unwrap(),
    );
}
