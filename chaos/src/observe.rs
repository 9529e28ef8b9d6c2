//! Everything the checker looks at, read from the outside after the run:
//! the database (command log, rooms, outbox, consumer tables, gift sagas),
//! the fake Tencent IM's recorded messages and counters, the fake wallet's
//! totals, the dead-letter topics' sizes and the consumers' duplicate counters.
//! The fake IM's messages and counters are read as [`crate::im_messages`] says.

use crate::im_messages::{ImRecord, freq_drops, im_record};
use outbox_schema::pb::room_outbox_event::Payload;
use prost::Message;
use rdkafka::consumer::{BaseConsumer, Consumer};
use serde_json::Value;
use sqlx::MySqlPool;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// A `room_command_log` row.
#[derive(Debug, Clone)]
pub struct LogEntry {
    /// Room.
    pub room_id: String,
    /// Room version the command produced.
    pub version: u64,
    /// Event ids in the stored reply.
    pub event_ids: Vec<String>,
    /// Room version in the stored reply (0 when it does not decode).
    pub reply_version: u64,
}

/// A `room_outbox` row, decoded.
#[derive(Debug, Clone)]
pub struct OutboxEvent {
    /// Event id.
    pub event_id: String,
    /// Room.
    pub room_id: String,
    /// 0 room events, 1 delayed wake-ups.
    pub lane: u8,
    /// Per-room event sequence (lane 0).
    pub seq: u64,
    /// Event type.
    pub event_type: String,
    /// Relay status.
    pub status: String,
    /// Due time of a pending row.
    pub due_ms: i64,
    /// Command that produced it (from the envelope; lane 0).
    pub command_id: String,
    /// Decoded payload (lane 0).
    pub payload: Option<Payload>,
}

/// Wallet totals.
#[derive(Debug, Clone, Copy, Default)]
pub struct WalletTotals {
    /// Sum of applied debits.
    pub debited: i64,
    /// Sum of applied refunds.
    pub refunded: i64,
    /// Debit calls answered from the idempotency record.
    pub debit_replays: u64,
}

/// Everything observed at one moment.
#[derive(Debug, Clone, Default)]
pub struct Observation {
    /// `command_id` → log row.
    pub log: HashMap<String, LogEntry>,
    /// `room_id` → (version, event_seq).
    pub rooms: HashMap<String, (u64, u64)>,
    /// Outbox rows in id order.
    pub outbox: Vec<OutboxEvent>,
    /// `(consumer_group, event_id)` in the order the groups applied them.
    pub dedup: Vec<(String, String)>,
    /// `room_id` → (total_value, gift_count) credited by activity-consumer.
    pub contributions: HashMap<String, (u64, u64)>,
    /// `(event_id, status)` of big-gift broadcasts.
    pub broadcasts: Vec<(String, String)>,
    /// `(event_id, recipient, room_id, status)` of notices, in insert order.
    pub notices: Vec<(String, String, String, String)>,
    /// `(command_id, status, amount)` of gift sagas.
    pub sagas: Vec<(String, String, u64)>,
    /// Messages the fake IM recorded, in acceptance order.
    pub im_messages: Vec<ImRecord>,
    /// Sends the fake IM absorbed because their `Random` repeated.
    pub im_deduplicated: u64,
    /// Recorded messages the fake IM forgot (its record limit was reached).
    pub im_forgotten: u64,
    /// Group messages the fake IM refused by its per-group frequency limit
    /// (answered `MsgFreqCtrl`, not recorded).
    pub im_freq_dropped: u64,
    /// The same refusals by group, for the groups that had any.
    pub im_freq_dropped_by_group: BTreeMap<String, u64>,
    /// Wallet totals.
    pub wallet: WalletTotals,
    /// `(topic, messages)` of each dead-letter topic.
    pub dead_letter_topics: Vec<(String, i64)>,
    /// `(service, duplicates suppressed since its last start)`.
    pub duplicates: Vec<(String, u64)>,
    /// Unix ms when observed.
    pub now_ms: i64,
}

/// Where to look.
#[derive(Debug, Clone)]
pub struct Sources {
    /// The run's database.
    pub pool: MySqlPool,
    /// HTTP client.
    pub http: reqwest::Client,
    /// Fake IM base URL.
    pub fake_im: String,
    /// Fake wallet admin base URL.
    pub wallet_admin: String,
    /// Broker bootstrap.
    pub bootstrap: String,
    /// Dead-letter topics.
    pub dead_letter_topics: Vec<String>,
    /// `(service, /metrics URL)` of each consumer.
    pub metrics: Vec<(String, String)>,
}

