//! Every SQL statement the relay issues against `room_outbox`: scanning the
//! backlog of owned shards, fenced claims, marking outcomes. SQL errors are
//! mapped once, here, into [`crate::Error`]. All values are bound parameters.
//!
//! Two kinds of marks (docs/design.md#ordering-and-fencing): after a claim
//! (`direct`/`dual`), fenced by the claim token; without one (`mq`), fenced
//! by the shard lease's owner and epoch in the same statement.
//!
//! Each statement runs within `mysql.statement_timeout` (`crate::db`); the
//! functions take the relay's [`BoundedPool`], or a bare pool, which gets
//! the default deadline.

use crate::Error;
use outbox_schema::OutboxStatus;
use outbox_schema::row::LANE_CHAIN;
use service_kit::db::IdText;
use service_kit::db::statement::BoundedPool;
use sqlx::{MySql, QueryBuilder, Row, mysql::MySqlRow};

/// One backlog row as scanned, with everything needed to publish it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxRow {
    /// Commit-order id.
    pub id: u64,
    /// Envelope event id.
    pub event_id: String,
    /// App code.
    pub app_code: String,
    /// Room id (Kafka key).
    pub room_id: String,
    /// Shard of the room.
    pub shard: u16,
    /// Chain or delayed lane.
    pub lane: u8,
    /// Per-room sequence.
    pub room_event_seq: u64,
    /// Event type (header).
    pub event_type: String,
    /// Destination topic before namespacing.
    pub topic: String,
    /// Encoded protobuf.
    pub payload: Vec<u8>,
    /// W3C trace context.
    pub traceparent: String,
    /// Current status column.
    pub status: OutboxStatus,
    /// Failures so far.
    pub retry_count: u32,
    /// Earliest publish time.
    pub next_retry_at_ms: i64,
    /// Claim expiry.
    pub lock_until_ms: i64,
    /// Commit time.
    pub created_at_ms: i64,
}

impl OutboxRow {
    /// May this row be claimed at `now_ms`? Pending rows always; retryable
    /// rows once due; delivering rows once their claim expired.
    pub fn is_due(&self, now_ms: i64) -> bool {
        match self.status {
            OutboxStatus::Pending | OutboxStatus::Retryable => self.next_retry_at_ms <= now_ms,
            OutboxStatus::Delivering => self.lock_until_ms < now_ms,
            OutboxStatus::Delivered | OutboxStatus::Failed => false,
        }
    }
}

const ROW_COLUMNS: &str = "id, event_id, app_code, room_id, shard, lane, room_event_seq, event_type, \
     topic, payload, traceparent, status, retry_count, next_retry_at_ms, lock_until_ms, created_at_ms";

fn row_from(row: &MySqlRow) -> Result<OutboxRow, sqlx::Error> {
    Ok(OutboxRow {
        id: row.try_get("id")?,
        event_id: row.try_get::<IdText, _>("event_id")?.into(),
        app_code: row.try_get::<IdText, _>("app_code")?.into(),
        room_id: row.try_get::<IdText, _>("room_id")?.into(),
        shard: row.try_get("shard")?,
        lane: row.try_get("lane")?,
        room_event_seq: row.try_get("room_event_seq")?,
        event_type: row.try_get("event_type")?,
        topic: row.try_get("topic")?,
        payload: row.try_get("payload")?,
        traceparent: row.try_get("traceparent")?,
        status: row
            .try_get::<String, _>("status")?
            .parse()
            .map_err(|error: outbox_schema::Error| sqlx::Error::Decode(error.into()))?,
        retry_count: row.try_get("retry_count")?,
        next_retry_at_ms: row.try_get("next_retry_at_ms")?,
        lock_until_ms: row.try_get("lock_until_ms")?,
        created_at_ms: row.try_get("created_at_ms")?,
    })
}

fn push_in_list<'a, T>(builder: &mut QueryBuilder<'a, MySql>, values: &'a [T])
where
    T: 'a + sqlx::Encode<'a, MySql> + sqlx::Type<MySql> + Send + Sync,
{
    builder.push("(");
    let mut separated = builder.separated(", ");
    for value in values {
        separated.push_bind(value);
    }
    separated.push_unseparated(")");
}

