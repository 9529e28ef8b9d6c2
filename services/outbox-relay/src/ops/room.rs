//! `room <id>`: one room's open chain as the relay sees it — the head row
//! (decoded through outbox-schema's validated decoding: type, event id, room
//! seq, a readable payload summary), its status, attempts, next retry and
//! last error, and what queues behind it — plus the room's open delayed
//! wake-ups, which are outside the chain. The open rows are read from the
//! backlog's range of idx_claim (the room filtered in the index), so a room's
//! delivered history is never walked.

use super::queries::{EVENT_PAYLOAD_SQL, ROOM_EXISTS_SQL, ROOM_OPEN_COUNT_SQL, ROOM_OPEN_ROWS_SQL};
use crate::Error;
use outbox_schema::row::{LANE_CHAIN, LANE_DELAYED};
use serde::Serialize;
use service_kit::db::IdText;
use service_kit::time::now_ms;
use sqlx::{MySqlPool, Row, mysql::MySqlRow};

/// Rows listed behind the head (the count covers all of them).
pub const QUEUED_SHOWN: u64 = 20;
/// Longest payload summary, in characters.
const SUMMARY_CHARS: usize = 240;

/// One outbox row as operators see it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct RowView {
    /// Row id (commit order).
    pub id: u64,
    /// Event id.
    pub event_id: String,
    /// Room.
    pub room_id: String,
    /// 0 = the room's ordered chain, 1 = a delayed wake-up.
    pub lane: u8,
    /// The room's sequence number of the event.
    pub room_event_seq: u64,
    /// Event type (the stored column).
    pub event_type: String,
    /// Status.
    pub status: String,
    /// Failed attempts so far.
    pub attempts: u32,
    /// When a pending/retryable row is due (retry time; a wake-up's open time).
    pub next_retry_at_ms: i64,
    /// How long until it is due, ms (0 when due).
    pub due_in_ms: i64,
    /// A `delivering` row's claim holder and expiry.
    pub claimed_by: String,
    /// Claim expiry (0 when not claimed).
    pub lock_until_ms: i64,
    /// Last failure, short.
    pub last_error: String,
    /// Commit time.
    pub created_at_ms: i64,
    /// The decoded payload, short; or why it does not decode.
    pub payload: String,
}

/// Reads a row of the views' column list.
pub(crate) fn row_view(row: &MySqlRow, now: i64) -> Result<RowView, sqlx::Error> {
    let lane: u8 = row.try_get("lane")?;
    let next_retry_at_ms: i64 = row.try_get("next_retry_at_ms")?;
    let payload: Vec<u8> = row.try_get("payload")?;
    Ok(RowView {
        id: row.try_get("id")?,
        event_id: row.try_get::<IdText, _>("event_id")?.into(),
        room_id: row.try_get::<IdText, _>("room_id")?.into(),
        lane,
        room_event_seq: row.try_get("room_event_seq")?,
        event_type: row.try_get("event_type")?,
        status: row.try_get("status")?,
        attempts: row.try_get("retry_count")?,
        next_retry_at_ms,
        due_in_ms: (next_retry_at_ms - now).max(0),
        claimed_by: row.try_get::<IdText, _>("claimed_by")?.into(),
        lock_until_ms: row.try_get("lock_until_ms")?,
        last_error: row.try_get("last_error")?,
        created_at_ms: row.try_get("created_at_ms")?,
        payload: payload_summary(lane, &payload),
    })
}

/// What a stored payload says, decoded with the same validation consumers
/// apply; an undecodable payload is described, never a panic.
pub fn payload_summary(lane: u8, payload: &[u8]) -> String {
    let text = if lane == LANE_DELAYED {
        match outbox_schema::decode_wakeup(payload) {
            Ok(wakeup) => format!("{wakeup:?}"),
            Err(error) => format!("undecodable wake-up: {error}"),
        }
    } else {
        match outbox_schema::decode_envelope(payload) {
            Ok(envelope) => match &envelope.payload {
                Some(payload) => format!("{payload:?}"),
                None => format!("{} (a type newer than this build)", envelope.event_type),
            },
            Err(error) => format!("undecodable: {error}"),
        }
    };
    if text.chars().count() <= SUMMARY_CHARS {
        return text;
    }
    let mut short: String = text.chars().take(SUMMARY_CHARS).collect();
    short.push('…');
    short
}

