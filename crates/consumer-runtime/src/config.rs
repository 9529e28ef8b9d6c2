//! The `consumer` section every consumer service carries, and the resolved
//! [`ConsumerSettings`] one consumer runs with. Broker address, credentials and
//! namespace come from the `rocketmq` section ([`MqConfig`]); the retry
//! budget from its `consumer_max_reconsume_times`.

use crate::Error;
use serde::{Deserialize, Serialize};
use service_kit::{
    adjusted::{Adjusted, Adjustments},
    backoff::Backoff,
    duration::ConfigDuration,
    mq::MqConfig,
};
use std::{collections::BTreeMap, time::Duration};

/// The `consumer` section of a consumer service's config. `Debug` is its
/// redacted dump: a `client_properties` value named like a secret
/// (`sasl.password`) never prints.
#[derive(Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConsumerConfig {
    /// Consumer group; empty means the service's default group.
    pub group: String,
    /// First retry delay of a failing message.
    pub initial_backoff: ConfigDuration,
    /// Retry delay cap.
    pub max_backoff: ConfigDuration,
    /// Most messages of one partition handed to the handler at once.
    pub max_batch: usize,
    /// Queued messages per partition, on average, at which the consumer
    /// stops polling (a partition over it for ten seconds meanwhile is paused).
    pub partition_queue_limit: usize,
    /// How often stored offsets are committed.
    pub commit_interval: ConfigDuration,
    /// Group session timeout: how fast a dead member's partitions move.
    pub session_timeout: ConfigDuration,
    /// librdkafka's pre-fetch buffer per consumer, in KiB (bounds memory).
    pub fetch_queue_kbytes: u32,
    /// Longest a fetch waits at the broker for new data (`fetch.wait.max.ms`).
    /// Kafka answers a waiting fetch as soon as data arrives, but not every
    /// Kafka-protocol broker does (Tansu does not), so this bounds the
    /// publish→consume lag; raise it on Kafka to save idle fetches.
    pub fetch_wait_max: ConfigDuration,
    /// How long in-flight work may finish after shutdown starts.
    pub shutdown_grace: ConfigDuration,
    /// Dedup rows older than this are purged.
    pub dedup_retention: ConfigDuration,
    /// How often the dedup purge runs.
    pub dedup_purge_interval: ConfigDuration,
    /// Rows deleted per purge statement, so a purge never holds long locks.
    pub dedup_purge_batch: u32,
    /// Largest payload handed to the decoder, in bytes; a bigger message goes
    /// to the dead-letter topic at once (reason `oversized: …`) and the
    /// partition moves on. 0 = the default (256 KiB, the envelope limit: a
    /// room event is a few hundred bytes).
    pub max_message_bytes: usize,
    /// Extra librdkafka properties, applied last.
    #[serde(serialize_with = "service_kit::secret::serialize_redacted_properties")]
    pub client_properties: BTreeMap<String, String>,
}

impl std::fmt::Debug for ConsumerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        service_kit::config::debug_as_dump(self, f)
    }
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        Self {
            group: String::new(),
            initial_backoff: ConfigDuration::from_millis(200),
            max_backoff: ConfigDuration::from_secs(30),
            max_batch: 64,
            partition_queue_limit: 1000,
            commit_interval: ConfigDuration::from_secs(1),
            session_timeout: ConfigDuration::from_secs(10),
            fetch_queue_kbytes: 8 * 1024,
            fetch_wait_max: ConfigDuration::from_millis(20),
            shutdown_grace: ConfigDuration::from_secs(10),
            dedup_retention: ConfigDuration::from_secs(7 * 86_400),
            dedup_purge_interval: ConfigDuration::from_secs(600),
            dedup_purge_batch: 1000,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            client_properties: BTreeMap::new(),
        }
    }
}

/// Default of `consumer.max_message_bytes`: the envelope decoder's own limit.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = outbox_schema::envelope::MAX_ENVELOPE_BYTES;

/// librdkafka's default `message.max.bytes`.
const LIBRDKAFKA_MESSAGE_MAX_BYTES: usize = 1_000_000;