/// Backlog rows of the ordered chain in `shards`, in commit order, after
/// `after_id`, except the ids in `skip`. Uses idx_claim, so only open rows
/// are touched, and `skip` is filtered in the index (`id` is in it): a
/// skipped row's entry is read, never the row with its payload.
pub async fn scan_chain(
    db: impl Into<BoundedPool>,
    shards: &[u16],
    after_id: u64,
    skip: &[u64],
    limit: usize,
) -> Result<Vec<OutboxRow>, Error> {
    if shards.is_empty() {
        return Ok(Vec::new());
    }
    let mut builder = QueryBuilder::new("");
    push_scan_chain(&mut builder, shards, after_id, skip, limit);
    let rows = crate::db::fetch_all(&db.into(), builder).await?;
    rows.iter()
        .map(row_from)
        .collect::<Result<_, _>>()
        .map_err(Error::from)
}

/// The statement of [`scan_chain`], pushed onto `builder` (public so that
/// the EXPLAIN test plans the very statement the relay sends).
pub fn push_scan_chain<'a>(
    builder: &mut QueryBuilder<'a, MySql>,
    shards: &'a [u16],
    after_id: u64,
    skip: &'a [u64],
    limit: usize,
) {
    builder.push(format!(
        "SELECT {ROW_COLUMNS} FROM room_outbox FORCE INDEX (idx_claim) WHERE lane = "
    ));
    builder
        .push_bind(LANE_CHAIN)
        .push(" AND open_flag = 1 AND id > ")
        .push_bind(after_id);
    builder.push(" AND shard IN ");
    push_in_list(builder, shards);
    if !skip.is_empty() {
        builder.push(" AND id NOT IN ");
        push_in_list(builder, skip);
    }
    builder.push(" ORDER BY id LIMIT ").push_bind(limit as u64);
}

/// Due delayed wake-ups in `shards`, earliest first.
pub async fn scan_delayed(
    db: impl Into<BoundedPool>,
    shards: &[u16],
    now_ms: i64,
    limit: usize,
) -> Result<Vec<OutboxRow>, Error> {
    if shards.is_empty() {
        return Ok(Vec::new());
    }
    let mut builder = QueryBuilder::new("");
    push_scan_delayed(&mut builder, shards, now_ms, limit);
    let rows = crate::db::fetch_all(&db.into(), builder).await?;
    let mut rows: Vec<OutboxRow> = rows.iter().map(row_from).collect::<Result<_, _>>()?;
    rows.retain(|row| row.is_due(now_ms));
    Ok(rows)
}

/// The statement of [`scan_delayed`], pushed onto `builder` (public for
/// the EXPLAIN test).
pub fn push_scan_delayed<'a>(
    builder: &mut QueryBuilder<'a, MySql>,
    shards: &'a [u16],
    now_ms: i64,
    limit: usize,
) {
    // `delayed_due_ms` is NULL for everything but open wake-ups.
    builder.push(format!(
        "SELECT {ROW_COLUMNS} FROM room_outbox FORCE INDEX (idx_delayed) WHERE delayed_due_ms <= "
    ));
    builder.push_bind(now_ms);
    builder.push(" AND shard IN ");
    push_in_list(builder, shards);
    builder
        .push(" ORDER BY delayed_due_ms LIMIT ")
        .push_bind(limit as u64);
}

/// Earliest due time of an unclaimed open delayed wake-up in `shards` (an
/// ordered read of idx_delayed).
pub async fn next_delayed_due(
    db: impl Into<BoundedPool>,
    shards: &[u16],
) -> Result<Option<i64>, Error> {
    if shards.is_empty() {
        return Ok(None);
    }
    let mut builder = QueryBuilder::new(
        "SELECT delayed_due_ms FROM room_outbox FORCE INDEX (idx_delayed) \
         WHERE delayed_due_ms IS NOT NULL AND status <> 'delivering' AND shard IN ",
    );
    push_in_list(&mut builder, shards);
    builder.push(" ORDER BY delayed_due_ms LIMIT 1");
    let row = crate::db::fetch_optional(&db.into(), builder).await?;
    row.map(|row| row.try_get::<i64, _>("delayed_due_ms"))
        .transpose()
        .map_err(Error::from)
}

/// Claims `ids` for this relay: only rows that are still due, and only while
/// the relay holds a live lease on the row's shard (checked in the same
/// statement, so a relay whose lease lapsed claims nothing). Returns the ids
/// actually claimed.
pub async fn claim(
    db: impl Into<BoundedPool>,
    ids: &[u64],
    node_id: &str,
    claim_token: u64,
    now_ms: i64,
    lock_until_ms: i64,
) -> Result<Vec<u64>, Error> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let mut builder = QueryBuilder::new("");
    push_claim(
        &mut builder,
        ids,
        node_id,
        claim_token,
        now_ms,
        lock_until_ms,
    );
    let db = db.into();
    let affected = crate::db::execute(&db, builder).await?;
    if affected == ids.len() as u64 {
        return Ok(ids.to_vec());
    }
    // Some rows changed under us (another claim, or our lease lapsed): ask
    // which ones carry our token, by primary key.
    let mut builder = QueryBuilder::new("SELECT id FROM room_outbox WHERE id IN ");
    push_in_list(&mut builder, ids);
    builder.push(" AND claim_token = ").push_bind(claim_token);
    builder.push(" AND status = 'delivering'");
    let rows = crate::db::fetch_all(&db, builder).await?;
    rows.iter()
        .map(|row| row.try_get::<u64, _>("id"))
        .collect::<Result<_, _>>()
        .map_err(Error::from)
}

