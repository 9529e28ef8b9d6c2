//! The consumer section's unit tests: backoff, resolution with its namespace,
//! defaults and named replacements, and the dead-letter producer's size.

use super::*;

#[test]
fn backoff_doubles_and_caps() {
    let policy = RetryPolicy {
        max_reconsume_times: 16,
        backoff: Backoff::exponential(Duration::from_millis(100), Duration::from_millis(1000)),
    };
    // The upper end of the jitter range is the un-jittered doubling.
    let backoff = |attempt| policy.backoff.ceiling(attempt);
    assert_eq!(backoff(1), Duration::from_millis(100));
    assert_eq!(backoff(2), Duration::from_millis(200));
    assert_eq!(backoff(4), Duration::from_millis(800));
    assert_eq!(backoff(5), Duration::from_millis(1000));
    assert_eq!(backoff(60), Duration::from_millis(1000));
    assert_eq!(policy.max_attempts(), 17);
    // With jitter: between half and all of it.
    for (attempt, ceiling) in [(1, 100), (2, 200), (4, 800), (5, 1000), (60, 1000)] {
        let delay = policy.backoff.delay(attempt);
        let ceiling = Duration::from_millis(ceiling);
        assert!(
            delay >= ceiling / 2 && delay <= ceiling,
            "{attempt}: {delay:?}"
        );
    }
}

#[test]
fn resolve_applies_namespace_defaults_and_fallbacks() {
    let mq = MqConfig {
        name_servers: vec!["b:9092".into()],
        // Only resolved, never connected: the transport rule is not under test.
        allow_insecure_transport: true,
        namespace: "prod".into(),
        ..MqConfig::default()
    };
    let section = ConsumerConfig {
        initial_backoff: ConfigDuration::from_millis(0),
        max_batch: 0,
        ..ConsumerConfig::default()
    };
    let settings = ConsumerSettings::resolve(&mq, &section, "hyapp_room_outbox", "g1", 16).unwrap();
    assert_eq!(settings.consumer_group, "g1");
    assert_eq!(settings.topic, "prod.hyapp_room_outbox");
    assert_eq!(settings.dead_letter_topic, "prod.g1.dlq");
    assert_eq!(settings.retry.backoff.initial(), Duration::from_millis(200));
    assert_eq!(settings.max_batch, 1);
    assert_eq!(settings.max_message_bytes, DEFAULT_MAX_MESSAGE_BYTES);
    assert_eq!(
        settings
            .adjusted
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        [
            "consumer.initial_backoff: given 0ms, using 200ms".to_string(),
            "consumer.max_batch: given 0, using 1".to_string(),
        ],
        "each replacement names its key"
    );
    let properties = settings.consumer_properties();
    assert!(properties.contains(&("enable.auto.offset.store".into(), "false".into())));
    assert!(properties.contains(&("bootstrap.servers".into(), "b:9092".into())));
}

#[test]
fn dead_letter_producer_takes_what_the_consumer_decodes() {
    let mq = MqConfig {
        name_servers: vec!["b:9092".into()],
        // Only resolved, never connected: the transport rule is not under test.
        allow_insecure_transport: true,
        ..MqConfig::default()
    };
    let resolve = |max_message_bytes| {
        let section = ConsumerConfig {
            max_message_bytes,
            ..ConsumerConfig::default()
        };
        let settings = ConsumerSettings::resolve(&mq, &section, "t", "g", 16).unwrap();
        settings
            .producer_properties()
            .into_iter()
            .find(|(key, _)| key == "message.max.bytes")
            .map(|(_, value)| value)
    };
    assert_eq!(
        resolve(0).as_deref(),
        Some("1000000"),
        "librdkafka's default"
    );
    assert_eq!(
        resolve(4_000_000).as_deref(),
        Some((4_000_000 + 64 * 1024).to_string().as_str())
    );
    assert_eq!(resolve(usize::MAX).as_deref(), Some("1000000000"));
}

#[test]
fn missing_broker_is_a_config_error() {
    let error = ConsumerSettings::resolve(
        &MqConfig::default(),
        &ConsumerConfig::default(),
        "t",
        "g",
        16,
    )
    .unwrap_err();
    assert!(
        error.to_string().contains("rocketmq.name_servers"),
        "{error}"
    );
}

#[test]
fn every_replaced_value_is_named_and_defaults_replace_nothing() {
    let mq = MqConfig {
        name_servers: vec!["b:9092".into()],
        // Only resolved, never connected: the transport rule is not under test.
        allow_insecure_transport: true,
        ..MqConfig::default()
    };
    let resolve = |section: &ConsumerConfig| {
        ConsumerSettings::resolve(&mq, section, "t", "g", 16)
            .unwrap()
            .adjusted
    };
    assert!(resolve(&ConsumerConfig::default()).is_empty());
    let section = ConsumerConfig {
        commit_interval: ConfigDuration::from_millis(-1),
        max_message_bytes: 0,
        fetch_queue_kbytes: 10,
        dedup_purge_batch: 0,
        ..ConsumerConfig::default()
    };
    let keys: Vec<String> = resolve(&section)
        .iter()
        .map(|adjusted| adjusted.key.clone())
        .collect();
    assert_eq!(
        keys,
        [
            "consumer.max_message_bytes",
            "consumer.commit_interval",
            "consumer.fetch_queue_kbytes",
            "consumer.dedup_purge_batch",
        ]
    );
}
