//! The dead-letter topic of one consumer group (`<group>.dlq`): a message the
//! group gave up on is republished there unchanged (key, payload, original
//! headers) with `dlq_reason`, `dlq_group`, `dlq_attempts` and `dlq_source`
//! headers, so an operator can read why and replay it with its `event_id`.
//!
//! A copy too large to publish — the producer's `message.max.bytes` refuses
//! it locally, or the broker refuses it as too large — is final for the copy,
//! not for the dead letter: it goes out headers-only (no payload; the event id
//! and type, the dlq headers and `dlq_original_bytes`), so one oversized
//! record never stalls its partition. Every other failure is retried until
//! the broker takes the dead letter ([`DeadLetterProducer::publish`]).

use crate::{ConsumerSettings, Error};
use outbox_schema::names::{
    HEADER_DLQ_ATTEMPTS, HEADER_DLQ_GROUP, HEADER_DLQ_ORIGINAL_BYTES, HEADER_DLQ_REASON,
    HEADER_DLQ_SOURCE, HEADER_EVENT_ID, HEADER_EVENT_TYPE,
};
use rdkafka::{
    ClientConfig, Message,
    message::{Header, Headers, OwnedHeaders, OwnedMessage},
    producer::{FutureProducer, FutureRecord},
    types::RDKafkaErrorCode,
};
use service_kit::backoff::Backoff;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Longest reason kept in the header; handler errors are short, but a
/// decoder's explanation of garbage need not be. Also the longest event id,
/// event type and key a headers-only dead letter keeps.
const MAX_REASON_BYTES: usize = 1024;

/// Publishes one group's dead letters.
#[derive(Clone)]
pub struct DeadLetterProducer {
    producer: FutureProducer,
    topic: String,
    consumer_group: String,
    send_timeout: Duration,
    /// The producer's effective `message.max.bytes` (for logs).
    max_bytes: String,
    /// Wait between failed publishes.
    backoff: Backoff,
}

impl std::fmt::Debug for DeadLetterProducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeadLetterProducer")
            .field("topic", &self.topic)
            .field("consumer_group", &self.consumer_group)
            .finish_non_exhaustive()
    }
}

/// [`DeadLetterProducer::publish`] gave up waiting because shutdown began.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stopped;

impl DeadLetterProducer {
    /// A producer for `settings.dead_letter_topic`.
    pub fn new(settings: &ConsumerSettings) -> Result<Self, Error> {
        let mut config = ClientConfig::new();
        for (key, value) in settings.producer_properties() {
            config.set(key, value);
        }
        Ok(Self {
            producer: config.create()?,
            topic: settings.dead_letter_topic.clone(),
            consumer_group: settings.consumer_group.clone(),
            send_timeout: settings.send_timeout,
            max_bytes: config
                .get("message.max.bytes")
                .unwrap_or_default()
                .to_string(),
            backoff: settings.retry.backoff,
        })
    }

    /// The topic dead letters go to.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Publishes `message` as a dead letter and waits for the broker to accept it.
    pub async fn send(
        &self,
        message: &OwnedMessage,
        reason: &str,
        attempts: u32,
    ) -> Result<(), Error> {
        let headers = dead_letter_headers(message, &self.consumer_group, reason, attempts);
        let mut record: FutureRecord<'_, [u8], [u8]> =
            FutureRecord::to(&self.topic).headers(headers);
        if let Some(key) = message.key() {
            record = record.key(key);
        }
        if let Some(payload) = message.payload() {
            record = record.payload(payload);
        }
        self.deliver(record).await
    }

    /// Publishes a headers-only dead letter of `message`, whose full copy was
    /// `refused` as too large: no payload, the key only if short, the event
    /// id (from the original's header, else `event_id`) and type, the dlq
    /// headers with `refused` added to the reason, and `dlq_original_bytes`.
    pub async fn send_headers_only(
        &self,
        message: &OwnedMessage,
        reason: &str,
        attempts: u32,
        event_id: Option<&str>,
        refused: &str,
    ) -> Result<(), Error> {
        let headers = headers_only(
            message,
            &self.consumer_group,
            reason,
            attempts,
            event_id,
            refused,
        );
        let mut record: FutureRecord<'_, [u8], [u8]> =
            FutureRecord::to(&self.topic).headers(headers);
        if let Some(key) = message.key().filter(|key| key.len() <= MAX_REASON_BYTES) {
            record = record.key(key);
        }
        self.deliver(record).await
    }

    async fn deliver(&self, record: FutureRecord<'_, [u8], [u8]>) -> Result<(), Error> {
        self.producer
            .send(record, self.send_timeout)
            .await
            .map(drop)
            .map_err(|(error, _)| Error::Kafka(error))
    }

