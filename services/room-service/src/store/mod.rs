//! The MySQL repository: loading a room (meta, newest snapshot, command log
//! tail), SaveMutation (command log + outbox + room meta compare-and-set + saga
//! completion in ONE transaction), snapshots, command lookups for idempotency,
//! and the saga table (`saga`). SQL error codes are classified here, once.
//!
//! The command path's statements — the loads, the command lookups, the
//! snapshot writes and SaveMutation, alone or through the shared commit
//! lanes — run through `mysql.statement_timeout`
//! ([`service_kit::db::statement`]): a stalled database fails the command
//! (`UNAVAILABLE`) instead of holding it until TCP gives up.

pub mod saga;
mod shared_commit;
mod sql;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use outbox_schema::NewOutboxRow;
use service_kit::db::IdText;
use service_kit::db::statement::BoundedPool;
use sqlx::mysql::{MySqlArguments, MySqlRow};
use sqlx::query::{Query, QueryScalar};
use sqlx::{Connection, MySql, MySqlPool, Row};

pub use shared_commit::{Done, SharedCommits, Work, commit_batch, commit_batch_within};

/// MySQL/MariaDB `ER_DUP_ENTRY`.
const ER_DUP_ENTRY: u16 = 1062;

/// The `rooms` row of a room.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoomMeta {
    /// App code the room was created under.
    pub app_code: String,
    /// Committed room version.
    pub version: u64,
}

/// A command log row, as needed to answer a reused command_id.
#[derive(Debug, Clone)]
pub struct StoredCommand {
    /// The id.
    pub command_id: String,
    /// Room it was applied to.
    pub room_id: String,
    /// Command name.
    pub command_name: String,
    /// Request fingerprint.
    pub fingerprint: Vec<u8>,
    /// Encoded `CommandReply` (with `replayed=false`).
    pub reply: Vec<u8>,
}

/// A command log row to replay.
#[derive(Debug, Clone)]
pub struct LoggedCommand {
    /// Version the command produced.
    pub room_version: u64,
    /// Serialized room_core command (JSON).
    pub command: Vec<u8>,
    /// The `now_ms` it was applied with.
    pub applied_at_ms: i64,
}

/// One command log row to write.
#[derive(Debug, Clone)]
pub struct NewCommandRow {
    /// Idempotency key.
    pub command_id: String,
    /// Version after the command.
    pub room_version: u64,
    /// Command name.
    pub command_name: &'static str,
    /// Request fingerprint.
    pub fingerprint: [u8; 32],
    /// Serialized room_core command (JSON).
    pub command: Vec<u8>,
    /// `now_ms` given to apply.
    pub applied_at_ms: i64,
    /// Encoded `CommandReply`.
    pub reply: Vec<u8>,
}

/// The room meta after a mutation.
#[derive(Debug, Clone)]
pub struct RoomMetaUpdate {
    /// App code.
    pub app_code: String,
    /// `open` / `closed`.
    pub status: &'static str,
    /// Owner.
    pub owner_id: String,
    /// Title.
    pub title: String,
    /// New version.
    pub version: u64,
    /// New event sequence.
    pub event_seq: u64,
    /// Current heat.
    pub heat: u64,
}

/// Everything one SaveMutation commits atomically.
#[derive(Debug, Clone)]
pub struct Mutation {
    /// Room.
    pub room_id: String,
    /// Version the cell was at before the batch (0 = the room row does not exist yet).
    pub expected_version: u64,
    /// Meta after the batch.
    pub meta: RoomMetaUpdate,
    /// Commit time.
    pub now_ms: i64,
    /// Command log rows, in version order.
    pub commands: Vec<NewCommandRow>,
    /// Outbox rows, in commit order.
    pub outbox: Vec<NewOutboxRow>,
    /// SendGift sagas completed by this commit.
    pub committed_gifts: Vec<String>,
    /// A snapshot to write inside the transaction (the creation image, so replay
    /// never depends on the rules in today's config): (version, state JSON).
    pub snapshot: Option<(u64, Vec<u8>)>,
}

/// Why SaveMutation did not commit.
#[derive(Debug)]
pub enum SaveError {
    /// A command_id of the batch is already in the log.
    DuplicateCommandId,
    /// The version compare-and-set failed: another owner wrote the room.
    VersionConflict,
    /// A gift's saga was compensated (by the sweep) before the commit.
    SagaGone,
    /// MySQL failed. `commit_sent` is true when the failure came from COMMIT
    /// itself, so whether the transaction committed is unknown.
    Database {
        /// The driver error (shared by every room of a failed shared commit).
        error: Arc<sqlx::Error>,
        /// Whether COMMIT had been sent.
        commit_sent: bool,
    },
}