/// The claiming UPDATE of [`claim`], pushed onto `builder` (public for the
/// EXPLAIN test).
pub fn push_claim<'a>(
    builder: &mut QueryBuilder<'a, MySql>,
    ids: &'a [u64],
    node_id: &'a str,
    claim_token: u64,
    now_ms: i64,
    lock_until_ms: i64,
) {
    builder.push(
        "UPDATE room_outbox o JOIN relay_shard_leases l ON l.shard = o.shard \
         SET o.status = 'delivering', o.lock_until_ms = ",
    );
    builder.push_bind(lock_until_ms);
    builder.push(", o.claim_token = ").push_bind(claim_token);
    builder.push(", o.claimed_by = ").push_bind(node_id);
    builder.push(" WHERE o.id IN ");
    push_in_list(builder, ids);
    builder.push(" AND l.owner = ").push_bind(node_id);
    builder.push(" AND l.lease_until_ms > ").push_bind(now_ms);
    builder.push(" AND ((o.status IN ('pending', 'retryable') AND o.next_retry_at_ms <= ");
    builder.push_bind(now_ms);
    builder
        .push(") OR (o.status = 'delivering' AND o.lock_until_ms < ")
        .push_bind(now_ms);
    builder.push("))");
}

/// Marks claimed rows delivered. The claim token fences the update: a row
/// re-claimed by another relay is left alone. Returns rows updated.
pub async fn mark_delivered(
    db: impl Into<BoundedPool>,
    ids: &[u64],
    claim_token: u64,
    now_ms: i64,
) -> Result<u64, Error> {
    if ids.is_empty() {
        return Ok(0);
    }
    let mut builder = QueryBuilder::new("");
    push_mark_delivered(&mut builder, ids, claim_token, now_ms);
    crate::db::execute(&db.into(), builder).await
}

/// The statement of [`mark_delivered`], pushed onto `builder` (public for
/// the EXPLAIN test).
pub fn push_mark_delivered<'a>(
    builder: &mut QueryBuilder<'a, MySql>,
    ids: &'a [u64],
    claim_token: u64,
    now_ms: i64,
) {
    builder.push("UPDATE room_outbox SET status = 'delivered', delivered_at_ms = ");
    builder.push_bind(now_ms);
    builder.push(", lock_until_ms = 0, last_error = '' WHERE id IN ");
    push_in_list(builder, ids);
    builder.push(" AND claim_token = ").push_bind(claim_token);
    builder.push(" AND status = 'delivering'");
}

/// Returns claimed-but-unpublished rows to `pending` (they queue behind a
/// failed head of their room). Fenced by the claim token.
pub async fn release(
    db: impl Into<BoundedPool>,
    ids: &[u64],
    claim_token: u64,
) -> Result<u64, Error> {
    if ids.is_empty() {
        return Ok(0);
    }
    let mut builder = QueryBuilder::new(
        "UPDATE room_outbox SET status = 'pending', lock_until_ms = 0 WHERE id IN ",
    );
    push_in_list(&mut builder, ids);
    builder.push(" AND claim_token = ").push_bind(claim_token);
    builder.push(" AND status = 'delivering'");
    crate::db::execute(&db.into(), builder).await
}

/// Records a failed attempt: `retryable` due at `next_retry_at_ms`, or
/// `failed` (dead letter) when `dead_letter`. Fenced by the claim token.
/// Returns whether the row was updated.
pub async fn mark_failure(
    db: impl Into<BoundedPool>,
    id: u64,
    claim_token: u64,
    dead_letter: bool,
    next_retry_at_ms: i64,
    error: &str,
) -> Result<bool, Error> {
    let status = failure_status(dead_letter);
    let query = sqlx::query(MARK_FAILURE_SQL)
        .bind(status)
        .bind(next_retry_at_ms)
        .bind(truncate_error(error))
        .bind(id)
        .bind(claim_token);
    Ok(crate::db::execute_query(&db.into(), query).await? == 1)
}

