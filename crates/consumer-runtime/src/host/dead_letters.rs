//! Reading a group's dead-letter topic (`<group>.dlq`) for the operator
//! commands, without disturbing anything: the reader assigns the topic's
//! partitions itself and reads from the low to the high watermark it saw
//! when it started, with a group id of its own that it never commits under,
//! so neither the consumer group's offsets nor a rebalance are touched.
//!
//! Each record becomes a [`DeadLetter`]: the identity and reason the
//! consumer runtime wrote in its headers (`dead_letter`), where the
//! original was, and the payload for a replay.

use super::Error;
use crate::{ConsumerSettings, Decode};
use outbox_schema::names::{
    HEADER_DLQ_ATTEMPTS, HEADER_DLQ_GROUP, HEADER_DLQ_ORIGINAL_BYTES, HEADER_DLQ_REASON,
    HEADER_DLQ_SOURCE, HEADER_EVENT_ID, HEADER_EVENT_TYPE, HEADER_TRACEPARENT,
};
use rdkafka::{
    ClientConfig, Message, Offset, TopicPartitionList,
    consumer::{Consumer as _, StreamConsumer},
    message::{Headers, OwnedMessage},
};
use serde::Serialize;
use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

/// Bound on the broker's metadata and watermark answers.
const BROKER_TIMEOUT: Duration = Duration::from_secs(10);
/// Bound on reading the whole topic up to its high watermarks.
const READ_TIMEOUT: Duration = Duration::from_secs(120);

/// One dead letter as the operator sees it.
#[derive(Debug, Clone, Serialize)]
pub struct DeadLetter {
    /// Its place in the dead-letter topic.
    pub dlq_partition: i32,
    /// Its offset there.
    pub dlq_offset: i64,
    /// When it was dead-lettered (the record's timestamp), Unix ms.
    pub dead_lettered_at_ms: i64,
    /// The event id (header, else the decoded message's), "" when unknown.
    pub event_id: String,
    /// The room (the record key), "" when none.
    pub room_id: String,
    /// The event type header, "" when none.
    pub event_type: String,
    /// Where the original was: `topic/partition/offset`.
    pub source: String,
    /// The group that gave up on it.
    pub group: String,
    /// Attempts made before giving up.
    pub attempts: u32,
    /// Why it was dead-lettered (the last error).
    pub reason: String,
    /// When the event happened (from the decoded message), Unix ms; 0 when
    /// it does not decode or says nothing.
    pub occurred_at_ms: i64,
    /// Why the payload does not decode, when it does not.
    pub decode_error: Option<String>,
    /// The original's size when the dead letter is headers-only (too large
    /// to copy): there is no payload to replay.
    pub original_bytes: Option<u64>,
    /// Every header, as text, in order.
    pub headers: Vec<(String, String)>,
    /// The original payload, for inspect (debug text of the decoded message) and replay.
    #[serde(skip)]
    pub payload: Option<Vec<u8>>,
    /// The W3C trace context the original carried.
    #[serde(skip)]
    pub traceparent: String,
}