/// True when `error` is a duplicate-key violation of the named unique key.
pub fn is_duplicate(error: &sqlx::Error, key: &str) -> bool {
    match error {
        sqlx::Error::Database(db) => {
            db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
                .is_some_and(|mysql| mysql.number() == ER_DUP_ENTRY)
                && db.message().contains(key)
        }
        _ => false,
    }
}

/// The repository.
#[derive(Debug, Clone)]
pub struct Store {
    db: BoundedPool,
    /// Cross-room group commit; `None` commits each room's batch on its own.
    shared: Option<SharedCommits>,
}

impl Store {
    /// Wraps a pool (a bare `MySqlPool` gets the default statement
    /// timeout); every SaveMutation is its own transaction.
    pub fn new(db: impl Into<BoundedPool>) -> Self {
        Self {
            db: db.into(),
            shared: None,
        }
    }

    /// Sends SaveMutations through `shared` commit lanes.
    pub fn with_shared_commits(mut self, shared: SharedCommits) -> Self {
        self.shared = Some(shared);
        self
    }

    /// The pool (for shutdown and tests).
    pub fn pool(&self) -> &MySqlPool {
        self.db.pool()
    }

    /// The pool with its `mysql.statement_timeout`, for the in-process
    /// consumers' statements.
    pub fn bounded_pool(&self) -> &BoundedPool {
        &self.db
    }

    /// The room's meta row, if the room was ever created.
    pub async fn room_meta(&self, room_id: &str) -> Result<Option<RoomMeta>, sqlx::Error> {
        let row = self
            .db
            .run(|connection, _| {
                Box::pin(
                    sqlx::query("SELECT app_code, version FROM rooms WHERE room_id = ?")
                        .bind(room_id)
                        .fetch_optional(connection),
                )
            })
            .await?;
        row.map(|row| {
            Ok(RoomMeta {
                app_code: row.try_get::<IdText, _>("app_code")?.into(),
                version: row.try_get("version")?,
            })
        })
        .transpose()
    }

    /// The newest snapshot at or below `max_version`: (version, state JSON).
    pub async fn latest_snapshot(
        &self,
        room_id: &str,
        max_version: u64,
    ) -> Result<Option<(u64, Vec<u8>)>, sqlx::Error> {
        let row = self
            .db
            .run(|connection, _| {
                Box::pin(
                    sqlx::query(
                        "SELECT version, state FROM room_snapshots \
                         WHERE room_id = ? AND version <= ? ORDER BY version DESC LIMIT 1",
                    )
                    .bind(room_id)
                    .bind(max_version)
                    .fetch_optional(connection),
                )
            })
            .await?;
        row.map(|row| Ok((row.try_get("version")?, row.try_get("state")?)))
            .transpose()
    }

    /// Command log rows after `version`, in version order.
    pub async fn commands_after(
        &self,
        room_id: &str,
        version: u64,
    ) -> Result<Vec<LoggedCommand>, sqlx::Error> {
        let rows = self
            .db
            .run(|connection, _| {
                Box::pin(
                    sqlx::query(
                        "SELECT room_version, command, applied_at_ms FROM room_command_log \
                         WHERE room_id = ? AND room_version > ? ORDER BY room_version",
                    )
                    .bind(room_id)
                    .bind(version)
                    .fetch_all(connection),
                )
            })
            .await?;
        rows.into_iter()
            .map(|row| {
                Ok(LoggedCommand {
                    room_version: row.try_get("room_version")?,
                    command: row.try_get("command")?,
                    applied_at_ms: row.try_get("applied_at_ms")?,
                })
            })
            .collect()
    }

