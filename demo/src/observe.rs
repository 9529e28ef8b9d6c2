//! Reading what the services did, from the outside: the demo database
//! (`room_outbox`, `consumer_dedup`, activity and notice tables) and the
//! fakes' admin HTTP (messages recorded by the fake Tencent IM and its
//! counters for the room's group, read as [`crate::im_messages`] says; the
//! fake wallet's ledger). A table or endpoint that cannot be read yields an
//! empty result plus a note, never a crash: the report then shows the effect
//! missing.

use crate::im_messages::{GroupStats, ImMessage, group_stats, im_message};
use outbox_schema::pb::{self, room_outbox_event::Payload};
use serde_json::Value;
use sqlx::MySqlPool;

/// One `room_outbox` row of the demo room.
#[derive(Debug, Clone)]
pub struct OutboxRow {
    /// Event id.
    pub event_id: String,
    /// Event type (`TreasureOpenWakeup` rows on lane 1).
    pub event_type: String,
    /// 0 = room events, 1 = delayed wake-ups.
    pub lane: u8,
    /// Status.
    pub status: String,
    /// Commit time.
    pub created_at_ms: i64,
    /// Broker accepted it.
    pub delivered_at_ms: Option<i64>,
    /// Due time (a wake-up's `open_at_ms`).
    pub next_retry_at_ms: i64,
    /// Decoded envelope (lane 0).
    pub envelope: Option<pb::RoomOutboxEvent>,
}

impl OutboxRow {
    /// The `RoomUserLeft` payload, if this is one.
    pub fn user_left(&self) -> Option<&pb::RoomUserLeft> {
        match self.envelope.as_ref()?.payload.as_ref()? {
            Payload::RoomUserLeft(left) => Some(left),
            _ => None,
        }
    }
}

/// Everything observed at one moment.
#[derive(Debug, Default)]
pub struct Observed {
    /// `room_outbox` rows of the room, in commit order.
    pub outbox: Vec<OutboxRow>,
    /// `(consumer_group, event_id, processed_at_ms)` for the room's events.
    pub dedup: Vec<(String, String, i64)>,
    /// `(activity_id, user_id, score)`.
    pub leaderboard: Vec<(String, String, u64)>,
    /// `(event_id, sender, total_value, status, delivered_at_ms)`.
    pub broadcasts: Vec<(String, String, u64, String, Option<i64>)>,
    /// `(event_id, recipient, notice_type, status, delivered_at_ms)`.
    pub notices: Vec<(String, String, String, String, Option<i64>)>,
    /// Messages in the room's IM group.
    pub room_messages: Vec<ImMessage>,
    /// Messages in the global broadcast group.
    pub broadcast_messages: Vec<ImMessage>,
    /// C2C messages to the demo users.
    pub c2c_messages: Vec<ImMessage>,
    /// Accounts removed from the room's IM group.
    pub removed_members: Vec<String>,
    /// Whether the room's IM group exists.
    pub room_group_exists: bool,
    /// What the fake IM counted for the room's group (`None`: unreadable, see `notes`).
    pub room_group_stats: Option<GroupStats>,
    /// Things that could not be read.
    pub notes: Vec<String>,
}

/// Where to look.
#[derive(Debug, Clone)]
pub struct Sources {
    /// Demo database.
    pub pool: MySqlPool,
    /// HTTP client.
    pub http: reqwest::Client,
    /// Fake IM base URL.
    pub fake_im: String,
    /// The room.
    pub room_id: String,
    /// The room's IM group id.
    pub room_group: String,
    /// The global broadcast group id.
    pub broadcast_group: String,
    /// Users whose C2C messages are collected.
    pub users: Vec<String>,
}

/// An id column's bytes. Id columns compare byte-exactly (`utf8mb4_bin`,
/// docs/design.md#identifiers) and sqlx refuses to decode such a column as a
/// `String`; the services read them through `service_kit::db::IdText`, which
/// the demo (linked to the API crates only) reads as bytes instead.
type IdBytes = Vec<u8>;