/// Room for the key and headers of a dead letter beside a payload of
/// `max_message_bytes` (the reason alone may be 1 KiB).
const DEAD_LETTER_HEADER_ROOM: usize = 64 * 1024;

/// The in-place retries of one message: the budget and the wait between
/// attempts (exponential from `consumer.initial_backoff` up to
/// `consumer.max_backoff`, with jitter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt before the message is dead-lettered.
    pub max_reconsume_times: u32,
    /// Wait before attempt `n + 1` after attempt `n` (1-based) failed:
    /// `backoff.delay(n)`.
    pub backoff: Backoff,
}

impl RetryPolicy {
    /// Total attempts a message gets.
    pub fn max_attempts(&self) -> u32 {
        self.max_reconsume_times.saturating_add(1)
    }
}

/// Everything one consumer needs, resolved from config. `Debug` redacts the
/// client properties, which hold the SASL password.
#[derive(Clone)]
pub struct ConsumerSettings {
    /// Consumer group id.
    pub consumer_group: String,
    /// Topic consumed, namespace applied.
    pub topic: String,
    /// The group's dead-letter topic, namespace applied.
    pub dead_letter_topic: String,
    /// librdkafka properties shared by the consumer and the dead-letter producer.
    pub client_properties: Vec<(String, String)>,
    /// Retry budget and backoff.
    pub retry: RetryPolicy,
    /// Most messages per handler batch.
    pub max_batch: usize,
    /// Queue depth at which polling stops (and, held long, the partition pauses).
    pub partition_queue_limit: usize,
    /// Offset commit interval.
    pub commit_interval: Duration,
    /// Group session timeout.
    pub session_timeout: Duration,
    /// librdkafka pre-fetch buffer, KiB.
    pub fetch_queue_kbytes: u32,
    /// `fetch.wait.max.ms`.
    pub fetch_wait_max: Duration,
    /// Largest payload decoded; bigger ones are dead-lettered.
    pub max_message_bytes: usize,
    /// Dead-letter publish timeout.
    pub send_timeout: Duration,
    /// Grace period for in-flight work at shutdown.
    pub shutdown_grace: Duration,
    /// Purge of old dedup rows.
    pub dedup_purge: DedupPurge,
    /// Values replaced by a default or a floor, each naming its key, the
    /// value given and the value used; [`crate::Consumer::new`] logs each
    /// as a warning (docs/style.md, "Configuration").
    pub adjusted: Vec<Adjusted>,
}

impl std::fmt::Debug for ConsumerSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsumerSettings")
            .field("consumer_group", &self.consumer_group)
            .field("topic", &self.topic)
            .field("dead_letter_topic", &self.dead_letter_topic)
            .field(
                "client_properties",
                &service_kit::secret::RedactedProperties(&self.client_properties),
            )
            .field("retry", &self.retry)
            .field("max_batch", &self.max_batch)
            .field("partition_queue_limit", &self.partition_queue_limit)
            .field("commit_interval", &self.commit_interval)
            .field("session_timeout", &self.session_timeout)
            .field("fetch_queue_kbytes", &self.fetch_queue_kbytes)
            .field("fetch_wait_max", &self.fetch_wait_max)
            .field("max_message_bytes", &self.max_message_bytes)
            .field("send_timeout", &self.send_timeout)
            .field("shutdown_grace", &self.shutdown_grace)
            .field("dedup_purge", &self.dedup_purge)
            .field("adjusted", &self.adjusted)
            .finish()
    }
}

/// When and how much of `consumer_dedup` is purged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DedupPurge {
    /// Rows older than this go.
    pub retention: Duration,
    /// Time between purges.
    pub interval: Duration,
    /// Rows per delete statement.
    pub batch: u32,
}