/// An id column's bytes. Id columns compare byte-exactly (`utf8mb4_bin`,
/// docs/design.md#identifiers) and sqlx refuses to decode such a column as a
/// `String`; the services read them through `service_kit::db::IdText`, which
/// the checker (linked to the API crates only) reads as bytes instead, as the
/// demo does. Bytes decode from the older case-insensitive columns too.
type IdBytes = Vec<u8>;

/// The text of an id column.
fn id(bytes: IdBytes) -> String {
    String::from_utf8_lossy(&bytes).into_owned()
}

type RawOutbox = (IdBytes, IdBytes, u8, u64, String, String, i64, Vec<u8>);

impl Sources {
    /// Reads everything; any source that cannot be read is an error (the
    /// checker retries until its settle deadline).
    pub async fn observe(&self) -> anyhow::Result<Observation> {
        let mut seen = Observation {
            now_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)?
                .as_millis() as i64,
            ..Observation::default()
        };
        self.observe_room_writes(&mut seen).await?;
        self.observe_consumers(&mut seen).await?;
        self.observe_fakes(&mut seen).await?;
        seen.dead_letter_topics = self.dead_letter_sizes().await?;
        for (service, url) in &self.metrics {
            // A consumer that is down right now has no counter to read; that is not a violation.
            let count = match self.http.get(url).send().await {
                Ok(response) => duplicate_count(&response.text().await.unwrap_or_default()),
                Err(_) => 0,
            };
            seen.duplicates.push((service.clone(), count));
        }
        Ok(seen)
    }

    /// What room-service wrote: the command log with its replies, the rooms
    /// and the outbox rows (lane-0 envelopes decoded).
    async fn observe_room_writes(&self, seen: &mut Observation) -> anyhow::Result<()> {
        let log: Vec<(IdBytes, IdBytes, u64, Vec<u8>)> =
            sqlx::query_as("SELECT command_id, room_id, room_version, reply FROM room_command_log")
                .fetch_all(&self.pool)
                .await?;
        for (command_id, room_id, version, reply) in log {
            let reply = hyapp_api::room::CommandReply::decode(reply.as_slice()).unwrap_or_default();
            seen.log.insert(
                id(command_id),
                LogEntry {
                    room_id: id(room_id),
                    version,
                    event_ids: reply
                        .events
                        .into_iter()
                        .map(|event| event.event_id)
                        .collect(),
                    reply_version: reply.room_version,
                },
            );
        }
        let rooms: Vec<(IdBytes, u64, u64)> =
            sqlx::query_as("SELECT room_id, version, event_seq FROM rooms")
                .fetch_all(&self.pool)
                .await?;
        seen.rooms = rooms
            .into_iter()
            .map(|(room, version, seq)| (id(room), (version, seq)))
            .collect();
        let outbox: Vec<RawOutbox> = sqlx::query_as(
            "SELECT event_id, room_id, lane, room_event_seq, event_type, status, next_retry_at_ms, payload \
             FROM room_outbox ORDER BY id",
        )
        .fetch_all(&self.pool)
        .await?;
        seen.outbox = outbox
            .into_iter()
            .map(
                |(event_id, room_id, lane, seq, event_type, status, due_ms, payload)| {
                    let envelope = (lane == 0)
                        .then(|| outbox_schema::decode_envelope(&payload).ok())
                        .flatten();
                    OutboxEvent {
                        event_id: id(event_id),
                        room_id: id(room_id),
                        lane,
                        seq,
                        event_type,
                        status,
                        due_ms,
                        command_id: envelope
                            .as_ref()
                            .map(|e| e.command_id.clone())
                            .unwrap_or_default(),
                        payload: envelope.and_then(|e| e.payload),
                    }
                },
            )
            .collect();
        Ok(())
    }

    /// What the consumers and the saga wrote: dedup claims in applied order,
    /// activity contributions and broadcasts, notice deliveries, gift sagas.
    async fn observe_consumers(&self, seen: &mut Observation) -> anyhow::Result<()> {
        let dedup: Vec<(IdBytes, IdBytes)> = sqlx::query_as(
            "SELECT consumer_group, event_id FROM consumer_dedup ORDER BY applied_seq",
        )
        .fetch_all(&self.pool)
        .await?;
        seen.dedup = dedup
            .into_iter()
            .map(|(group, event_id)| (id(group), id(event_id)))
            .collect();
        let contributions: Vec<(IdBytes, u64, u64)> = sqlx::query_as(
            "SELECT room_id, total_value, gift_count FROM activity_room_contribution",
        )
        .fetch_all(&self.pool)
        .await?;
        seen.contributions = contributions
            .into_iter()
            .map(|(room, total, count)| (id(room), (total, count)))
            .collect();
        let broadcasts: Vec<(IdBytes, String)> =
            sqlx::query_as("SELECT event_id, status FROM activity_broadcasts")
                .fetch_all(&self.pool)
                .await?;
        seen.broadcasts = broadcasts
            .into_iter()
            .map(|(event_id, status)| (id(event_id), status))
            .collect();
        let notices: Vec<(IdBytes, IdBytes, IdBytes, String)> = sqlx::query_as(
            "SELECT event_id, recipient_id, room_id, status FROM notice_delivery_events ORDER BY id",
        )
        .fetch_all(&self.pool)
        .await?;
        seen.notices = notices
            .into_iter()
            .map(|(event_id, recipient, room, status)| {
                (id(event_id), id(recipient), id(room), status)
            })
            .collect();
        let sagas: Vec<(IdBytes, String, u64)> =
            sqlx::query_as("SELECT command_id, status, amount FROM room_gift_saga")
                .fetch_all(&self.pool)
                .await?;
        seen.sagas = sagas
            .into_iter()
            .map(|(command_id, status, amount)| (id(command_id), status, amount))
            .collect();
        Ok(())
    }

    async fn observe_fakes(&self, seen: &mut Observation) -> anyhow::Result<()> {
        let messages: Value = self
            .http
            .get(format!("{}/admin/messages", self.fake_im))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        seen.im_messages = messages
            .as_array()
            .into_iter()
            .flatten()
            .map(im_record)
            .collect::<anyhow::Result<_>>()?;
        let stats: Value = self
            .http
            .get(format!("{}/admin/stats", self.fake_im))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        seen.im_deduplicated = stats["deduplicated"].as_u64().unwrap_or(0);
        seen.im_forgotten = stats["forgotten"].as_u64().unwrap_or(0);
        (seen.im_freq_dropped, seen.im_freq_dropped_by_group) = freq_drops(&stats)?;
        let wallet: Value = self
            .http
            .get(format!("{}/admin/stats", self.wallet_admin))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        seen.wallet = WalletTotals {
            debited: wallet["total_debited"].as_i64().unwrap_or(0),
            refunded: wallet["total_refunded"].as_i64().unwrap_or(0),
            debit_replays: wallet["debit_replays"].as_u64().unwrap_or(0),
        };
        Ok(())
    }

    /// Messages in each dead-letter topic (high − low watermark over its partitions).
    async fn dead_letter_sizes(&self) -> anyhow::Result<Vec<(String, i64)>> {
        let bootstrap = self.bootstrap.clone();
        let topics = self.dead_letter_topics.clone();
        tokio::task::spawn_blocking(move || {
            let consumer: BaseConsumer = rdkafka::ClientConfig::new()
                .set("bootstrap.servers", &bootstrap)
                .set("group.id", "chaos-checker")
                .create()?;
            let timeout = Duration::from_secs(5);
            let metadata = consumer.fetch_metadata(None, timeout)?;
            let mut sizes = Vec::new();
            for topic in topics {
                let partitions = metadata
                    .topics()
                    .iter()
                    .find(|candidate| candidate.name() == topic)
                    .map(|found| found.partitions().len())
                    .unwrap_or(0);
                let mut total = 0;
                for partition in 0..partitions as i32 {
                    let (low, high) = consumer.fetch_watermarks(&topic, partition, timeout)?;
                    total += high - low;
                }
                sizes.push((topic, total));
            }
            Ok(sizes)
        })
        .await?
    }
}

/// Sum of `consumer_messages_duplicate_total` samples in a Prometheus text page.
fn duplicate_count(page: &str) -> u64 {
    page.lines()
        .filter(|line| line.starts_with("consumer_messages_duplicate_total"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|value| value as u64)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicates_are_summed_over_groups() {
        let page = "# HELP consumer_messages_duplicate Messages\n\
                    consumer_messages_duplicate_total{group=\"a\"} 3\n\
                    consumer_messages_duplicate_total{group=\"b\"} 4\n\
                    consumer_messages_consumed_total{group=\"a\"} 90\n";
        assert_eq!(duplicate_count(page), 7);
    }
}
