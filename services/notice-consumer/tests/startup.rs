//! The `notice-consumer` binary as an operator starts it: invalid configs are
//! refused naming the key, and `--dump-config` redacts every secret.

use testkit::binary::{
    CONSUMER_BASE, ConfigCase, assert_consumer_dump_redacts, assert_start_refused, consumer_cases,
};

const EXE: &str = env!("CARGO_BIN_EXE_notice-consumer");

#[test]
fn invalid_configs_are_refused_naming_the_key() {
    let mut cases = consumer_cases("NOTICE");
    cases.extend([
        ConfigCase::env(
            "unknown notice key",
            CONSUMER_BASE,
            "NOTICE__NOTICE__DELIVERY__MAX_ATTEMPT",
            "3",
            "max_attempt",
        ),
        ConfigCase::env(
            "negative attempts",
            CONSUMER_BASE,
            "NOTICE__NOTICE__DELIVERY__MAX_ATTEMPTS",
            "-1",
            "max_attempts",
        ),
    ]);
    assert_start_refused(EXE, &cases);
}

#[test]
fn dump_config_redacts_secrets() {
    assert_consumer_dump_redacts(EXE, "NOTICE");
}

#[test]
fn dump_and_debug_hide_every_planted_secret() {
    use consumer_runtime::host::ServiceConfig;
    type Config = notice_consumer::config::Config;
    testkit::secrets::assert_consumer_secrets_hidden(
        EXE,
        "NOTICE",
        &<Config as ServiceConfig>::secret_keys(),
        |path, env| Config::load_with_env(Some(path), Some(env)).unwrap(),
        |config| config.consumer_settings().unwrap(),
    );
}