impl ConsumerSettings {
    /// Settings of a consumer of the `rocketmq.room_outbox` topic, joining
    /// `default_group` unless `consumer.group` overrides it — what every
    /// room-event consumer (activity, notice, IM bridge) uses.
    pub fn room_outbox(
        mq: &MqConfig,
        section: &ConsumerConfig,
        default_group: &str,
    ) -> Result<Self, Error> {
        Self::resolve(
            mq,
            section,
            &mq.room_outbox.topic,
            default_group,
            mq.room_outbox.consumer_max_reconsume_times,
        )
    }

    /// Resolves one consumer of `topic` (un-namespaced) in `default_group`
    /// (used when `section.group` is empty), with `max_reconsume_times` from
    /// the original `rocketmq.*.consumer_max_reconsume_times`
    /// (docs/design.md#consumer-semantics).
    pub fn resolve(
        mq: &MqConfig,
        section: &ConsumerConfig,
        topic: &str,
        default_group: &str,
        max_reconsume_times: u32,
    ) -> Result<Self, Error> {
        let consumer_group = group_of(section, default_group)?;
        let defaults = ConsumerConfig::default();
        let client_properties = client_properties(mq, section)?;
        let mut fix = Adjustments::default();
        let backoff = Backoff::exponential(
            fix.positive(
                "consumer.initial_backoff",
                section.initial_backoff,
                defaults.initial_backoff,
            )
            .as_std(),
            fix.positive(
                "consumer.max_backoff",
                section.max_backoff,
                defaults.max_backoff,
            )
            .as_std(),
        );
        let max_message_bytes = if section.max_message_bytes == 0 {
            fix.note("consumer.max_message_bytes", 0, DEFAULT_MAX_MESSAGE_BYTES);
            DEFAULT_MAX_MESSAGE_BYTES
        } else {
            section.max_message_bytes
        };
        Ok(Self {
            dead_letter_topic: mq.topic(&outbox_schema::names::dead_letter_topic(&consumer_group)),
            topic: mq.topic(topic),
            consumer_group,
            client_properties,
            retry: RetryPolicy {
                max_reconsume_times,
                backoff,
            },
            max_batch: fix.at_least("consumer.max_batch", section.max_batch, 1),
            partition_queue_limit: fix.at_least(
                "consumer.partition_queue_limit",
                section.partition_queue_limit,
                1,
            ),
            commit_interval: fix
                .positive(
                    "consumer.commit_interval",
                    section.commit_interval,
                    defaults.commit_interval,
                )
                .as_std(),
            session_timeout: fix
                .positive(
                    "consumer.session_timeout",
                    section.session_timeout,
                    defaults.session_timeout,
                )
                .as_std(),
            fetch_queue_kbytes: fix.at_least(
                "consumer.fetch_queue_kbytes",
                section.fetch_queue_kbytes,
                1024,
            ),
            max_message_bytes,
            fetch_wait_max: fix
                .positive(
                    "consumer.fetch_wait_max",
                    section.fetch_wait_max,
                    defaults.fetch_wait_max,
                )
                .as_std(),
            send_timeout: fix
                .positive(
                    "rocketmq.send_timeout",
                    mq.send_timeout,
                    ConfigDuration::from_secs(3),
                )
                .as_std(),
            shutdown_grace: fix
                .positive(
                    "consumer.shutdown_grace",
                    section.shutdown_grace,
                    defaults.shutdown_grace,
                )
                .as_std(),
            dedup_purge: dedup_purge(section, &defaults, &mut fix),
            adjusted: fix.into_vec(),
        })
    }

    /// Properties of the group consumer: manual offset store, auto commit of
    /// stored offsets, earliest start for a new group.
    pub(crate) fn consumer_properties(&self) -> Vec<(String, String)> {
        let mut properties = vec![
            ("group.id".to_string(), self.consumer_group.clone()),
            ("client.id".to_string(), self.consumer_group.clone()),
            ("enable.auto.commit".to_string(), "true".to_string()),
            ("enable.auto.offset.store".to_string(), "false".to_string()),
            (
                "auto.commit.interval.ms".to_string(),
                self.commit_interval.as_millis().to_string(),
            ),
            ("auto.offset.reset".to_string(), "earliest".to_string()),
            (
                "session.timeout.ms".to_string(),
                self.session_timeout.as_millis().to_string(),
            ),
            (
                "queued.max.messages.kbytes".to_string(),
                self.fetch_queue_kbytes.to_string(),
            ),
            (
                "fetch.wait.max.ms".to_string(),
                self.fetch_wait_max.as_millis().to_string(),
            ),
            // Per-partition fetch positions and high watermarks: how the
            // dispatcher notices a partition stalled behind skipped records.
            (
                "statistics.interval.ms".to_string(),
                crate::offset_gap::STATISTICS_INTERVAL
                    .as_millis()
                    .to_string(),
            ),
        ];
        // User properties come last so they win.
        properties.extend(self.client_properties.iter().cloned());
        properties
    }