    /// Publishes `message` as a dead letter, retrying until the broker takes
    /// it: the partition waits rather than lose the message. A copy refused
    /// as too large is not retried: the dead letter goes headers-only
    /// ([`Self::send_headers_only`]). `event_id` is the decoded message's,
    /// when it was decoded. `Err(Stopped)` when `shutdown` ends the wait.
    pub(crate) async fn publish(
        &self,
        message: &OwnedMessage,
        reason: &str,
        attempts: u32,
        event_id: Option<&str>,
        shutdown: &CancellationToken,
    ) -> Result<(), Stopped> {
        // Set once the full copy was refused as too large.
        let mut refused: Option<String> = None;
        let mut failures = 0;
        loop {
            let sent = match &refused {
                None => self.send(message, reason, attempts).await,
                Some(refused) => {
                    self.send_headers_only(message, reason, attempts, event_id, refused)
                        .await
                }
            };
            let error = match sent {
                Ok(()) => return Ok(()),
                Err(error) => error,
            };
            if refused.is_none() && is_too_large(&error) {
                tracing::error!(
                    consumer_group = %self.consumer_group,
                    dead_letter_topic = %self.topic,
                    event_id = event_id.unwrap_or_default(),
                    partition = message.partition(),
                    offset = message.offset(),
                    original_bytes = payload_bytes(message),
                    key_bytes = message.key().map_or(0, <[u8]>::len),
                    message_max_bytes = %self.max_bytes,
                    reason,
                    %error,
                    "dead letter too large to copy, publishing it headers-only"
                );
                refused = Some(error.to_string());
                continue;
            }
            failures += 1;
            tracing::error!(
                consumer_group = %self.consumer_group,
                dead_letter_topic = %self.topic,
                partition = message.partition(),
                offset = message.offset(),
                headers_only = refused.is_some(),
                failures,
                %error,
                "dead-letter publish failed"
            );
            tokio::select! {
                _ = shutdown.cancelled() => return Err(Stopped),
                _ = tokio::time::sleep(self.backoff.delay(failures)) => {}
            }
        }
    }
}

/// Whether a publish failed because the message is too large: refused by
/// the producer's own `message.max.bytes` check or by the broker (both
/// report `MSG_SIZE_TOO_LARGE`). Sending the same bytes again cannot help.
fn is_too_large(error: &Error) -> bool {
    matches!(
        error,
        Error::Kafka(error)
            if error.rdkafka_error_code() == Some(RDKafkaErrorCode::MessageSizeTooLarge)
    )
}

/// The original headers (minus stale `dlq_*` ones from an earlier round)
/// plus this group's dead-letter headers.
fn dead_letter_headers(
    message: &OwnedMessage,
    consumer_group: &str,
    reason: &str,
    attempts: u32,
) -> OwnedHeaders {
    let mut headers = OwnedHeaders::new_with_capacity(8);
    if let Some(original) = message.headers() {
        for header in original.iter() {
            if header.key.starts_with("dlq_") {
                continue;
            }
            headers = headers.insert(Header {
                key: header.key,
                value: header.value,
            });
        }
    }
    with_dlq_headers(
        headers,
        message,
        consumer_group,
        &truncate(reason),
        attempts,
    )
}

/// The headers of a headers-only dead letter: the event id and type (cut to
/// [`MAX_REASON_BYTES`]), this group's dead-letter headers with `refused`
/// appended to the reason, and the original payload's size.
fn headers_only(
    message: &OwnedMessage,
    consumer_group: &str,
    reason: &str,
    attempts: u32,
    event_id: Option<&str>,
    refused: &str,
) -> OwnedHeaders {
    let mut headers = OwnedHeaders::new_with_capacity(7);
    let event_id = header_text(message, HEADER_EVENT_ID).or_else(|| event_id.map(str::to_string));
    let event_type = header_text(message, HEADER_EVENT_TYPE);
    for (key, value) in [(HEADER_EVENT_ID, event_id), (HEADER_EVENT_TYPE, event_type)] {
        if let Some(value) = value {
            headers = headers.insert(Header {
                key,
                value: Some(truncate(&value).as_str()),
            });
        }
    }
    let reason = format!(
        "{}; payload not copied: {}",
        truncate(reason),
        truncate(refused)
    );
    let original_bytes = payload_bytes(message).to_string();
    with_dlq_headers(headers, message, consumer_group, &reason, attempts).insert(Header {
        key: HEADER_DLQ_ORIGINAL_BYTES,
        value: Some(original_bytes.as_str()),
    })
}

/// `headers` plus `dlq_reason`, `dlq_group`, `dlq_attempts` and `dlq_source`.
fn with_dlq_headers(
    mut headers: OwnedHeaders,
    message: &OwnedMessage,
    consumer_group: &str,
    reason: &str,
    attempts: u32,
) -> OwnedHeaders {
    let attempts = attempts.to_string();
    let source = format!(
        "{}/{}/{}",
        message.topic(),
        message.partition(),
        message.offset()
    );
    for (key, value) in [
        (HEADER_DLQ_REASON, reason),
        (HEADER_DLQ_GROUP, consumer_group),
        (HEADER_DLQ_ATTEMPTS, attempts.as_str()),
        (HEADER_DLQ_SOURCE, source.as_str()),
    ] {
        headers = headers.insert(Header {
            key,
            value: Some(value),
        });
    }
    headers
}