impl DeadLetter {
    /// Reads one dead-letter record, decoding its payload as `M` for the
    /// event id and time it carries.
    fn from_record<M: Decode>(record: &OwnedMessage) -> Self {
        let headers: Vec<(String, String)> = record
            .headers()
            .map(|headers| {
                headers
                    .iter()
                    .map(|header| {
                        let value = header
                            .value
                            .map(String::from_utf8_lossy)
                            .unwrap_or_default();
                        (header.key.to_string(), value.into_owned())
                    })
                    .collect()
            })
            .unwrap_or_default();
        let header = |key: &str| {
            headers
                .iter()
                .rev()
                .find(|(name, _)| name == key)
                .map(|(_, value)| value.clone())
                .unwrap_or_default()
        };
        let payload = record.payload().filter(|payload| !payload.is_empty());
        let decoded = payload.map(M::decode);
        let (decoded_id, occurred_at_ms, decode_error) = match &decoded {
            Some(Ok(message)) => (
                message.event_id().to_string(),
                message.occurred_at_ms(),
                None,
            ),
            Some(Err(error)) => (String::new(), 0, Some(error.to_string())),
            None => (String::new(), 0, None),
        };
        let event_id = Some(header(HEADER_EVENT_ID))
            .filter(|id| !id.is_empty())
            .unwrap_or(decoded_id);
        Self {
            dlq_partition: record.partition(),
            dlq_offset: record.offset(),
            dead_lettered_at_ms: record.timestamp().to_millis().unwrap_or(0),
            event_id,
            room_id: record
                .key()
                .map(|key| String::from_utf8_lossy(key).into_owned())
                .unwrap_or_default(),
            event_type: header(HEADER_EVENT_TYPE),
            source: header(HEADER_DLQ_SOURCE),
            group: header(HEADER_DLQ_GROUP),
            attempts: header(HEADER_DLQ_ATTEMPTS).parse().unwrap_or(0),
            reason: header(HEADER_DLQ_REASON),
            occurred_at_ms,
            decode_error,
            original_bytes: header(HEADER_DLQ_ORIGINAL_BYTES).parse().ok(),
            traceparent: header(HEADER_TRACEPARENT),
            payload: payload.map(<[u8]>::to_vec),
            headers,
        }
    }

    /// The source partition and offset, from `dlq_source` (`topic/p/o`; a
    /// topic name may not hold `/`, but the split from the right does not care).
    pub fn source_position(&self) -> Option<(i32, i64)> {
        let mut parts = self.source.rsplitn(3, '/');
        let offset = parts.next()?.parse().ok()?;
        let partition = parts.next()?.parse().ok()?;
        parts.next()?;
        Some((partition, offset))
    }
}

/// Which dead letters a command wants.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Only those dead-lettered at or after this time, Unix ms.
    pub since_ms: Option<i64>,
    /// Only those of this event.
    pub event_id: Option<String>,
    /// Only the one at this place in the dead-letter topic (partition, offset).
    pub position: Option<(i32, i64)>,
}

impl Filter {
    fn wants(&self, letter: &DeadLetter) -> bool {
        self.since_ms
            .is_none_or(|since| letter.dead_lettered_at_ms >= since)
            && self
                .event_id
                .as_ref()
                .is_none_or(|id| &letter.event_id == id)
            && self.position.is_none_or(|(partition, offset)| {
                letter.dlq_partition == partition && letter.dlq_offset == offset
            })
    }
}

/// What a read found: the first `kept` matches in topic order (oldest
/// first per partition, partitions in order) and how many matched in all.
#[derive(Debug, Default)]
pub struct Found {
    /// The matches kept (at most the cap given to [`read`]).
    pub letters: Vec<DeadLetter>,
    /// Every match, kept or not.
    pub matched: usize,
}

/// Reads `settings.dead_letter_topic` up to the high watermarks seen at the
/// start, keeping at most `cap` dead letters matching `filter` (payloads of
/// the others are dropped as they are read, so memory stays bounded).
pub async fn read<M: Decode>(
    settings: &ConsumerSettings,
    filter: &Filter,
    cap: usize,
) -> Result<Found, Error> {
    read_until::<M>(settings, filter, cap, false).await
}

/// [`read`] that stops once `cap` matches are kept, so a page of the first
/// letters costs the same on a topic of any length; `matched` then counts
/// the matches read, not every match in the topic.
pub async fn read_first<M: Decode>(
    settings: &ConsumerSettings,
    filter: &Filter,
    cap: usize,
) -> Result<Found, Error> {
    read_until::<M>(settings, filter, cap, true).await
}

/// A reader assigned to its partitions, and the offset where it stops in each.
type Assigned = (StreamConsumer, HashMap<i32, i64>);