    /// Properties of the dead-letter producer.
    pub(crate) fn producer_properties(&self) -> Vec<(String, String)> {
        let mut properties = vec![
            (
                "client.id".to_string(),
                format!("{}-dead-letter", self.consumer_group),
            ),
            ("acks".to_string(), "all".to_string()),
            (
                "message.timeout.ms".to_string(),
                self.send_timeout.as_millis().to_string(),
            ),
            (
                "message.max.bytes".to_string(),
                self.dead_letter_max_bytes().to_string(),
            ),
        ];
        properties.extend(self.client_properties.iter().cloned());
        properties
    }

    /// The dead-letter producer's `message.max.bytes`: librdkafka's default
    /// (1,000,000, just under a default Kafka broker's per-batch limit of
    /// 1,048,588, so what passes it is not refused by a default broker), or
    /// more when `max_message_bytes` is raised above it — a message the
    /// consumer agrees to decode and then gives up on is copied whole, with
    /// room for the headers and key. A larger copy (an `oversized` message,
    /// or a broker configured lower) is refused as too large and the dead
    /// letter goes headers-only (`dead_letter`); it never stalls the
    /// partition. Capped at librdkafka's own maximum.
    pub(crate) fn dead_letter_max_bytes(&self) -> usize {
        self.max_message_bytes
            .saturating_add(DEAD_LETTER_HEADER_ROOM)
            .clamp(LIBRDKAFKA_MESSAGE_MAX_BYTES, 1_000_000_000)
    }
}

/// `consumer.group`, or the service's `default_group` when it is empty.
fn group_of(section: &ConsumerConfig, default_group: &str) -> Result<String, Error> {
    let consumer_group = if section.group.is_empty() {
        default_group.to_string()
    } else {
        section.group.clone()
    };
    if consumer_group.is_empty() {
        return Err(Error::Config("consumer.group is empty".into()));
    }
    Ok(consumer_group)
}

/// The dedup purge's settings, each replacement recorded in `fix`.
fn dedup_purge(
    section: &ConsumerConfig,
    defaults: &ConsumerConfig,
    fix: &mut Adjustments,
) -> DedupPurge {
    DedupPurge {
        retention: fix
            .positive(
                "consumer.dedup_retention",
                section.dedup_retention,
                defaults.dedup_retention,
            )
            .as_std(),
        interval: fix
            .positive(
                "consumer.dedup_purge_interval",
                section.dedup_purge_interval,
                defaults.dedup_purge_interval,
            )
            .as_std(),
        batch: fix.at_least("consumer.dedup_purge_batch", section.dedup_purge_batch, 1),
    }
}

/// The broker's client properties followed by the section's own (checked:
/// no security property may be among them).
fn client_properties(
    mq: &MqConfig,
    section: &ConsumerConfig,
) -> Result<Vec<(String, String)>, Error> {
    service_kit::mq::check_extra_properties(
        "consumer.client_properties",
        section.client_properties.keys(),
    )?;
    let mut client_properties: Vec<(String, String)> = mq
        .client_properties()?
        .into_iter()
        .map(|(key, value)| (key.to_string(), value))
        .collect();
    client_properties.extend(
        section
            .client_properties
            .iter()
            .map(|(key, value)| (key.clone(), value.clone())),
    );
    Ok(client_properties)
}

#[cfg(test)]
mod tests;