    /// Stored commands for these ids (whatever room they belong to).
    pub async fn lookup_commands(&self, ids: &[&str]) -> Result<Vec<StoredCommand>, sqlx::Error> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let rows = self
            .db
            .run(|connection, _| {
                Box::pin(async move {
                    let mut builder = sqlx::QueryBuilder::new(
                        "SELECT command_id, room_id, command_name, request_fingerprint, reply \
                         FROM room_command_log WHERE command_id IN (",
                    );
                    let mut separated = builder.separated(", ");
                    for id in ids {
                        separated.push_bind(*id);
                    }
                    separated.push_unseparated(")");
                    builder.build().fetch_all(connection).await
                })
            })
            .await?;
        rows.into_iter()
            .map(|row| {
                Ok(StoredCommand {
                    command_id: row.try_get::<IdText, _>("command_id")?.into(),
                    room_id: row.try_get::<IdText, _>("room_id")?.into(),
                    command_name: row.try_get("command_name")?,
                    fingerprint: row.try_get("request_fingerprint")?,
                    reply: row.try_get("reply")?,
                })
            })
            .collect()
    }

    /// SaveMutation: one transaction, all or nothing — shared with other
    /// rooms' mutations when shared commits are on (see `shared_commit`).
    pub async fn save_mutation(&self, mutation: Arc<Mutation>) -> Result<(), SaveError> {
        match &self.shared {
            Some(shared) => shared.save(mutation).await,
            None => save_alone(&self.db, &mutation).await,
        }
    }

    /// Writes a periodic snapshot and prunes those older than `keep_from`.
    pub async fn write_snapshot(
        &self,
        room_id: &str,
        version: u64,
        state: &[u8],
        now_ms: i64,
        keep_from: u64,
    ) -> Result<(), sqlx::Error> {
        self.db
            .run(|connection, _| {
                Box::pin(async move {
                    sqlx::query(
                        "INSERT IGNORE INTO room_snapshots (room_id, version, state, created_at_ms) \
                         VALUES (?, ?, ?, ?)",
                    )
                    .bind(room_id)
                    .bind(version)
                    .bind(state)
                    .bind(now_ms)
                    .execute(&mut *connection)
                    .await?;
                    sqlx::query("DELETE FROM room_snapshots WHERE room_id = ? AND version < ?")
                        .bind(room_id)
                        .bind(keep_from)
                        .execute(&mut *connection)
                        .await?;
                    Ok(())
                })
            })
            .await
    }
}

/// One statement within the statement timeout (the saga table's).
impl Store {
    /// Rows affected by `query`.
    async fn execute(&self, query: Query<'_, MySql, MySqlArguments>) -> Result<u64, sqlx::Error> {
        self.db
            .run(|connection, _| {
                Box::pin(async move { Ok(query.execute(connection).await?.rows_affected()) })
            })
            .await
    }

    /// Every row of `query`.
    async fn fetch_all(
        &self,
        query: Query<'_, MySql, MySqlArguments>,
    ) -> Result<Vec<MySqlRow>, sqlx::Error> {
        self.db
            .run(|connection, _| Box::pin(query.fetch_all(connection)))
            .await
    }

    /// The count `query` selects.
    async fn count(
        &self,
        query: QueryScalar<'_, MySql, i64, MySqlArguments>,
    ) -> Result<i64, sqlx::Error> {
        self.db
            .run(|connection, _| Box::pin(query.fetch_one(connection)))
            .await
    }
}

/// SaveMutation of one room in its own transaction, every failure
/// classified. A statement timeout after COMMIT was sent is
/// `commit_sent: true` like any other failed COMMIT: it may have landed.
pub(crate) async fn save_alone(db: &BoundedPool, mutation: &Mutation) -> Result<(), SaveError> {
    let commit_sent = AtomicBool::new(false);
    let sent = &commit_sent;
    let saved = db
        .run(|connection, _| {
            Box::pin(async move {
                let mut transaction = connection.begin().await.map_err(SaveError::from)?;
                sql::write_mutations(&mut transaction, &[mutation]).await?;
                sent.store(true, Ordering::SeqCst);
                transaction
                    .commit()
                    .await
                    .map_err(|error| SaveError::Database {
                        error: Arc::new(error),
                        commit_sent: true,
                    })
            })
        })
        .await;
    match saved {
        Err(SaveError::Database { error, .. }) if commit_sent.load(Ordering::SeqCst) => {
            Err(SaveError::Database {
                error,
                commit_sent: true,
            })
        }
        other => other,
    }
}

/// A failure before COMMIT (acquiring a connection, BEGIN, a statement
/// timeout): nothing was committed.
impl From<sqlx::Error> for SaveError {
    fn from(error: sqlx::Error) -> Self {
        SaveError::Database {
            error: Arc::new(error),
            commit_sent: false,
        }
    }
}
