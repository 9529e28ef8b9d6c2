//! The INSERT into `room_outbox`. room-service calls [`insert_outbox_rows`] inside its
//! SaveMutation transaction, so the rows commit atomically with the command
//! log and the room meta; this is the only INSERT into `room_outbox`.

use outbox_schema::{NewOutboxRow, OutboxStatus};
use sqlx::{MySql, QueryBuilder};
use std::borrow::Borrow;

/// Inserts `rows` (status `pending`) with one multi-row statement; their ids
/// ascend in the order given. Rows or references to them, so that one
/// statement can carry several rooms' rows (room-service's shared commits).
pub async fn insert_outbox_rows<R: Borrow<NewOutboxRow> + Sync>(
    connection: &mut sqlx::MySqlConnection,
    rows: &[R],
) -> Result<(), sqlx::Error> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut builder: QueryBuilder<'_, MySql> = QueryBuilder::new(
        "INSERT INTO room_outbox (event_id, app_code, room_id, shard, lane, room_event_seq, \
         event_type, topic, payload, traceparent, status, next_retry_at_ms, created_at_ms) ",
    );
    builder.push_values(rows, |mut row, new| {
        let new = new.borrow();
        row.push_bind(&new.event_id)
            .push_bind(&new.app_code)
            .push_bind(&new.room_id)
            .push_bind(new.shard)
            .push_bind(new.lane)
            .push_bind(new.room_event_seq)
            .push_bind(&new.event_type)
            .push_bind(&new.topic)
            .push_bind(&new.payload)
            .push_bind(&new.traceparent)
            .push_bind(OutboxStatus::Pending.as_str())
            .push_bind(new.next_retry_at_ms)
            .push_bind(new.created_at_ms);
    });
    builder.build().execute(connection).await?;
    Ok(())
}
