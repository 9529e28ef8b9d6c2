//! The statements of SaveMutation, each written for any number of rooms, so
//! that a room's own transaction and a shared one (`shared_commit`) issue the
//! same SQL: one multi-row statement per table.

use std::sync::Arc;

use sqlx::{MySql, MySqlConnection, QueryBuilder};

use super::{Mutation, NewCommandRow, SaveError, is_duplicate};

/// Every write of `mutations` (one room's, or several rooms' in a shared
/// transaction), one statement per table, inside the caller's transaction.
/// Failures are classified as for a single room; a shared transaction only
/// needs to know that one happened.
pub(super) async fn write_mutations(
    connection: &mut MySqlConnection,
    mutations: &[&Mutation],
) -> Result<(), SaveError> {
    let database = |error| SaveError::Database {
        error: Arc::new(error),
        commit_sent: false,
    };
    let commands: Vec<(&str, &NewCommandRow)> = mutations
        .iter()
        .flat_map(|mutation| {
            let room_id = mutation.room_id.as_str();
            mutation
                .commands
                .iter()
                .map(move |command| (room_id, command))
        })
        .collect();
    insert_commands(connection, &commands)
        .await
        .map_err(|error| {
            if is_duplicate(&error, "uk_command_id") {
                SaveError::DuplicateCommandId
            } else if is_duplicate(&error, "uk_room_version") {
                SaveError::VersionConflict
            } else {
                database(error)
            }
        })?;
    let outbox: Vec<&outbox_schema::NewOutboxRow> = mutations
        .iter()
        .flat_map(|mutation| mutation.outbox.iter())
        .collect();
    outbox_store::insert_outbox_rows(connection, &outbox)
        .await
        .map_err(database)?;
    match write_metas(connection, mutations).await {
        Ok(true) => {}
        Ok(false) => return Err(SaveError::VersionConflict),
        Err(error) if is_duplicate(&error, "PRIMARY") => return Err(SaveError::VersionConflict),
        Err(error) => return Err(database(error)),
    }
    let gifts: Vec<&str> = mutations
        .iter()
        .flat_map(|mutation| mutation.committed_gifts.iter().map(String::as_str))
        .collect();
    let now_ms = mutations.iter().map(|mutation| mutation.now_ms).max();
    if !complete_sagas(connection, &gifts, now_ms.unwrap_or_default())
        .await
        .map_err(database)?
    {
        return Err(SaveError::SagaGone);
    }
    let snapshots: Vec<(&str, u64, &[u8], i64)> = mutations
        .iter()
        .filter_map(|mutation| {
            let (version, state) = mutation.snapshot.as_ref()?;
            Some((
                mutation.room_id.as_str(),
                *version,
                state.as_slice(),
                mutation.now_ms,
            ))
        })
        .collect();
    insert_snapshots(connection, &snapshots)
        .await
        .map_err(database)
}

/// Command log rows as (room, row) pairs.
async fn insert_commands(
    connection: &mut MySqlConnection,
    rows: &[(&str, &NewCommandRow)],
) -> Result<(), sqlx::Error> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut builder = QueryBuilder::<MySql>::new(
        "INSERT INTO room_command_log (command_id, room_id, room_version, command_name, \
         request_fingerprint, command, applied_at_ms, reply) ",
    );
    builder.push_values(rows, |mut row, (room_id, command)| {
        row.push_bind(&command.command_id)
            .push_bind(*room_id)
            .push_bind(command.room_version)
            .push_bind(command.command_name)
            .push_bind(&command.fingerprint[..])
            .push_bind(&command.command)
            .push_bind(command.applied_at_ms)
            .push_bind(&command.reply);
    });
    builder.build().execute(connection).await.map(drop)
}