/// The text of an id column.
fn id(bytes: IdBytes) -> String {
    String::from_utf8_lossy(&bytes).into_owned()
}

type RawOutbox = (IdBytes, String, u8, String, i64, Option<i64>, i64, Vec<u8>);

impl Sources {
    /// Reads everything once.
    pub async fn observe(&self) -> Observed {
        let mut observed = Observed::default();
        let room = self.room_id.as_str();
        self.observe_outbox(&mut observed).await;
        match sqlx::query_as::<_, (IdBytes, IdBytes, i64)>(
            "SELECT d.consumer_group, d.event_id, d.processed_at_ms FROM consumer_dedup d \
             JOIN room_outbox o ON o.event_id = d.event_id WHERE o.room_id = ?",
        )
        .bind(room)
        .fetch_all(&self.pool)
        .await
        {
            Ok(rows) => {
                observed.dedup = rows
                    .into_iter()
                    .map(|(group, event_id, at)| (id(group), id(event_id), at))
                    .collect();
            }
            Err(error) => observed.notes.push(format!("consumer_dedup: {error}")),
        }
        match sqlx::query_as::<_, (IdBytes, IdBytes, u64)>(
            "SELECT activity_id, user_id, score FROM activity_gift_leaderboard \
             ORDER BY activity_id, score DESC, user_id",
        )
        .fetch_all(&self.pool)
        .await
        {
            Ok(rows) => {
                observed.leaderboard = rows
                    .into_iter()
                    .map(|(activity, user, score)| (id(activity), id(user), score))
                    .collect();
            }
            Err(error) => observed
                .notes
                .push(format!("activity_gift_leaderboard: {error}")),
        }
        match sqlx::query_as::<_, (IdBytes, IdBytes, u64, String, Option<i64>)>(
            "SELECT event_id, sender_id, total_value, status, delivered_at_ms \
             FROM activity_broadcasts WHERE room_id = ? ORDER BY created_at_ms",
        )
        .bind(room)
        .fetch_all(&self.pool)
        .await
        {
            Ok(rows) => {
                observed.broadcasts = rows
                    .into_iter()
                    .map(|(event_id, sender, total, status, delivered)| {
                        (id(event_id), id(sender), total, status, delivered)
                    })
                    .collect();
            }
            Err(error) => observed.notes.push(format!("activity_broadcasts: {error}")),
        }
        match sqlx::query_as::<_, (IdBytes, IdBytes, String, String, Option<i64>)>(
            "SELECT event_id, recipient_id, notice_type, status, delivered_at_ms \
             FROM notice_delivery_events WHERE room_id = ? ORDER BY id",
        )
        .bind(room)
        .fetch_all(&self.pool)
        .await
        {
            Ok(rows) => {
                observed.notices = rows
                    .into_iter()
                    .map(|(event_id, recipient, kind, status, delivered)| {
                        (id(event_id), id(recipient), kind, status, delivered)
                    })
                    .collect();
            }
            Err(error) => observed
                .notes
                .push(format!("notice_delivery_events: {error}")),
        }
        self.observe_im(&mut observed).await;
        observed
    }

    /// The room's outbox rows, lane-0 payloads decoded.
    async fn observe_outbox(&self, observed: &mut Observed) {
        let room = self.room_id.as_str();
        match sqlx::query_as::<_, RawOutbox>(
            "SELECT event_id, event_type, lane, status, created_at_ms, \
             NULLIF(delivered_at_ms, 0) AS delivered_at_ms, next_retry_at_ms, payload \
             FROM room_outbox WHERE room_id = ? ORDER BY id",
        )
        .bind(room)
        .fetch_all(&self.pool)
        .await
        {
            Ok(rows) => {
                observed.outbox = rows
                    .into_iter()
                    .map(
                        |(event_id, event_type, lane, status, created, delivered, due, payload)| {
                            OutboxRow {
                                envelope: (lane == 0)
                                    .then(|| outbox_schema::decode_envelope(&payload).ok())
                                    .flatten(),
                                event_id: id(event_id),
                                event_type,
                                lane,
                                status,
                                created_at_ms: created,
                                delivered_at_ms: delivered,
                                next_retry_at_ms: due,
                            }
                        },
                    )
                    .collect();
            }
            Err(error) => observed.notes.push(format!("room_outbox: {error}")),
        }
    }