/// A failed attempt of a claimed row (binds: status, next_retry_at_ms,
/// last_error, id, claim_token).
pub const MARK_FAILURE_SQL: &str = "UPDATE room_outbox SET status = ?, retry_count = retry_count + 1, \
     next_retry_at_ms = ?, last_error = ?, lock_until_ms = 0 \
     WHERE id = ? AND claim_token = ? AND status = 'delivering'";

/// Marks published rows delivered without a claim, in one statement: only
/// rows still open, and only where this relay still holds the row's shard in
/// the epoch it published under (`epochs`), so a relay whose shard was taken
/// over marks nothing. Sets `claimed_by` to say who delivered the row.
/// Returns rows updated.
pub async fn mark_delivered_leased(
    db: impl Into<BoundedPool>,
    ids: &[u64],
    node_id: &str,
    epochs: &[(u16, u64)],
    now_ms: i64,
) -> Result<u64, Error> {
    if ids.is_empty() || epochs.is_empty() {
        return Ok(0);
    }
    let mut builder = QueryBuilder::new("");
    push_mark_delivered_leased(&mut builder, ids, node_id, epochs, now_ms);
    crate::db::execute(&db.into(), builder).await
}

/// The statement of [`mark_delivered_leased`], pushed onto `builder`
/// (public for the EXPLAIN test).
pub fn push_mark_delivered_leased<'a>(
    builder: &mut QueryBuilder<'a, MySql>,
    ids: &'a [u64],
    node_id: &'a str,
    epochs: &[(u16, u64)],
    now_ms: i64,
) {
    builder.push(
        "UPDATE room_outbox o JOIN relay_shard_leases l ON l.shard = o.shard \
         SET o.status = 'delivered', o.delivered_at_ms = ",
    );
    builder.push_bind(now_ms);
    builder.push(", o.lock_until_ms = 0, o.last_error = '', o.claimed_by = ");
    builder.push_bind(node_id);
    builder.push(" WHERE o.id IN ");
    push_in_list(builder, ids);
    builder.push(" AND o.status IN ('pending', 'delivering', 'retryable')");
    builder.push(" AND l.owner = ").push_bind(node_id);
    builder.push(" AND (l.shard, l.epoch) IN (");
    let mut separated = builder.separated(", ");
    for (shard, epoch) in epochs {
        separated.push("(");
        separated.push_bind_unseparated(*shard);
        separated.push_unseparated(", ");
        separated.push_bind_unseparated(*epoch);
        separated.push_unseparated(")");
    }
    separated.push_unseparated(")");
}

/// [`mark_failure`] without a claim: fenced by the shard lease's owner and
/// `epoch` instead of a claim token. Returns whether the row was updated.
pub async fn mark_failure_leased(
    db: impl Into<BoundedPool>,
    id: u64,
    node_id: &str,
    epoch: u64,
    dead_letter: bool,
    next_retry_at_ms: i64,
    error: &str,
) -> Result<bool, Error> {
    let query = sqlx::query(MARK_FAILURE_LEASED_SQL)
        .bind(failure_status(dead_letter))
        .bind(next_retry_at_ms)
        .bind(truncate_error(error))
        .bind(node_id)
        .bind(id)
        .bind(node_id)
        .bind(epoch);
    Ok(crate::db::execute_query(&db.into(), query).await? == 1)
}

/// A failed attempt of a row published on the shard lease alone (binds:
/// status, next_retry_at_ms, last_error, claimed_by, id, owner, epoch).
pub const MARK_FAILURE_LEASED_SQL: &str = "UPDATE room_outbox o JOIN relay_shard_leases l ON l.shard = o.shard \
     SET o.status = ?, o.retry_count = o.retry_count + 1, o.next_retry_at_ms = ?, o.last_error = ?, \
     o.lock_until_ms = 0, o.claimed_by = ? \
     WHERE o.id = ? AND o.status IN ('pending', 'delivering', 'retryable') AND l.owner = ? AND l.epoch = ?";

fn failure_status(dead_letter: bool) -> &'static str {
    if dead_letter {
        OutboxStatus::Failed
    } else {
        OutboxStatus::Retryable
    }
    .as_str()
}

/// `last_error` is short by contract (docs/design.md#retries-and-final-failures):
/// never a whole response body.
pub fn truncate_error(error: &str) -> String {
    const LIMIT: usize = 500;
    if error.len() <= LIMIT {
        return error.to_string();
    }
    let mut end = LIMIT;
    while !error.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &error[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_truncated_on_a_char_boundary() {
        let long = "é".repeat(600);
        let short = truncate_error(&long);
        assert!(short.len() <= 503);
        assert!(short.ends_with('…'));
        assert_eq!(truncate_error("boom"), "boom");
    }
}
