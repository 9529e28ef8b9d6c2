//! Helpers for the tests of consumers (this crate's and the services'):
//! producing envelopes the way the outbox relay does (key = room_id, headers
//! event_id / event_type / traceparent), reading a topic back (dead letters),
//! settings with fast retries, and waiting for a condition.

use crate::{ConsumerConfig, ConsumerSettings, Error};
use outbox_schema::{
    names::{HEADER_EVENT_ID, HEADER_EVENT_TYPE, HEADER_TRACEPARENT},
    pb,
};
use rdkafka::{
    ClientConfig, Message,
    consumer::{Consumer as _, StreamConsumer},
    message::{Header, OwnedHeaders, OwnedMessage},
    producer::{FutureProducer, FutureRecord},
};
use service_kit::{duration::ConfigDuration, mq::MqConfig};
use std::time::{Duration, Instant};

/// A record as a consumer received it from `topic` at `(partition,
/// offset)`: keyed by `room`, with the event id and type headers the relay
/// writes. What a test hands to a `DeadLetterProducer` to put a dead letter
/// on a group's topic.
pub fn consumed_record(
    topic: &str,
    (partition, offset): (i32, i64),
    room: &str,
    event_id: &str,
    event_type: &str,
    payload: Vec<u8>,
) -> OwnedMessage {
    let headers = OwnedHeaders::new()
        .insert(Header {
            key: HEADER_EVENT_ID,
            value: Some(event_id),
        })
        .insert(Header {
            key: HEADER_EVENT_TYPE,
            value: Some(event_type),
        });
    OwnedMessage::new(
        Some(payload),
        Some(room.as_bytes().to_vec()),
        topic.to_owned(),
        rdkafka::Timestamp::NotAvailable,
        partition,
        offset,
        Some(headers),
    )
}

/// A producer standing in for the outbox relay.
#[derive(Clone)]
pub struct TestProducer {
    producer: FutureProducer,
}

impl std::fmt::Debug for TestProducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestProducer").finish_non_exhaustive()
    }
}

impl TestProducer {
    /// A producer on `bootstrap`.
    pub fn new(bootstrap: &str) -> Result<Self, Error> {
        Self::with_linger(bootstrap, Duration::from_millis(2))
    }

    /// A producer that waits up to `linger` to fill record batches: with
    /// [`TestProducer::send_events`], a burst lands in a few large batches.
    pub fn with_linger(bootstrap: &str, linger: Duration) -> Result<Self, Error> {
        let producer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("acks", "all")
            .set("linger.ms", linger.as_millis().to_string())
            .create()?;
        Ok(Self { producer })
    }

    /// A producer whose `message.max.bytes` is `max_bytes` instead of
    /// librdkafka's 1,000,000: it can publish records over 1 MB.
    pub fn with_max_message_bytes(bootstrap: &str, max_bytes: usize) -> Result<Self, Error> {
        let producer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("acks", "all")
            .set("linger.ms", "2")
            .set("message.max.bytes", max_bytes.to_string())
            .create()?;
        Ok(Self { producer })
    }

    /// Publishes an envelope like the relay: key = room_id, relay headers.
    /// Returns the partition and offset it landed on.
    pub async fn send_event(
        &self,
        topic: &str,
        event: &pb::RoomOutboxEvent,
    ) -> Result<(i32, i64), Error> {
        use prost::Message as _;
        let headers = OwnedHeaders::new()
            .insert(Header {
                key: HEADER_EVENT_ID,
                value: Some(event.event_id.as_str()),
            })
            .insert(Header {
                key: HEADER_EVENT_TYPE,
                value: Some(event.event_type.as_str()),
            })
            .insert(Header {
                key: HEADER_TRACEPARENT,
                value: Some(event.traceparent.as_str()),
            });
        self.send_raw(topic, &event.room_id, &event.encode_to_vec(), Some(headers))
            .await
    }

    /// Publishes many envelopes without waiting for each acknowledgement
    /// (throughput tests); returns once the broker accepted all of them.
    pub async fn send_events(
        &self,
        topic: &str,
        events: &[pb::RoomOutboxEvent],
    ) -> Result<(), Error> {
        use prost::Message as _;
        let mut pending = Vec::with_capacity(events.len());
        for event in events {
            let payload = event.encode_to_vec();
            let record = FutureRecord::to(topic)
                .key(&event.room_id)
                .payload(&payload);
            let delivery = self
                .producer
                .send_result(record)
                .map_err(|(error, _)| Error::Kafka(error))?;
            pending.push(delivery);
        }
        for delivery in pending {
            match delivery.await {
                Ok(Ok(_)) => {}
                Ok(Err((error, _))) => return Err(Error::Kafka(error)),
                Err(_) => return Err(Error::Config("producer dropped a delivery".into())),
            }
        }
        Ok(())
    }