    async fn observe_im(&self, observed: &mut Observed) {
        match self.im_messages(&[("group_id", &self.room_group)]).await {
            Ok(messages) => observed.room_messages = messages,
            Err(error) => observed
                .notes
                .push(format!("fake IM room messages: {error}")),
        }
        match self
            .im_messages(&[("group_id", &self.broadcast_group)])
            .await
        {
            Ok(messages) => observed.broadcast_messages = messages,
            Err(error) => observed
                .notes
                .push(format!("fake IM broadcast messages: {error}")),
        }
        observed.c2c_messages.clear();
        for user in &self.users {
            match self.im_messages(&[("to_account", user)]).await {
                Ok(messages) => observed.c2c_messages.extend(messages),
                Err(error) => observed
                    .notes
                    .push(format!("fake IM C2C messages: {error}")),
            }
        }
        match self.get_json("/admin/groups", &[]).await {
            Ok(Value::Array(groups)) => {
                if let Some(group) = groups
                    .iter()
                    .find(|group| group["group_id"].as_str() == Some(self.room_group.as_str()))
                {
                    observed.room_group_exists = true;
                    observed.removed_members = group["removed_members"]
                        .as_array()
                        .map(|members| {
                            members
                                .iter()
                                .filter_map(|member| member.as_str().map(str::to_string))
                                .collect()
                        })
                        .unwrap_or_default();
                }
            }
            Ok(other) => observed
                .notes
                .push(format!("fake IM groups: unexpected {other}")),
            Err(error) => observed.notes.push(format!("fake IM groups: {error}")),
        }
        match self.get_json("/admin/stats", &[]).await.map(|stats| {
            group_stats(&stats, &self.room_group).map_err(|error| format!("{error:#}"))
        }) {
            Ok(Ok(stats)) => observed.room_group_stats = Some(stats),
            Ok(Err(error)) | Err(error) => observed.notes.push(format!("fake IM stats: {error}")),
        }
    }

    async fn get_json(&self, path: &str, query: &[(&str, &str)]) -> Result<Value, String> {
        let response = self
            .http
            .get(format!("{}{path}", self.fake_im))
            .query(query)
            .send()
            .await
            .map_err(|error| error.to_string())?;
        response.json().await.map_err(|error| error.to_string())
    }

    async fn im_messages(&self, query: &[(&str, &str)]) -> Result<Vec<ImMessage>, String> {
        let value = self.get_json("/admin/messages", query).await?;
        Ok(value
            .as_array()
            .map(|messages| messages.iter().map(im_message).collect())
            .unwrap_or_default())
    }
}

/// `GET {wallet}/admin/stats`, or a note.
pub async fn wallet_stats(http: &reqwest::Client, wallet: &str) -> Result<Value, String> {
    http.get(format!("{wallet}/admin/stats"))
        .send()
        .await
        .map_err(|error| error.to_string())?
        .json()
        .await
        .map_err(|error| error.to_string())
}

/// `GET {wallet}/admin/balance?user_id=`, or a note.
pub async fn wallet_balance(
    http: &reqwest::Client,
    wallet: &str,
    user: &str,
) -> Result<i64, String> {
    let value: Value = http
        .get(format!("{wallet}/admin/balance"))
        .query(&[("user_id", user)])
        .send()
        .await
        .map_err(|error| error.to_string())?
        .json()
        .await
        .map_err(|error| error.to_string())?;
    value["balance"]
        .as_i64()
        .ok_or_else(|| format!("unexpected balance answer {value}"))
}
