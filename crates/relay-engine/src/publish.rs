//! Publishers: where a claimed row goes. `mq` sends the stored protobuf bytes
//! to the topic (key = room_id, headers event_id/event_type/traceparent) with
//! an idempotent, `acks=all` producer; `direct` hands the decoded envelope to
//! the direct sinks; `dual` does both. A row is delivered only when every
//! publisher of the mode succeeded.
//!
//! In `mq` mode a batch is pipelined: every row is enqueued on the producer
//! first ([`Pipeline::start`]) and the acknowledgements are awaited after
//! ([`InFlight::finish`]). Order within a room holds because a room's rows
//! share a key, hence a partition, and the idempotent producer keeps a
//! partition's messages in enqueue order across retries (at most 5 requests
//! in flight, sequence-numbered, out-of-order batches refused by the broker).

pub use crate::failure::PublishFailure;
use crate::{direct::DirectSinks, store::OutboxRow};
use outbox_schema::names::{HEADER_EVENT_ID, HEADER_EVENT_TYPE, HEADER_TRACEPARENT};
use rdkafka::{
    ClientConfig,
    error::{KafkaError, RDKafkaErrorCode},
    message::{Header, OwnedHeaders},
    producer::{DeliveryFuture, FutureProducer, FutureRecord, Producer},
};
use service_kit::{mq::MqConfig, trace::TracedSpan};
use std::sync::{
    Arc, RwLock,
    atomic::{AtomicBool, Ordering},
};
use std::time::{Duration, Instant};

/// How long an enqueue waits between attempts while the producer queue is full.
const QUEUE_FULL_BACKOFF: Duration = Duration::from_millis(1);

/// Kafka-protocol publisher. Clones share one producer.
#[derive(Clone)]
pub struct MqPublisher {
    /// Replaced when librdkafka reports a fatal error (see [`Self::producer`]).
    producer: Arc<RwLock<Arc<FutureProducer>>>,
    /// Set when the broker refused a send in a way only a new producer id fixes.
    needs_new_producer: Arc<AtomicBool>,
    config: ClientConfig,
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
            // Pipelined batches rely on the idempotent producer's ordering,
            // which holds for at most 5 in-flight requests per connection.
            .set("max.in.flight.requests.per.connection", "5")
            // A failure that could leave a gap in a partition (a later message
            // acked after an earlier one failed) becomes a fatal error instead;
            // the producer is then replaced and the room's rows retried in order.
            .set("enable.gapless.guarantee", "true")
            .set("message.timeout.ms", send_timeout.as_millis().to_string())
            .set("message.send.max.retries", mq.retry.max(1).to_string())
            // A few ms of batching buys a lot of throughput for a backlog drain.
            .set("linger.ms", "2")
            .set("compression.type", "lz4");
        let producer: FutureProducer = config
            .create()
            .map_err(|error| crate::Error::Mq(error.to_string()))?;
        Ok(Self {
            producer: Arc::new(RwLock::new(Arc::new(producer))),
            needs_new_producer: Arc::new(AtomicBool::new(false)),
            config,
            namespace: mq.namespace.clone(),
        })
    }

    /// The current producer. An idempotent producer that hit a fatal error,
    /// or that the broker fences (seen after its epoch was bumped while the
    /// broker was unreachable: every later send then fails with
    /// `ProducerFenced`), is replaced by a fresh one with a new producer id;
    /// the rows it failed are retried like any failed publish, in room order.
    fn producer(&self) -> Arc<FutureProducer> {
        let current = self
            .producer
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let fenced = self.needs_new_producer.swap(false, Ordering::AcqRel);
        let (code, reason) = match current.client().fatal_error() {
            Some(fatal) => fatal,
            None if fenced => (
                RDKafkaErrorCode::ProducerFenced,
                "fenced by the broker".to_string(),
            ),
            None => return current,
        };
        let mut slot = self
            .producer
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Another task may have replaced it already.
        if Arc::ptr_eq(&slot, &current) {
            match self.config.create::<FutureProducer>() {
                Ok(fresh) => {
                    tracing::warn!(?code, %reason, "kafka producer hit a fatal error; replaced it");
                    *slot = Arc::new(fresh);
                }
                Err(error) => {
                    tracing::warn!(?code, %reason, %error, "kafka producer hit a fatal error and could not be recreated");
                }
            }
        }
        slot.clone()
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
        self.enqueue(row, traceparent, timeout).await?.wait().await
    }

    /// Enqueues one row on the producer and returns the future of its broker
    /// acknowledgement. Rows enqueued one after another for the same room
    /// reach the topic in that order. Waits (up to `timeout`) only while the
    /// producer's queue is full.
    pub async fn enqueue(
        &self,
        row: &OutboxRow,
        traceparent: &str,
        timeout: Duration,
    ) -> Result<Acknowledgement, PublishFailure> {
        self.enqueue_on(&self.producer(), row, traceparent, timeout)
            .await
    }

    /// [`MqPublisher::enqueue`] on a given producer: a pipelined batch takes
    /// one producer for all its rows, so a room's rows never straddle a
    /// producer replacement (two producers keep no order between them).
    async fn enqueue_on(
        &self,
        producer: &FutureProducer,
        row: &OutboxRow,
        traceparent: &str,
        timeout: Duration,
    ) -> Result<Acknowledgement, PublishFailure> {
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
        let mut record = FutureRecord::to(&topic)
            .key(&row.room_id)
            .payload(&row.payload)
            .headers(headers);
        let deadline = Instant::now() + timeout;
        loop {
            match producer.send_result(record) {
                Ok(delivery) => {
                    return Ok(Acknowledgement {
                        delivery,
                        needs_new_producer: self.needs_new_producer.clone(),
                    });
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back))
                    if Instant::now() < deadline =>
                {
                    record = back;
                    tokio::time::sleep(QUEUE_FULL_BACKOFF).await;
                }
                Err((error, _)) => {
                    return Err(PublishFailure::transient(format!("broker: {error}")));
                }
            }
        }
    }

    /// Connects the producer and fetches the metadata of `topics` (full
    /// names), so the first event after start-up is not the one that pays for
    /// the connection and the metadata round trips. Blocking inside
    /// librdkafka, so it runs on the blocking pool.
    pub async fn warm_up(&self, topics: &[String], timeout: Duration) -> Result<(), crate::Error> {
        let producer = self.producer();
        let topics = topics.to_vec();
        tokio::task::spawn_blocking(move || {
            for topic in &topics {
                let metadata = producer
                    .client()
                    .fetch_metadata(Some(topic), timeout)
                    .map_err(|error| crate::Error::Mq(format!("metadata of {topic}: {error}")))?;
                // The broker answered, so the producer is connected; a topic
                // it does not know (yet) is worth a line, not a stop: the
                // deployment creates topics, and the first publish says more.
                if let Some(error) = metadata
                    .topics()
                    .iter()
                    .find(|entry| entry.name() == topic)
                    .and_then(|entry| entry.error())
                {
                    tracing::warn!(%topic, error = ?RDKafkaErrorCode::from(error), "topic metadata carries an error");
                }
            }
            Ok(())
        })
        .await
        .map_err(|error| crate::Error::Mq(error.to_string()))?
    }

    /// Waits for queued messages on shutdown.
    pub fn flush(&self, timeout: Duration) {
        let _ = self.producer().flush(timeout);
    }
}

