//! The `room_gift_saga` local message table (docs/design.md#gift-saga). A row is written
//! (`debiting`) before the wallet debit, set to `committed` inside SaveMutation,
//! or moved `compensating` → `compensated` around a refund. The move to
//! `compensating` is a conditional UPDATE, which is what makes compensation and
//! the room commit mutually exclusive. Each such claim counts one refund
//! attempt; a saga whose attempts reach the budget and still fail ends
//! `failed`, which no statement here moves out of again.

use std::sync::Arc;

use service_kit::db::IdText;
use service_kit::db::statement::BoundedPool;
use sqlx::{MySqlConnection, Row};

use super::{Store, is_duplicate};

/// Saga statuses as stored.
pub mod status {
    /// Row written, debit requested (outcome possibly unknown).
    pub const DEBITING: &str = "debiting";
    /// Debit known to have succeeded (written by older versions and tests; treated like `debiting`).
    pub const DEBITED: &str = "debited";
    /// Room commit done.
    pub const COMMITTED: &str = "committed";
    /// Refund in progress.
    pub const COMPENSATING: &str = "compensating";
    /// Refunded.
    pub const COMPENSATED: &str = "compensated";
    /// Terminal: the refund budget ran out; debited and not refunded, left to an operator.
    pub const FAILED: &str = "failed";
}

/// `last_error` of a saga failed without any refund error on record (its
/// last refund failed in the pipeline, which logs it, or never ran: a crash
/// right after the claim).
pub const EXHAUSTED_NOTE: &str = "refund attempts exhausted; no refund error recorded";

/// A saga row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SagaRow {
    /// The SendGift command_id (also the wallet debit key).
    pub command_id: String,
    /// Room.
    pub room_id: String,
    /// Paying user.
    pub sender_id: String,
    /// Amount debited.
    pub amount: u64,
    /// Current status.
    pub status: String,
    /// Refund calls made (or about to be made), one per claim for compensation.
    pub refund_attempts: u32,
}

/// A saga to start.
#[derive(Debug, Clone)]
pub struct NewSaga {
    /// The SendGift command_id.
    pub command_id: String,
    /// Room.
    pub room_id: String,
    /// Paying user.
    pub sender_id: String,
    /// Amount to debit.
    pub amount: u64,
}

/// Outcome of starting a saga.
#[derive(Debug)]
pub enum SagaStart {
    /// Row written.
    Started,
    /// A saga with this command_id already exists.
    Exists(SagaRow),
}

impl Store {
    /// Writes `debiting` rows for a batch of gifts — in a transaction shared
    /// with other rooms when shared commits are on (see `shared_commit`).
    pub async fn start_sagas(
        &self,
        sagas: &[NewSaga],
        now_ms: i64,
    ) -> Result<Vec<SagaStart>, Arc<sqlx::Error>> {
        match &self.shared {
            Some(shared) => shared.start_sagas(sagas.to_vec(), now_ms).await,
            None => start_sagas_alone(&self.db, sagas, now_ms).await,
        }
    }

    /// Removes a saga whose debit the wallet refused (nothing happened, nothing stays written).
    pub async fn delete_saga(&self, command_id: &str) -> Result<(), sqlx::Error> {
        let query =
            sqlx::query("DELETE FROM room_gift_saga WHERE command_id = ? AND status = 'debiting'")
                .bind(command_id);
        self.execute(query).await.map(drop)
    }

    /// One saga row.
    pub async fn saga(&self, command_id: &str) -> Result<Option<SagaRow>, sqlx::Error> {
        self.db
            .run(|connection, _| Box::pin(saga_by_id(connection, command_id)))
            .await
    }

    /// Claims a saga for compensation: moves it to `compensating` unless the
    /// room commit got there first. With `stale_before`, only rows untouched
    /// since then are claimed (the sweep must not race a live pipeline).
    /// Returns whether this caller now owns the refund; a successful claim
    /// counts one refund attempt, since its owner calls the wallet next.
    pub async fn claim_compensation(
        &self,
        command_id: &str,
        now_ms: i64,
        stale_before: Option<i64>,
    ) -> Result<bool, sqlx::Error> {
        let query = sqlx::query(
            "UPDATE room_gift_saga SET status = 'compensating', \
             refund_attempts = refund_attempts + 1, updated_at_ms = ? \
             WHERE command_id = ? AND status IN ('debiting', 'debited', 'compensating') \
             AND updated_at_ms < ?",
        )
        .bind(now_ms)
        .bind(command_id)
        .bind(stale_before.unwrap_or(i64::MAX));
        Ok(self.execute(query).await? == 1)
    }