/// A reader assigned to `settings.dead_letter_topic` from each partition's
/// low watermark (or only the record at `position`) up to where it ends
/// now — letters arriving later are not read — with those ends; None when
/// there is nothing to read. Blocking.
fn assigned(
    settings: &ConsumerSettings,
    position: Option<(i32, i64)>,
) -> Result<Option<Assigned>, Error> {
    let topic = settings.dead_letter_topic.as_str();
    let reader = reader(settings)?;
    let partitions = partitions(&reader, topic)?;
    if partitions.is_empty() {
        return Err(Error::Operator(format!(
            "dead-letter topic `{topic}` does not exist on the broker"
        )));
    }
    // A position reads that one record only, so looking at one letter costs
    // the same on a topic of any length.
    let mut ends: HashMap<i32, i64> = HashMap::new();
    let mut assignment = TopicPartitionList::new();
    for partition in partitions {
        let (low, high) = reader
            .fetch_watermarks(topic, partition, BROKER_TIMEOUT)
            .map_err(|error| broker_error(topic, &error))?;
        let (start, end) = match position {
            Some((wanted, offset)) if wanted == partition => {
                (low.max(offset), high.min(offset.saturating_add(1)))
            }
            Some(_) => continue,
            None => (low, high),
        };
        if end > start {
            ends.insert(partition, end);
            assignment
                .add_partition_offset(topic, partition, Offset::Offset(start))
                .map_err(|error| broker_error(topic, &error))?;
        }
    }
    if ends.is_empty() {
        return Ok(None);
    }
    reader
        .assign(&assignment)
        .map_err(|error| broker_error(topic, &error))?;
    Ok(Some((reader, ends)))
}

async fn read_until<M: Decode>(
    settings: &ConsumerSettings,
    filter: &Filter,
    cap: usize,
    stop_at_cap: bool,
) -> Result<Found, Error> {
    let topic = settings.dead_letter_topic.as_str();
    let mut found = Found::default();
    // The metadata and watermark calls block (each bounded by the broker
    // timeout): off the runtime's worker threads, which may be serving a
    // relay or a consumer in the same process.
    let planned = {
        let (settings, position) = (settings.clone(), filter.position);
        tokio::task::spawn_blocking(move || assigned(&settings, position))
            .await
            .map_err(|error| Error::Operator(format!("reading dead letters: {error}")))??
    };
    let Some((reader, mut ends)) = planned else {
        return Ok(found);
    };
    let deadline = Instant::now() + READ_TIMEOUT;
    // Per partition, records in offset order; letters are sorted at the end.
    while !ends.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        let record = match tokio::time::timeout(left, reader.recv()).await {
            Err(_) => {
                return Err(Error::Operator(format!(
                    "reading `{topic}` timed out after {}s with partitions {:?} unfinished",
                    READ_TIMEOUT.as_secs(),
                    ends.keys().collect::<Vec<_>>()
                )));
            }
            Ok(Err(error)) => return Err(broker_error(topic, &error)),
            Ok(Ok(record)) => record.detach(),
        };
        let partition = record.partition();
        let Some(end) = ends.get(&partition).copied() else {
            continue;
        };
        if record.offset() >= end {
            ends.remove(&partition);
            continue;
        }
        if record.offset() + 1 >= end {
            ends.remove(&partition);
        }
        let letter = DeadLetter::from_record::<M>(&record);
        if filter.wants(&letter) {
            found.matched += 1;
            if found.letters.len() < cap {
                found.letters.push(letter);
            }
            if stop_at_cap && found.letters.len() >= cap {
                break;
            }
        }
    }
    // Closing a consumer waits for its fetches in flight: not on this thread.
    drop(tokio::task::spawn_blocking(move || drop(reader)));
    found.letters.sort_by_key(|letter| {
        (
            letter.dead_lettered_at_ms,
            letter.dlq_partition,
            letter.dlq_offset,
        )
    });
    Ok(found)
}

/// How many dead letters `settings.dead_letter_topic` holds: the records
/// between each partition's low and high watermark (the topic is written by
/// a plain producer, so every offset is one dead letter), without reading
/// them. A topic that does not exist yet holds none. The client's calls
/// block (each bounded by the broker timeout), so they run off the runtime's
/// worker threads.
pub async fn count(settings: &ConsumerSettings) -> Result<u64, Error> {
    let settings = settings.clone();
    tokio::task::spawn_blocking(move || count_blocking(&settings))
        .await
        .map_err(|error| Error::Operator(format!("counting dead letters: {error}")))?
}

