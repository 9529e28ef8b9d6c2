//! The write pipeline of one room, run by its actor on a batch of queued
//! commands (one command when group commit is off):
//!
//! recent-reply cache → apply on a clone → gifts: saga rows + wallet debits →
//! SaveMutation (one transaction: command log + outbox + meta CAS + saga
//! completion) → on success swap in the new state → snapshot when due →
//! Redis projections + relay nudge (best effort) → replies.
//!
//! Idempotency costs no extra round trip in the common case: the unique
//! `command_id` key of the log rejects a reused id inside the transaction, and
//! only then are the batch's ids looked up and the rest re-run. Every debited
//! gift that does not commit is compensated (see `compensate`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use hyapp_api::room::CommandReply;
use room_core::{EventKind, RoomState};

use crate::Error;
use crate::batch::{Pending, stored_answer};
use crate::cell::{Cell, CommandJob, RecentReply, replay_or_conflict};
use crate::deps::Deps;
use crate::gifts::{charge_gifts, compensate};
use crate::mutation::{self, AppliedCommand, Built};
use crate::store::SaveError;
use crate::timing::StageTimings;
use crate::validate::CommandRequest;

/// What the actor should do with the cell after a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CellFate {
    /// The in-memory state matches the database.
    Keep,
    /// The database may differ (stale owner, ambiguous commit): reload before the next command.
    Reload,
}

/// Runs one batch against `cell`. `lease` is the load time to report for it.
pub async fn process_batch(
    deps: &Deps,
    cell: &mut Cell,
    jobs: Vec<CommandJob>,
    lease: Duration,
) -> CellFate {
    let started = Instant::now();
    let now_ms = service_kit::time::now_ms();
    let mut pending: Vec<Pending> = Vec::with_capacity(jobs.len());
    let mut repeats: Vec<CommandJob> = Vec::new();
    for job in jobs {
        let stages = StageTimings {
            lease,
            ..StageTimings::default()
        };
        if let Some(recent) = cell.recent.get(&job.request.command_id) {
            let result = replay_or_conflict(
                &job.request,
                &recent.fingerprint,
                recent.command_name,
                &cell.state.room_id,
                &recent.reply,
            );
            job.answer(
                result,
                StageTimings {
                    idempotency: started.elapsed(),
                    ..stages
                },
            );
        } else if pending
            .iter()
            .any(|other| other.job.request.command_id == job.request.command_id)
        {
            // The same id twice in one batch: answered from the first one's outcome.
            repeats.push(job);
        } else {
            pending.push(Pending {
                job,
                stages,
                debited: false,
            });
        }
    }
    let idempotency = started.elapsed();
    for entry in &mut pending {
        entry.stages.idempotency = idempotency;
    }

    let mut outcomes: Vec<(String, Result<CommandReply, Error>)> = Vec::new();
    let fate = run(deps, cell, &mut pending, &mut outcomes, now_ms).await;
    for repeat in repeats {
        let first = outcomes
            .iter()
            .find(|(command_id, _)| *command_id == repeat.request.command_id);
        let result = match first {
            Some((_, Ok(reply))) => cell
                .recent
                .get(&repeat.request.command_id)
                .map(|recent| {
                    replay_or_conflict(
                        &repeat.request,
                        &recent.fingerprint,
                        recent.command_name,
                        &cell.state.room_id,
                        reply,
                    )
                })
                .unwrap_or_else(|| Ok(reply.clone())),
            Some((_, Err(error))) => Err(error.clone()),
            None => Err(Error::Internal(
                "duplicate command lost its original".into(),
            )),
        };
        repeat.answer(result, StageTimings::default());
    }
    fate
}

/// The apply/charge/save loop. Each `continue` removes at least one command, so it ends.
async fn run(
    deps: &Deps,
    cell: &mut Cell,
    pending: &mut Vec<Pending>,
    outcomes: &mut Vec<(String, Result<CommandReply, Error>)>,
    now_ms: i64,
) -> CellFate {
    let mut answer = |entry: Pending, result: Result<CommandReply, Error>| {
        outcomes.push((entry.job.request.command_id.clone(), result.clone()));
        entry.job.answer(result, entry.stages);
    };
    loop {
        if pending.is_empty() {
            return CellFate::Keep;
        }
        // Apply on a clone; a rejection changes nothing and is answered at once.
        let (applied, final_state, rejected) = apply_all(&cell.state, pending, now_ms);
        if !rejected.is_empty() {
            answer_rejected(deps, pending, rejected, &mut answer).await;
            continue;
        }

        // Gifts: saga row, then the debit of the applied amount; anything
        // refused leaves the batch.
        let removed = charge_gifts(deps, pending, &applied, now_ms).await;
        if !removed.is_empty() {
            for (index, result) in removed.into_iter().rev() {
                answer(pending.remove(index), result);
            }
            continue;
        }

        let applied = Applied {
            commands: applied,
            final_state,
        };
        if let Some(fate) = save(deps, cell, pending, applied, now_ms, &mut answer).await {
            return fate;
        }
    }
}