    /// Records a finished refund.
    pub async fn mark_compensated(
        &self,
        command_id: &str,
        now_ms: i64,
        note: &str,
    ) -> Result<(), sqlx::Error> {
        let note: String = note.chars().take(500).collect();
        let query = sqlx::query(
            "UPDATE room_gift_saga SET status = 'compensated', last_error = ?, updated_at_ms = ? \
             WHERE command_id = ? AND status = 'compensating'",
        )
        .bind(note)
        .bind(now_ms)
        .bind(command_id);
        self.execute(query).await.map(drop)
    }

    /// Records a failed refund of a claimed saga that still has attempts left:
    /// the wallet's error, and the time, from which the sweep waits
    /// `saga.stuck_after` before it claims the saga again.
    pub async fn record_refund_failure(
        &self,
        command_id: &str,
        now_ms: i64,
        error: &str,
    ) -> Result<(), sqlx::Error> {
        let error: String = error.chars().take(500).collect();
        let query = sqlx::query(
            "UPDATE room_gift_saga SET last_error = ?, updated_at_ms = ? \
             WHERE command_id = ? AND status = 'compensating'",
        )
        .bind(error)
        .bind(now_ms)
        .bind(command_id);
        self.execute(query).await.map(drop)
    }

    /// Moves a claimed saga whose refund budget is spent (`refund_attempts`
    /// at least `max_refund_attempts`) to the terminal `failed`. `error` is
    /// the refund failure that spent the budget; without one (the budget was
    /// spent before, e.g. by a crash after a claim) the stored `last_error`
    /// stays, or [`EXHAUSTED_NOTE`] when there is none. With `stale_before`, only
    /// a row untouched since then moves (nobody is refunding it right now).
    /// Returns whether the saga became failed.
    pub async fn fail_saga(
        &self,
        command_id: &str,
        now_ms: i64,
        max_refund_attempts: u32,
        stale_before: Option<i64>,
        error: Option<&str>,
    ) -> Result<bool, sqlx::Error> {
        let error: Option<String> = error.map(|error| error.chars().take(500).collect());
        let query = sqlx::query(
            "UPDATE room_gift_saga SET status = 'failed', \
             last_error = COALESCE(?, NULLIF(last_error, ''), ?), updated_at_ms = ? \
             WHERE command_id = ? AND status = 'compensating' AND refund_attempts >= ? \
             AND updated_at_ms < ?",
        )
        .bind(error)
        .bind(EXHAUSTED_NOTE)
        .bind(now_ms)
        .bind(command_id)
        .bind(max_refund_attempts)
        .bind(stale_before.unwrap_or(i64::MAX));
        Ok(self.execute(query).await? == 1)
    }

    /// How many sagas are `failed` (one range of `idx_sweep`): each waits for
    /// an operator's manual refund.
    pub async fn count_failed_sagas(&self) -> Result<i64, sqlx::Error> {
        self.count(sqlx::query_scalar(
            "SELECT COUNT(*) FROM room_gift_saga WHERE status = 'failed'",
        ))
        .await
    }

    /// How many sagas created before `stale_before` are still between debit
    /// and commit/refund. By creation, not by last update: a refund that just
    /// failed stamps `updated_at_ms`, and such a saga is exactly what must
    /// stay counted. A range read of idx_sweep's unsettled statuses, as many
    /// rows as there are unsettled sagas.
    pub async fn count_unsettled_sagas(&self, stale_before: i64) -> Result<i64, sqlx::Error> {
        let query = sqlx::query_scalar(
            "SELECT COUNT(*) FROM room_gift_saga \
             WHERE status IN ('debiting', 'debited', 'compensating') AND created_at_ms < ?",
        )
        .bind(stale_before);
        self.count(query).await
    }

    /// The room's sagas between debit and commit/refund that a refund may
    /// still be tried for (`compensating` ones only below the budget): at
    /// room load, those were left by an earlier holder. A range read of
    /// idx_sweep's unsettled statuses, filtered by room.
    pub async fn unsettled_sagas_of_room(
        &self,
        room_id: &str,
        max_refund_attempts: u32,
        limit: u32,
    ) -> Result<Vec<SagaRow>, sqlx::Error> {
        let query = sqlx::query(
            "SELECT command_id, room_id, sender_id, amount, status, refund_attempts \
             FROM room_gift_saga WHERE status IN ('debiting', 'debited', 'compensating') \
             AND room_id = ? AND (status <> 'compensating' OR refund_attempts < ?) \
             ORDER BY updated_at_ms LIMIT ?",
        )
        .bind(room_id)
        .bind(max_refund_attempts)
        .bind(limit);
        let rows = self.fetch_all(query).await?;
        rows.iter().map(saga_row).collect()
    }