fn count_blocking(settings: &ConsumerSettings) -> Result<u64, Error> {
    let topic = settings.dead_letter_topic.as_str();
    let reader = reader(settings)?;
    let mut total = 0_u64;
    for partition in partitions(&reader, topic)? {
        let (low, high) = reader
            .fetch_watermarks(topic, partition, BROKER_TIMEOUT)
            .map_err(|error| broker_error(topic, &error))?;
        total += u64::try_from(high.saturating_sub(low)).unwrap_or(0);
    }
    Ok(total)
}

/// The partitions of `topic` as the broker reports them; none when the
/// topic does not exist. Blocking.
fn partitions(reader: &StreamConsumer, topic: &str) -> Result<Vec<i32>, Error> {
    let metadata = reader
        .fetch_metadata(Some(topic), BROKER_TIMEOUT)
        .map_err(|error| broker_error(topic, &error))?;
    Ok(metadata
        .topics()
        .iter()
        .filter(|found| found.name() == topic && found.error().is_none())
        .flat_map(|found| found.partitions().iter().map(|partition| partition.id()))
        .collect())
}

/// A consumer that only reads: its own group id (required by the client,
/// never joined: partitions are assigned, not subscribed) and no commits.
fn reader(settings: &ConsumerSettings) -> Result<StreamConsumer, Error> {
    let mut config = ClientConfig::new();
    for (key, value) in &settings.client_properties {
        config.set(key, value);
    }
    config
        .set(
            "group.id",
            format!("{}.dlq-reader", settings.consumer_group),
        )
        .set(
            "client.id",
            format!("{}-dlq-reader", settings.consumer_group),
        )
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        // What it reads is already there (up to the watermarks it fetched):
        // the broker need not hold a fetch waiting for more (500 ms by
        // default), and a page of the first letters need not prefetch
        // thousands behind them.
        .set("fetch.wait.max.ms", "20")
        .set("queued.min.messages", "1000")
        // Headers-only dead letters of huge originals are small; full copies
        // are at most the dead-letter producer's limit.
        .set(
            "fetch.message.max.bytes",
            settings.dead_letter_max_bytes().to_string(),
        );
    config
        .create()
        .map_err(|error| broker_error(&settings.dead_letter_topic, &error))
}

fn broker_error(topic: &str, error: &rdkafka::error::KafkaError) -> Error {
    Error::Operator(format!("reading dead-letter topic `{topic}`: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn letter(source: &str) -> DeadLetter {
        DeadLetter {
            dlq_partition: 0,
            dlq_offset: 0,
            dead_lettered_at_ms: 10,
            event_id: "e1".into(),
            room_id: String::new(),
            event_type: String::new(),
            source: source.into(),
            group: String::new(),
            attempts: 0,
            reason: String::new(),
            occurred_at_ms: 0,
            decode_error: None,
            original_bytes: None,
            headers: Vec::new(),
            payload: None,
            traceparent: String::new(),
        }
    }

    #[test]
    fn the_source_position_is_read_from_the_right() {
        assert_eq!(
            letter("prod.hyapp_room_outbox/3/42").source_position(),
            Some((3, 42))
        );
        assert_eq!(letter("a/b/7/9").source_position(), Some((7, 9)));
        assert_eq!(letter("garbage").source_position(), None);
        assert_eq!(letter("t/x/1").source_position(), None);
    }

    #[test]
    fn the_filter_takes_time_and_event_id() {
        let filter = Filter {
            since_ms: Some(10),
            event_id: Some("e1".into()),
            position: None,
        };
        assert!(filter.wants(&letter("t/0/0")));
        let mut older = letter("t/0/0");
        older.dead_lettered_at_ms = 9;
        assert!(!filter.wants(&older));
        let mut other = letter("t/0/0");
        other.event_id = "e2".into();
        assert!(!filter.wants(&other));
        let at = Filter {
            position: Some((0, 1)),
            ..Filter::default()
        };
        assert!(!at.wants(&letter("t/0/0")));
        let mut second = letter("t/0/0");
        second.dlq_offset = 1;
        assert!(at.wants(&second));
    }
}