/// The size of the original payload.
fn payload_bytes(message: &OwnedMessage) -> usize {
    message.payload().map_or(0, <[u8]>::len)
}

fn truncate(reason: &str) -> String {
    if reason.len() <= MAX_REASON_BYTES {
        return reason.to_string();
    }
    let mut cut = MAX_REASON_BYTES;
    while !reason.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}...", &reason[..cut])
}

/// A header's value as text, for logs and tests.
pub fn header_text(message: &OwnedMessage, key: &str) -> Option<String> {
    message.headers().and_then(|headers| {
        headers
            .iter()
            .filter(|header| header.key == key)
            .last()
            .and_then(|header| header.value)
            .map(|value| String::from_utf8_lossy(value).into_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A message carrying only `headers`, to read them back as a consumer would.
    fn carrying(headers: OwnedHeaders) -> OwnedMessage {
        OwnedMessage::new(
            None,
            None,
            "t".into(),
            Timestamp::NotAvailable,
            0,
            0,
            Some(headers),
        )
    }
    use rdkafka::Timestamp;

    #[test]
    fn headers_keep_the_original_and_replace_stale_dead_letter_ones() {
        let original = OwnedHeaders::new()
            .insert(Header {
                key: "event_id",
                value: Some("e1"),
            })
            .insert(Header {
                key: HEADER_DLQ_REASON,
                value: Some("old"),
            });
        let message = OwnedMessage::new(
            Some(b"x".to_vec()),
            Some(b"room".to_vec()),
            "t".into(),
            Timestamp::NotAvailable,
            3,
            42,
            Some(original),
        );
        let headers = dead_letter_headers(&message, "g", &"é".repeat(2000), 17);
        let rebuilt = carrying(headers);
        assert_eq!(header_text(&rebuilt, "event_id").as_deref(), Some("e1"));
        assert_eq!(
            header_text(&rebuilt, HEADER_DLQ_GROUP).as_deref(),
            Some("g")
        );
        assert_eq!(
            header_text(&rebuilt, HEADER_DLQ_ATTEMPTS).as_deref(),
            Some("17")
        );
        assert_eq!(
            header_text(&rebuilt, HEADER_DLQ_SOURCE).as_deref(),
            Some("t/3/42")
        );
        let reason = header_text(&rebuilt, HEADER_DLQ_REASON).unwrap();
        assert!(reason.ends_with("...") && reason.len() <= MAX_REASON_BYTES + 3);
    }

    #[test]
    fn headers_only_keeps_the_identity_reason_and_size_not_the_payload() {
        let original = OwnedHeaders::new()
            .insert(Header {
                key: HEADER_EVENT_TYPE,
                value: Some("RoomUserJoined"),
            })
            .insert(Header {
                key: "traceparent",
                value: Some("00-abc"),
            });
        let message = OwnedMessage::new(
            Some(vec![b'x'; 5000]),
            Some(b"room".to_vec()),
            "t".into(),
            Timestamp::NotAvailable,
            2,
            7,
            Some(original),
        );
        let headers = headers_only(&message, "g", "oversized: big", 1, Some("e9"), "too large");
        let rebuilt = carrying(headers);
        assert_eq!(
            header_text(&rebuilt, HEADER_EVENT_ID).as_deref(),
            Some("e9"),
            "the decoded id stands in for a missing header"
        );
        assert_eq!(
            header_text(&rebuilt, HEADER_EVENT_TYPE).as_deref(),
            Some("RoomUserJoined")
        );
        assert_eq!(header_text(&rebuilt, "traceparent"), None);
        assert_eq!(
            header_text(&rebuilt, HEADER_DLQ_REASON).as_deref(),
            Some("oversized: big; payload not copied: too large")
        );
        assert_eq!(
            header_text(&rebuilt, HEADER_DLQ_ORIGINAL_BYTES).as_deref(),
            Some("5000")
        );
        assert_eq!(
            header_text(&rebuilt, HEADER_DLQ_SOURCE).as_deref(),
            Some("t/2/7")
        );
    }

    #[test]
    fn only_a_size_refusal_is_too_large() {
        use rdkafka::error::KafkaError;
        let refusal = |code| Error::Kafka(KafkaError::MessageProduction(code));
        assert!(is_too_large(&refusal(
            RDKafkaErrorCode::MessageSizeTooLarge
        )));
        assert!(!is_too_large(&refusal(RDKafkaErrorCode::MessageTimedOut)));
        assert!(!is_too_large(&refusal(RDKafkaErrorCode::QueueFull)));
        assert!(!is_too_large(&Error::Config("x".into())));
    }
}