/// Room meta with the version compare-and-set of every mutation: one INSERT
/// for the new rooms (a duplicate key means someone else created one), one
/// UPDATE ... WHERE version = expected for the rest. `Ok(false)`: a
/// compare-and-set matched fewer rows than rooms.
async fn write_metas(
    connection: &mut MySqlConnection,
    mutations: &[&Mutation],
) -> Result<bool, sqlx::Error> {
    let (created, updated): (Vec<&Mutation>, Vec<&Mutation>) = mutations
        .iter()
        .copied()
        .partition(|mutation| mutation.expected_version == 0);
    if !created.is_empty() {
        let mut builder = QueryBuilder::<MySql>::new(
            "INSERT INTO rooms (room_id, app_code, status, owner_id, title, version, event_seq, heat, \
             created_at_ms, updated_at_ms) ",
        );
        builder.push_values(&created, |mut row, mutation| {
            let meta = &mutation.meta;
            row.push_bind(&mutation.room_id)
                .push_bind(&meta.app_code)
                .push_bind(meta.status)
                .push_bind(&meta.owner_id)
                .push_bind(&meta.title)
                .push_bind(meta.version)
                .push_bind(meta.event_seq)
                .push_bind(meta.heat)
                .push_bind(mutation.now_ms)
                .push_bind(mutation.now_ms);
        });
        builder.build().execute(&mut *connection).await?;
    }
    if updated.is_empty() {
        return Ok(true);
    }
    let mut builder = QueryBuilder::<MySql>::new("UPDATE rooms SET status = ");
    push_case(&mut builder, &updated, |b, m| {
        b.push_bind(m.meta.status);
    });
    builder.push(", owner_id = ");
    push_case(&mut builder, &updated, |b, m| {
        b.push_bind(&m.meta.owner_id);
    });
    builder.push(", title = ");
    push_case(&mut builder, &updated, |b, m| {
        b.push_bind(&m.meta.title);
    });
    builder.push(", version = ");
    push_case(&mut builder, &updated, |b, m| {
        b.push_bind(m.meta.version);
    });
    builder.push(", event_seq = ");
    push_case(&mut builder, &updated, |b, m| {
        b.push_bind(m.meta.event_seq);
    });
    builder.push(", heat = ");
    push_case(&mut builder, &updated, |b, m| {
        b.push_bind(m.meta.heat);
    });
    builder.push(", updated_at_ms = ");
    push_case(&mut builder, &updated, |b, m| {
        b.push_bind(m.now_ms);
    });
    builder.push(" WHERE room_id IN (");
    let mut ids = builder.separated(", ");
    for mutation in &updated {
        ids.push_bind(&mutation.room_id);
    }
    // The compare-and-set: each room's own expected version.
    builder.push(") AND version = ");
    push_case(&mut builder, &updated, |b, m| {
        b.push_bind(m.expected_version);
    });
    let done = builder.build().execute(&mut *connection).await?;
    Ok(done.rows_affected() == updated.len() as u64)
}

/// `CASE room_id WHEN ? THEN <value> ... END`: one value per room.
fn push_case<'a>(
    builder: &mut QueryBuilder<'a, MySql>,
    mutations: &[&'a Mutation],
    mut value: impl FnMut(&mut QueryBuilder<'a, MySql>, &'a Mutation),
) {
    builder.push("CASE room_id");
    for mutation in mutations {
        builder
            .push(" WHEN ")
            .push_bind(&mutation.room_id)
            .push(" THEN ");
        value(builder, mutation);
    }
    builder.push(" END");
}

/// Moves the sagas of committed gifts from `debiting` to `committed`.
/// `Ok(false)`: fewer rows than gifts — the sweep compensated one in the
/// meantime, so committing would keep a refunded gift.
async fn complete_sagas(
    connection: &mut MySqlConnection,
    command_ids: &[&str],
    now_ms: i64,
) -> Result<bool, sqlx::Error> {
    if command_ids.is_empty() {
        return Ok(true);
    }
    let mut builder = QueryBuilder::<MySql>::new(
        "UPDATE room_gift_saga SET status = 'committed', updated_at_ms = ",
    );
    builder.push_bind(now_ms);
    builder.push(" WHERE status = 'debiting' AND command_id IN (");
    let mut separated = builder.separated(", ");
    for id in command_ids {
        separated.push_bind(*id);
    }
    separated.push_unseparated(")");
    let done = builder.build().execute(connection).await?;
    Ok(done.rows_affected() == command_ids.len() as u64)
}

/// Snapshots written inside the transaction: (room, version, state JSON, time).
async fn insert_snapshots(
    connection: &mut MySqlConnection,
    snapshots: &[(&str, u64, &[u8], i64)],
) -> Result<(), sqlx::Error> {
    if snapshots.is_empty() {
        return Ok(());
    }
    let mut builder = QueryBuilder::<MySql>::new(
        "INSERT INTO room_snapshots (room_id, version, state, created_at_ms) ",
    );
    builder.push_values(snapshots, |mut row, (room_id, version, state, now_ms)| {
        row.push_bind(*room_id)
            .push_bind(*version)
            .push_bind(*state)
            .push_bind(*now_ms);
    });
    builder.build().execute(connection).await.map(drop)
}
