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

/// `notice-consumer consumer-lag`, as docs/runbooks.md#consumergroupdown has
/// an operator run it with every consumer of the group down: the group's
/// lag per partition read from the broker, and the total.
#[tokio::test]
async fn consumer_lag_prints_the_lag_of_a_group_that_is_down() {
    use consumer_runtime::testing::{TestProducer, commit_offset, envelope};
    use outbox_schema::pb;
    let topic = testkit::unique("lag_cli_topic_");
    let group = testkit::unique("lag_cli_group_");
    testkit::create_topic(&topic, 1).await;
    let producer = TestProducer::new(&testkit::kafka_bootstrap()).unwrap();
    for seq in 1..=5u64 {
        let event = envelope(
            &uuid::Uuid::new_v4().to_string(),
            "room-lag",
            seq,
            pb::room_outbox_event::Payload::RoomUserJoined(pb::RoomUserJoined {
                user_id: format!("u{seq}"),
            }),
        );
        producer.send_event(&topic, &event).await.unwrap();
    }
    // The group stopped after the first two messages.
    commit_offset(&testkit::kafka_bootstrap(), &group, &topic, 0, 2).unwrap();
    let config = testkit::binary::write_config(&CONSUMER_BASE.replace(
        "name_servers: [\"127.0.0.1:1\"]",
        &format!(
            "name_servers: [\"{}\"]\n  room_outbox:\n    topic: \"{topic}\"",
            testkit::kafka_bootstrap()
        ),
    ));
    let run = testkit::binary::run(
        EXE,
        &[
            "--config",
            config.to_str().unwrap(),
            "consumer-lag",
            "--group",
            &group,
        ],
        &[],
    );
    assert!(run.status.success(), "{:?}\n{}", run.status, run.stderr);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines[0], format!("consumer group {group}, topic {topic}"));
    assert_eq!(
        lines[2].split_whitespace().collect::<Vec<_>>(),
        ["0", "2", "0", "5", "3"],
        "{}",
        run.stdout
    );
    assert_eq!(lines[3], "total lag 3");
}