/// The broker's verdict on an enqueued row, still to come.
pub struct Acknowledgement {
    delivery: DeliveryFuture,
    needs_new_producer: Arc<AtomicBool>,
}

impl std::fmt::Debug for Acknowledgement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Acknowledgement").finish_non_exhaustive()
    }
}

impl Acknowledgement {
    /// Waits for the verdict; a fencing error asks for a new producer.
    pub async fn wait(self) -> Result<(), PublishFailure> {
        match self.delivery.await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err((error, _))) => {
                if matches!(
                    error,
                    KafkaError::MessageProduction(
                        RDKafkaErrorCode::ProducerFenced
                            | RDKafkaErrorCode::InvalidProducerEpoch
                            | RDKafkaErrorCode::UnknownProducerId
                            | RDKafkaErrorCode::OutOfOrderSequenceNumber
                    )
                ) {
                    self.needs_new_producer.store(true, Ordering::Release);
                }
                Err(PublishFailure::transient(format!("broker: {error}")))
            }
            Err(_) => Err(PublishFailure::transient(
                "broker: producer dropped the message",
            )),
        }
    }
}

/// A row handed to the producer whose acknowledgement is still to come.
pub struct InFlight {
    span: TracedSpan,
    delivery: Result<Acknowledgement, PublishFailure>,
}

impl std::fmt::Debug for InFlight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InFlight")
            .field("enqueued", &self.enqueued())
            .finish_non_exhaustive()
    }
}

impl InFlight {
    /// False when the row never reached the producer's queue (nothing after
    /// it in the room's chain may be enqueued then).
    pub fn enqueued(&self) -> bool {
        self.delivery.is_ok()
    }

    /// Waits for the acknowledgement and closes the publish span.
    pub async fn finish(self) -> Result<(), PublishFailure> {
        let result = match self.delivery {
            Ok(delivery) => delivery.wait().await,
            Err(failure) => Err(failure),
        };
        self.span.finish(
            result
                .as_ref()
                .err()
                .map(|failure| failure.message.as_str()),
        );
        result
    }
}

/// One batch's view of the broker: a fixed producer rows are enqueued on
/// without waiting for their acknowledgements.
pub struct Pipeline<'a> {
    mq: &'a MqPublisher,
    producer: Arc<FutureProducer>,
}

impl std::fmt::Debug for Pipeline<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline").finish_non_exhaustive()
    }
}

impl Pipeline<'_> {
    /// Enqueues `row`; rows started one after another reach the topic in
    /// that order within their partition.
    pub async fn start(&self, row: &OutboxRow, timeout: Duration) -> InFlight {
        let span = crate::trace::publish_span(row);
        let delivery = self
            .mq
            .enqueue_on(&self.producer, row, &span.traceparent(), timeout)
            .await;
        InFlight { span, delivery }
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

    /// True when publishes can be pipelined: `mq` mode alone. Direct sinks
    /// are request/response calls, so `direct` and `dual` publish a room's
    /// rows one after another.
    pub fn pipelines(&self) -> bool {
        self.mq.is_some() && self.direct.is_none()
    }

    /// A pipeline for one batch: every row started on it goes to the same
    /// producer. `None` unless [`Publishers::pipelines`].
    pub fn pipeline(&self) -> Option<Pipeline<'_>> {
        let mq = self.mq.as_ref().filter(|_| self.pipelines())?;
        Some(Pipeline {
            mq,
            producer: mq.producer(),
        })
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