/// The whole stored payload as readable JSON (the protobuf's fields by
/// name), decoded with the same validation as [`payload_summary`]; an
/// undecodable payload is described instead.
pub fn payload_json(lane: u8, payload: &[u8]) -> String {
    let json = if lane == LANE_DELAYED {
        outbox_schema::decode_wakeup(payload)
            .map_err(|error| format!("undecodable wake-up: {error}"))
            .and_then(|wakeup| serde_json::to_string_pretty(&wakeup).map_err(|e| e.to_string()))
    } else {
        outbox_schema::decode_envelope(payload)
            .map_err(|error| format!("undecodable: {error}"))
            .and_then(|envelope| serde_json::to_string_pretty(&envelope).map_err(|e| e.to_string()))
    };
    json.unwrap_or_else(|problem| problem)
}

/// One event's full payload as JSON ([`payload_json`]); `NotFound` for an
/// unknown event.
pub async fn event_json(pool: &MySqlPool, event_id: &str) -> Result<String, Error> {
    let event_id = super::checked_event_id(event_id)?;
    let row = sqlx::query(EVENT_PAYLOAD_SQL)
        .bind(event_id)
        .fetch_optional(pool)
        .await?
        .ok_or_else(|| Error::NotFound(format!("event `{event_id}` is not in room_outbox")))?;
    let lane: u8 = row.try_get("lane")?;
    let payload: Vec<u8> = row.try_get("payload")?;
    Ok(payload_json(lane, &payload))
}

/// One room's open chain and wake-ups.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct RoomView {
    /// The room.
    pub room_id: String,
    /// Its outbox shard (whose lease owner publishes it: see `leases`).
    pub shard: u16,
    /// The first open row of the chain: nothing of the room is published
    /// before it. None when the chain is fully delivered or dead-lettered.
    pub head: Option<RowView>,
    /// Open chain rows behind the head.
    pub queued_behind: u64,
    /// The first of them (at most [`QUEUED_SHOWN`]), in commit order.
    pub queued: Vec<RowView>,
    /// Open delayed wake-ups (outside the chain), earliest committed first.
    pub wakeups: Vec<RowView>,
}

/// The room's view; `NotFound` when the outbox holds no row of the room.
pub async fn room(pool: &MySqlPool, room_id: &str) -> Result<RoomView, Error> {
    let room_id = super::checked_room_id(room_id)?;
    let exists = sqlx::query(ROOM_EXISTS_SQL)
        .bind(room_id)
        .fetch_optional(pool)
        .await?;
    if exists.is_none() {
        return Err(Error::NotFound(format!(
            "room `{room_id}` has no rows in room_outbox (never written, or purged)"
        )));
    }
    let now = now_ms();
    let open_rows = |lane: u8, limit: u64| async move {
        sqlx::query(ROOM_OPEN_ROWS_SQL)
            .bind(room_id)
            .bind(lane)
            .bind(limit)
            .fetch_all(pool)
            .await?
            .iter()
            .map(|row| row_view(row, now))
            .collect::<Result<Vec<_>, _>>()
            .map_err(Error::from)
    };
    let mut chain = open_rows(LANE_CHAIN, QUEUED_SHOWN + 1).await?.into_iter();
    let head = chain.next();
    let open_count: i64 = sqlx::query_scalar(ROOM_OPEN_COUNT_SQL)
        .bind(room_id)
        .bind(LANE_CHAIN)
        .fetch_one(pool)
        .await?;
    Ok(RoomView {
        room_id: room_id.to_owned(),
        shard: outbox_schema::shard_of(room_id),
        queued_behind: u64::try_from(open_count)
            .unwrap_or(0)
            .saturating_sub(u64::from(head.is_some())),
        head,
        queued: chain.collect(),
        wakeups: open_rows(LANE_DELAYED, QUEUED_SHOWN).await?,
    })
}
