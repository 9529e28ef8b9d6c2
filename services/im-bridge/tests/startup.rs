//! The `im-bridge` binary as an operator starts it: invalid configs are
//! refused naming the key, and `--dump-config` redacts every secret.

use testkit::binary::{
    CONSUMER_BASE, ConfigCase, assert_consumer_dump_redacts, assert_start_refused, consumer_cases,
};

const EXE: &str = env!("CARGO_BIN_EXE_im-bridge");

#[test]
fn invalid_configs_are_refused_naming_the_key() {
    let mut cases = consumer_cases("IM_BRIDGE");
    cases.extend([
        ConfigCase::env(
            "unknown bridge key",
            CONSUMER_BASE,
            "IM_BRIDGE__IM_BRIDGE__KICK_MUTED",
            "true",
            "kick_muted",
        ),
        ConfigCase::env(
            "bad mute duration",
            CONSUMER_BASE,
            "IM_BRIDGE__IM_BRIDGE__KICK_MUTE_DEFAULT",
            "forever",
            "forever",
        ),
    ]);
    assert_start_refused(EXE, &cases);
}

#[test]
fn dump_config_redacts_secrets() {
    assert_consumer_dump_redacts(EXE, "IM_BRIDGE");
}

#[test]
fn dump_and_debug_hide_every_planted_secret() {
    use consumer_runtime::host::ServiceConfig;
    type Config = im_bridge::config::Config;
    testkit::secrets::assert_consumer_secrets_hidden(
        EXE,
        "IM_BRIDGE",
        &<Config as ServiceConfig>::secret_keys(),
        |path, env| Config::load_with_env(Some(path), Some(env)).unwrap(),
        |config| config.consumer_settings().unwrap(),
    );
}