    /// Sagas left between debit and commit/refund for longer than the stuck
    /// threshold (`failed` ones are terminal and never returned).
    pub async fn stuck_sagas(
        &self,
        stale_before: i64,
        limit: u32,
    ) -> Result<Vec<SagaRow>, sqlx::Error> {
        let query = sqlx::query(
            "SELECT command_id, room_id, sender_id, amount, status, refund_attempts \
             FROM room_gift_saga WHERE status IN ('debiting', 'debited', 'compensating') AND updated_at_ms < ? \
             ORDER BY updated_at_ms LIMIT ?",
        )
        .bind(stale_before)
        .bind(limit);
        let rows = self.fetch_all(query).await?;
        rows.iter().map(saga_row).collect()
    }
}

/// The multi-row INSERT of `debiting` saga rows, each with its own time.
pub(super) fn insert_sagas<'a>(
    sagas: &'a [(&'a NewSaga, i64)],
) -> sqlx::QueryBuilder<'a, sqlx::MySql> {
    let mut builder = sqlx::QueryBuilder::new(
        "INSERT INTO room_gift_saga (command_id, room_id, sender_id, amount, status, \
         created_at_ms, updated_at_ms) ",
    );
    builder.push_values(sagas, |mut row, (saga, now_ms)| {
        row.push_bind(&saga.command_id)
            .push_bind(&saga.room_id)
            .push_bind(&saga.sender_id)
            .push_bind(saga.amount)
            .push_bind(status::DEBITING)
            .push_bind(*now_ms)
            .push_bind(*now_ms);
    });
    builder
}

/// Writes the `debiting` rows of a batch of gifts with one statement in its
/// own transaction; when one of them already exists, falls back to row by
/// row to tell which. One unit of `mysql.statement_timeout`.
pub(super) async fn start_sagas_alone(
    db: &BoundedPool,
    sagas: &[NewSaga],
    now_ms: i64,
) -> Result<Vec<SagaStart>, Arc<sqlx::Error>> {
    db.run(|connection, _| Box::pin(start_sagas_on(connection, sagas, now_ms)))
        .await
        .map_err(Arc::new)
}

async fn start_sagas_on(
    connection: &mut MySqlConnection,
    sagas: &[NewSaga],
    now_ms: i64,
) -> Result<Vec<SagaStart>, sqlx::Error> {
    if sagas.len() > 1 {
        let rows: Vec<(&NewSaga, i64)> = sagas.iter().map(|saga| (saga, now_ms)).collect();
        match insert_sagas(&rows).build().execute(&mut *connection).await {
            Ok(_) => return Ok(sagas.iter().map(|_| SagaStart::Started).collect()),
            Err(error) if is_duplicate(&error, "PRIMARY") => {}
            Err(error) => return Err(error),
        }
    }
    let mut starts = Vec::with_capacity(sagas.len());
    for saga in sagas {
        starts.push(start_saga(&mut *connection, saga, now_ms).await?);
    }
    Ok(starts)
}

/// Writes one `debiting` row, or reports the saga already there.
async fn start_saga(
    connection: &mut MySqlConnection,
    saga: &NewSaga,
    now_ms: i64,
) -> Result<SagaStart, sqlx::Error> {
    let inserted = insert_sagas(&[(saga, now_ms)])
        .build()
        .execute(&mut *connection)
        .await;
    match inserted {
        Ok(_) => Ok(SagaStart::Started),
        Err(error) if is_duplicate(&error, "PRIMARY") => {
            match saga_by_id(connection, &saga.command_id).await? {
                Some(row) => Ok(SagaStart::Exists(row)),
                // Deleted between the two statements (a rejected debit); the caller retries.
                None => Err(error),
            }
        }
        Err(error) => Err(error),
    }
}

async fn saga_by_id(
    connection: &mut MySqlConnection,
    command_id: &str,
) -> Result<Option<SagaRow>, sqlx::Error> {
    let row = sqlx::query(
        "SELECT command_id, room_id, sender_id, amount, status, refund_attempts \
         FROM room_gift_saga WHERE command_id = ?",
    )
    .bind(command_id)
    .fetch_optional(connection)
    .await?;
    row.map(|row| saga_row(&row)).transpose()
}

fn saga_row(row: &sqlx::mysql::MySqlRow) -> Result<SagaRow, sqlx::Error> {
    Ok(SagaRow {
        command_id: row.try_get::<IdText, _>("command_id")?.into(),
        room_id: row.try_get::<IdText, _>("room_id")?.into(),
        sender_id: row.try_get::<IdText, _>("sender_id")?.into(),
        amount: row.try_get("amount")?,
        status: row.try_get("status")?,
        refund_attempts: row.try_get("refund_attempts")?,
    })
}