    /// Publishes arbitrary bytes (malformed messages, wake-ups).
    pub async fn send_raw(
        &self,
        topic: &str,
        key: &str,
        payload: &[u8],
        headers: Option<OwnedHeaders>,
    ) -> Result<(i32, i64), Error> {
        let mut record = FutureRecord::to(topic).key(key).payload(payload);
        if let Some(headers) = headers {
            record = record.headers(headers);
        }
        self.producer
            .send(record, Duration::from_secs(10))
            .await
            .map(|delivery| (delivery.partition, delivery.offset))
            .map_err(|(error, _)| Error::Kafka(error))
    }
}

/// Reads `count` messages of `topic` from the beginning (a throwaway group),
/// or fewer when `timeout` passes first.
pub async fn read_topic(
    bootstrap: &str,
    topic: &str,
    count: usize,
    timeout: Duration,
) -> Result<Vec<OwnedMessage>, Error> {
    let group = format!(
        "reader-{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_nanos())
    );
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", &group)
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()?;
    consumer.subscribe(&[topic])?;
    let deadline = Instant::now() + timeout;
    let mut messages = Vec::new();
    while messages.len() < count {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, consumer.recv()).await {
            Err(_) => break,
            Ok(Ok(message)) => messages.push(message.detach()),
            // Typically "unknown topic" until the first dead letter creates it.
            Ok(Err(_)) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    Ok(messages)
}

/// Commits `offset` of `topic`/`partition` for `group`, as a consumer of
/// that group that stopped there would have.
pub fn commit_offset(
    bootstrap: &str,
    group: &str,
    topic: &str,
    partition: i32,
    offset: i64,
) -> Result<(), Error> {
    use rdkafka::{Offset, TopicPartitionList, consumer::CommitMode};
    let consumer: rdkafka::consumer::BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()?;
    let mut offsets = TopicPartitionList::new();
    offsets.add_partition_offset(topic, partition, Offset::Offset(offset))?;
    consumer.commit(&offsets, CommitMode::Sync)?;
    Ok(())
}

/// Resolved settings for a test consumer: fast retries and commits.
pub fn test_settings(
    bootstrap: &str,
    topic: &str,
    group: &str,
    max_reconsume_times: u32,
) -> Result<ConsumerSettings, Error> {
    let mq = MqConfig {
        enabled: true,
        name_servers: vec![bootstrap.to_string()],
        ..MqConfig::default()
    };
    let section = ConsumerConfig {
        initial_backoff: ConfigDuration::from_millis(50),
        max_backoff: ConfigDuration::from_millis(400),
        commit_interval: ConfigDuration::from_millis(200),
        session_timeout: ConfigDuration::from_secs(6),
        shutdown_grace: ConfigDuration::from_secs(5),
        ..ConsumerConfig::default()
    };
    ConsumerSettings::resolve(&mq, &section, topic, group, max_reconsume_times)
}

/// Polls `condition` every 50 ms until it holds; false when `timeout` passes.
pub async fn wait_until<F, Fut>(timeout: Duration, mut condition: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if condition().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A header's value as text.
pub fn header(message: &OwnedMessage, key: &str) -> Option<String> {
    crate::dead_letter::header_text(message, key)
}

/// The envelope of a test event.
pub fn envelope(
    event_id: &str,
    room_id: &str,
    room_event_seq: u64,
    payload: pb::room_outbox_event::Payload,
) -> pb::RoomOutboxEvent {
    pb::RoomOutboxEvent {
        event_id: event_id.to_string(),
        event_type: outbox_schema::envelope::payload_event_type(&payload).to_string(),
        app_code: "hyapp".into(),
        room_id: room_id.to_string(),
        room_event_seq,
        room_version: room_event_seq,
        command_id: format!("cmd-{event_id}"),
        occurred_at_ms: service_kit::time::now_ms(),
        payload: Some(payload),
        ..Default::default()
    }
}

/// The key bytes of a message as text.
pub fn key_text(message: &OwnedMessage) -> String {
    String::from_utf8_lossy(message.key().unwrap_or_default()).into_owned()
}
