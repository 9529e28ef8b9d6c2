//! Publishers: where a claimed row goes. `mq` sends the stored protobuf bytes
//! to the topic (key = room_id, headers event_id/event_type/traceparent) with
//! an idempotent, `acks=all` producer; `direct` hands the decoded envelope to
//! the direct sinks; `dual` does both. A row is delivered only when every
//! publisher of the mode succeeded.

use crate::{direct::DirectSinks, store::OutboxRow};
use outbox_schema::names::{HEADER_EVENT_ID, HEADER_EVENT_TYPE, HEADER_TRACEPARENT};
use rdkafka::{
    ClientConfig,
    message::{Header, OwnedHeaders},
    producer::{FutureProducer, FutureRecord, Producer},
};
use service_kit::mq::MqConfig;
use std::time::Duration;

/// Why one publish attempt failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishFailure {
    /// Short, secret-free description for `last_error`.
    pub message: String,
    /// False when retrying cannot help (the row goes straight to `failed`).
    pub retryable: bool,
}

impl PublishFailure {
    /// A failure worth retrying.
    pub fn transient(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            retryable: true,
        }
    }

    /// A failure no retry will fix.
    pub fn permanent(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            retryable: false,
        }
    }
}

/// Kafka-protocol publisher.
#[derive(Clone)]
pub struct MqPublisher {
    producer: FutureProducer,
    namespace: String,
}

impl std::fmt::Debug for MqPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MqPublisher")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl MqPublisher {
    /// Builds the idempotent producer from the `rocketmq` section. A message
    /// not acknowledged within `message_timeout` fails inside librdkafka —
    /// never later than the relay gives up on it, so a failed publish is
    /// never delivered behind the room's back after a retry was scheduled.
    pub fn new(mq: &MqConfig, message_timeout: Duration) -> Result<Self, crate::Error> {
        let mut config = ClientConfig::new();
        for (key, value) in mq.client_properties()? {
            config.set(key, value);
        }
        let send_timeout = mq
            .send_timeout
            .positive_or(service_kit::duration::ConfigDuration::from_secs(3))
            .as_std()
            .min(message_timeout)
            .max(Duration::from_millis(10));
        config
            .set("client.id", &mq.room_outbox.producer_group)
            // Exactly-once into the log per producer session, and in order per partition.
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("message.timeout.ms", send_timeout.as_millis().to_string())
            .set("message.send.max.retries", mq.retry.max(1).to_string())
            // A few ms of batching buys a lot of throughput for a backlog drain.
            .set("linger.ms", "2")
            .set("compression.type", "lz4");
        let producer: FutureProducer = config
            .create()
            .map_err(|error| crate::Error::Mq(error.to_string()))?;
        Ok(Self {
            producer,
            namespace: mq.namespace.clone(),
        })
    }

    /// Sends one row (with `traceparent` as its trace header) and waits for
    /// the broker's acknowledgement (bounded by
    /// the producer's `message.timeout.ms`; `timeout` bounds the enqueue).
    pub async fn publish(
        &self,
        row: &OutboxRow,
        traceparent: &str,
        timeout: Duration,
    ) -> Result<(), PublishFailure> {
        let topic = if self.namespace.is_empty() {
            row.topic.clone()
        } else {
            format!("{}.{}", self.namespace, row.topic)
        };
        let mut headers = OwnedHeaders::new_with_capacity(3)
            .insert(Header {
                key: HEADER_EVENT_ID,
                value: Some(row.event_id.as_str()),
            })
            .insert(Header {
                key: HEADER_EVENT_TYPE,
                value: Some(row.event_type.as_str()),
            });
        if !traceparent.is_empty() {
            headers = headers.insert(Header {
                key: HEADER_TRACEPARENT,
                value: Some(traceparent),
            });
        }
        let record = FutureRecord::to(&topic)
            .key(&row.room_id)
            .payload(&row.payload)
            .headers(headers);
        match self.producer.send(record, timeout).await {
            Ok(_) => Ok(()),
            Err((error, _)) => Err(PublishFailure::transient(format!("broker: {error}"))),
        }
    }

    /// Waits for queued messages on shutdown.
    pub fn flush(&self, timeout: Duration) {
        let _ = self.producer.flush(timeout);
    }
}

/// The publishers of the configured mode.
#[derive(Debug, Clone)]
pub struct Publishers {
    /// Present in `mq` and `dual`.
    pub mq: Option<MqPublisher>,
    /// Present in `direct` and `dual`.
    pub direct: Option<DirectSinks>,
}

impl Publishers {
    /// Publishes one row to every publisher of the mode. Delayed wake-ups
    /// (topic `hyapp_room_treasure_open`) only exist on the broker.
    pub async fn publish(&self, row: &OutboxRow, timeout: Duration) -> Result<(), PublishFailure> {
        let span = crate::trace::publish_span(row);
        let result = self.publish_in(row, &span.traceparent(), timeout).await;
        span.finish(
            result
                .as_ref()
                .err()
                .map(|failure| failure.message.as_str()),
        );
        result
    }

    async fn publish_in(
        &self,
        row: &OutboxRow,
        traceparent: &str,
        timeout: Duration,
    ) -> Result<(), PublishFailure> {
        let is_room_event = row.lane == outbox_schema::row::LANE_CHAIN;
        if let Some(direct) = &self.direct
            && is_room_event
        {
            direct.publish(row, timeout).await?;
        }
        if let Some(mq) = &self.mq {
            mq.publish(row, traceparent, timeout).await?;
        } else if !is_room_event {
            return Err(PublishFailure::permanent(
                "treasure wake-up needs the broker (rocketmq.enabled) but the relay has no MQ publisher",
            ));
        }
        Ok(())
    }
}