/// The batch as room-core accepted it: each command's result, and the state
/// after the last.
struct Applied {
    commands: Vec<AppliedCommand>,
    final_state: RoomState,
}

/// Answers the rejected commands. A retry of a command committed before
/// this cell was loaded is usually rejected by the state it produced
/// (already a member...): only the log can tell a replay from a real
/// rejection.
async fn answer_rejected(
    deps: &Deps,
    pending: &mut Vec<Pending>,
    rejected: Vec<(usize, room_core::Rejection)>,
    answer: &mut impl FnMut(Pending, Result<CommandReply, Error>),
) {
    let lookup_started = Instant::now();
    let ids: Vec<&str> = rejected
        .iter()
        .map(|(index, _)| pending[*index].job.request.command_id.as_str())
        .collect();
    let stored = deps.store.lookup_commands(&ids).await;
    let lookup = lookup_started.elapsed();
    for (index, rejection) in rejected.into_iter().rev() {
        let mut entry = pending.remove(index);
        entry.stages.idempotency += lookup;
        if entry.debited {
            compensate(deps, &entry.job.request.command_id, "rejected after debit").await;
        }
        let result = match &stored {
            Ok(stored) => match stored
                .iter()
                .find(|row| row.command_id == entry.job.request.command_id)
            {
                Some(found) => stored_answer(&entry, found),
                None => Err(Error::Rejected(rejection)),
            },
            Err(error) => Err(Error::database(error)),
        };
        answer(entry, result);
    }
}

/// Writes the batch's SaveMutation. Returns the cell's fate once the batch
/// is answered, or `None` when commands found in the log left it and the
/// rest must be applied again.
async fn save(
    deps: &Deps,
    cell: &mut Cell,
    pending: &mut Vec<Pending>,
    applied: Applied,
    now_ms: i64,
    answer: &mut impl FnMut(Pending, Result<CommandReply, Error>),
) -> Option<CellFate> {
    let save_started = Instant::now();
    let requests: Vec<&CommandRequest> = pending.iter().map(|entry| &entry.job.request).collect();
    let built = mutation::build(
        &deps.settings,
        cell,
        &requests,
        &applied.commands,
        &applied.final_state,
        now_ms,
    );
    let saved = deps.store.save_mutation(Arc::clone(&built.mutation)).await;
    let save_time = save_started.elapsed();
    for entry in pending.iter_mut() {
        entry.stages.save_mutation = save_time;
    }
    match saved {
        Ok(()) => {
            committed(
                deps,
                cell,
                pending,
                applied.final_state,
                built,
                now_ms,
                answer,
            )
            .await;
            Some(CellFate::Keep)
        }
        Err(SaveError::DuplicateCommandId) => answer_logged(deps, cell, pending, answer).await,
        Err(SaveError::VersionConflict | SaveError::SagaGone) => {
            let error = Error::StaleOwner {
                room_id: cell.state.room_id.clone(),
            };
            fail_all(deps, pending, error, answer).await;
            Some(CellFate::Reload)
        }
        Err(SaveError::Database { error, commit_sent }) => {
            tracing::warn!(room_id = %cell.state.room_id, %error, commit_sent, "save mutation failed");
            fail_all(deps, pending, Error::database(&error), answer).await;
            // After a failed COMMIT the transaction may have landed: reload to learn the truth.
            Some(if commit_sent {
                CellFate::Reload
            } else {
                CellFate::Keep
            })
        }
    }
}

/// After the commit: swaps in the new state, writes a snapshot when due,
/// projects to Redis (best effort), and answers every command.
async fn committed(
    deps: &Deps,
    cell: &mut Cell,
    pending: &mut Vec<Pending>,
    final_state: RoomState,
    built: Built,
    now_ms: i64,
    answer: &mut impl FnMut(Pending, Result<CommandReply, Error>),
) {
    deps.metrics.batch_size.observe(pending.len() as f64);
    let old_version = cell.state.version;
    cell.state = final_state;
    if cell.app_code.is_empty() {
        cell.app_code = built.mutation.meta.app_code.clone();
    }
    if let Some((version, _)) = &built.mutation.snapshot {
        cell.last_snapshot_version = *version;
    }
    let snapshot = snapshot_if_due(deps, cell, old_version, now_ms).await;
    let projection_started = Instant::now();
    if let Err(error) = deps.redis.project(&built.projection).await {
        deps.metrics.projection_failures.inc();
        tracing::warn!(room_id = %cell.state.room_id, %error, "room projection failed");
    }
    let projection = projection_started.elapsed();
    for (mut entry, (reply, flags)) in pending.drain(..).zip(built.replies) {
        cell.recent.insert(
            entry.job.request.command_id.clone(),
            RecentReply {
                fingerprint: entry.job.request.fingerprint,
                command_name: entry.job.request.command.name(),
                reply: reply.clone(),
            },
        );
        entry.stages.snapshot = snapshot;
        entry.stages.projection = projection;
        entry.stages.activity_async_outbox = flags.0;
        entry.stages.tencent_im_async_outbox = flags.1;
        answer(entry, Ok(reply));
    }
}

