//! The dead-letter topic of one consumer group (`<group>.dlq`): a message the
//! group gave up on is republished there unchanged (key, payload, original
//! headers) with `dlq_reason`, `dlq_group`, `dlq_attempts` and `dlq_source`
//! headers, so an operator can read why and replay it with its `event_id`.

use crate::{ConsumerSettings, Error};
use outbox_schema::names::{
    HEADER_DLQ_ATTEMPTS, HEADER_DLQ_GROUP, HEADER_DLQ_REASON, HEADER_DLQ_SOURCE,
};
use rdkafka::{
    ClientConfig, Message,
    message::{Header, Headers, OwnedHeaders, OwnedMessage},
    producer::{FutureProducer, FutureRecord},
};
use std::time::Duration;

/// Longest reason kept in the header; handler errors are short, but a
/// decoder's explanation of garbage need not be.
const MAX_REASON_BYTES: usize = 1024;

/// Publishes one group's dead letters.
#[derive(Clone)]
pub struct DeadLetterProducer {
    producer: FutureProducer,
    topic: String,
    consumer_group: String,
    send_timeout: Duration,
}

impl std::fmt::Debug for DeadLetterProducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeadLetterProducer")
            .field("topic", &self.topic)
            .field("consumer_group", &self.consumer_group)
            .finish_non_exhaustive()
    }
}

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
        self.producer
            .send(record, self.send_timeout)
            .await
            .map(drop)
            .map_err(|(error, _)| Error::Kafka(error))
    }
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
    let reason = truncate(reason);
    let attempts = attempts.to_string();
    let source = format!(
        "{}/{}/{}",
        message.topic(),
        message.partition(),
        message.offset()
    );
    for (key, value) in [
        (HEADER_DLQ_REASON, reason.as_str()),
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
        let rebuilt = OwnedMessage::new(
            None,
            None,
            "t".into(),
            Timestamp::NotAvailable,
            0,
            0,
            Some(headers),
        );
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
}