/// A command id of the batch is in the log already: answers those commands
/// from it (compensating their debits) and leaves the rest to run again;
/// when the log has none of them, another owner committed meanwhile.
async fn answer_logged(
    deps: &Deps,
    cell: &Cell,
    pending: &mut Vec<Pending>,
    answer: &mut impl FnMut(Pending, Result<CommandReply, Error>),
) -> Option<CellFate> {
    let lookup_started = Instant::now();
    let ids: Vec<&str> = pending
        .iter()
        .map(|entry| entry.job.request.command_id.as_str())
        .collect();
    let stored = match deps.store.lookup_commands(&ids).await {
        Ok(stored) => stored,
        Err(error) => {
            fail_all(deps, pending, Error::database(&error), answer).await;
            return Some(CellFate::Keep);
        }
    };
    if stored.is_empty() {
        // Committed by someone between our insert and the lookup: another owner.
        let error = Error::StaleOwner {
            room_id: cell.state.room_id.clone(),
        };
        fail_all(deps, pending, error, answer).await;
        return Some(CellFate::Reload);
    }
    let lookup = lookup_started.elapsed();
    for index in (0..pending.len()).rev() {
        let Some(found) = stored
            .iter()
            .find(|row| row.command_id == pending[index].job.request.command_id)
        else {
            pending[index].stages.idempotency += lookup;
            continue;
        };
        let mut entry = pending.remove(index);
        entry.stages.idempotency += lookup;
        if entry.debited {
            compensate(
                deps,
                &entry.job.request.command_id,
                "command_id already used",
            )
            .await;
        }
        let result = stored_answer(&entry, found);
        answer(entry, result);
    }
    None
}

/// Fails every pending command, compensating debited gifts first.
async fn fail_all(
    deps: &Deps,
    pending: &mut Vec<Pending>,
    error: Error,
    answer: &mut impl FnMut(Pending, Result<CommandReply, Error>),
) {
    for entry in pending.drain(..) {
        if entry.debited {
            compensate(deps, &entry.job.request.command_id, &error.to_string()).await;
        }
        answer(entry, Err(error.clone()));
    }
}

/// Applies the batch in order on a clone. Returns each accepted command's
/// result, the final state, and the rejected ones (index, rejection).
fn apply_all(
    state: &RoomState,
    pending: &[Pending],
    now_ms: i64,
) -> (
    Vec<AppliedCommand>,
    RoomState,
    Vec<(usize, room_core::Rejection)>,
) {
    let mut working = state.clone();
    let mut applied = Vec::with_capacity(pending.len());
    let mut rejected = Vec::new();
    for (index, entry) in pending.iter().enumerate() {
        match room_core::apply(&working, &entry.job.request.command, now_ms) {
            Ok(result) => {
                let left_on_close = if result
                    .events
                    .iter()
                    .any(|event| matches!(event.kind, EventKind::RoomClosed { .. }))
                {
                    working.members.keys().cloned().collect()
                } else {
                    Vec::new()
                };
                let creation_image = (working.version == 0).then(|| result.state.clone());
                working = result.state;
                applied.push(AppliedCommand {
                    version: working.version,
                    events: result.events,
                    left_on_close,
                    creation_image,
                });
            }
            Err(rejection) => rejected.push((index, rejection)),
        }
    }
    (applied, working, rejected)
}

/// Writes a snapshot when the batch crossed a multiple of `snapshot_every_n`.
async fn snapshot_if_due(deps: &Deps, cell: &mut Cell, old_version: u64, now_ms: i64) -> Duration {
    let every = deps.settings.snapshot_every_n;
    let version = cell.state.version;
    if version / every == old_version / every || version == cell.last_snapshot_version {
        return Duration::ZERO;
    }
    let started = Instant::now();
    let result = match serde_json::to_vec(&cell.state) {
        Ok(state) => deps
            .store
            .write_snapshot(
                &cell.state.room_id,
                version,
                &state,
                now_ms,
                cell.last_snapshot_version,
            )
            .await
            .map_err(|error| error.to_string()),
        Err(error) => Err(error.to_string()),
    };
    match result {
        Ok(()) => cell.last_snapshot_version = version,
        // Best effort: the log still rebuilds the room, only more slowly.
        Err(error) => {
            tracing::warn!(room_id = %cell.state.room_id, version, %error, "snapshot failed")
        }
    }
    started.elapsed()
}
