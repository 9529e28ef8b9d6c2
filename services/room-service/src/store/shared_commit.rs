//! Cross-room group commit: SaveMutations of different rooms that are ready
//! at the same moment share one transaction.
//!
//! Per-room group commit (the room actor's batch) cannot help when traffic is
//! spread over many rooms: each room has one command in flight, and every
//! command paid a whole transaction (BEGIN, four statements, an fsynced
//! COMMIT). Here a few commit lanes take whatever mutations are queued when
//! they become free — one when the database keeps up, up to
//! `room.shared_commit_max_rooms` when it does not — and write them with one
//! multi-row statement per table, so the cost per command falls as load rises
//! and latency at low load is unchanged.
//!
//! Every room keeps its all-or-nothing SaveMutation: a shared transaction is
//! all or nothing for all its rooms. When any check fails (a reused
//! command_id, a version compare-and-set, a compensated saga, any SQL error
//! before COMMIT) the shared transaction is rolled back and each mutation is
//! committed on its own, so each room gets its own precise answer. A failed
//! COMMIT leaves every room of the transaction unsure, exactly as it leaves a
//! single room unsure: they all reload.

use std::sync::Arc;

use futures::future::join_all;
use prometheus_client::metrics::histogram::Histogram;
use sqlx::MySqlPool;
use tokio::sync::{Mutex, mpsc, oneshot};

use outbox_schema::NewOutboxRow;

use super::{Mutation, NewCommandRow, SaveError, save_alone, sql};

/// A mutation waiting for a lane, with where to send its outcome.
struct Submission {
    mutation: Arc<Mutation>,
    outcome: oneshot::Sender<Result<(), SaveError>>,
}

/// The handle room actors submit to; the lanes run as tasks.
#[derive(Debug, Clone)]
pub struct SharedCommits {
    // Unbounded on purpose: each loaded room has at most one mutation in
    // flight, so the queue is bounded by the number of rooms already.
    queue: mpsc::UnboundedSender<Submission>,
}

impl std::fmt::Debug for Submission {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Submission")
            .field("room_id", &self.mutation.room_id)
            .finish()
    }
}

impl SharedCommits {
    /// Starts `lanes` commit lanes on `pool`, each committing at most
    /// `max_rooms` mutations per transaction. `rooms_per_commit` observes the
    /// size of every transaction. The lanes stop when every handle is dropped.
    pub fn start(
        pool: MySqlPool,
        lanes: usize,
        max_rooms: usize,
        rooms_per_commit: Histogram,
    ) -> Self {
        let (queue, receiver) = mpsc::unbounded_channel();
        let receiver = Arc::new(Mutex::new(receiver));
        for _ in 0..lanes.max(1) {
            tokio::spawn(run_lane(
                pool.clone(),
                Arc::clone(&receiver),
                max_rooms.max(1),
                rooms_per_commit.clone(),
            ));
        }
        Self { queue }
    }

    /// Commits `mutation`, alone or with other rooms' mutations.
    pub async fn save(&self, mutation: Arc<Mutation>) -> Result<(), SaveError> {
        let (outcome, answer) = oneshot::channel();
        let lanes_gone = || SaveError::Database {
            error: Arc::new(sqlx::Error::PoolClosed),
            commit_sent: false,
        };
        self.queue
            .send(Submission { mutation, outcome })
            .map_err(|_| lanes_gone())?;
        // A lane that took the submission always answers it (even when its
        // transaction fails); a dropped sender means the runtime is stopping.
        answer.await.unwrap_or_else(|_| Err(lanes_gone()))
    }
}

async fn run_lane(
    pool: MySqlPool,
    receiver: Arc<Mutex<mpsc::UnboundedReceiver<Submission>>>,
    max_rooms: usize,
    rooms_per_commit: Histogram,
) {
    loop {
        let batch = {
            // One lane at a time waits for work; the others wait for this
            // lock, so a free lane takes everything queued since the last one.
            let mut receiver = receiver.lock().await;
            let Some(first) = receiver.recv().await else {
                return;
            };
            let mut batch = vec![first];
            while batch.len() < max_rooms {
                match receiver.try_recv() {
                    Ok(next) => batch.push(next),
                    Err(_) => break,
                }
            }
            batch
        };
        rooms_per_commit.observe(batch.len() as f64);
        commit(&pool, batch).await;
    }
}

/// Commits one lane's batch and answers every submission in it.
async fn commit(pool: &MySqlPool, batch: Vec<Submission>) {
    let (mutations, outcomes): (Vec<Arc<Mutation>>, Vec<_>) = batch
        .into_iter()
        .map(|submission| (submission.mutation, submission.outcome))
        .unzip();
    let results = save_batch(pool, &mutations).await;
    for (outcome, result) in outcomes.into_iter().zip(results) {
        let _ = outcome.send(result);
    }
}

/// Commits `mutations` (of different rooms) in one shared transaction; when
/// that is rolled back, each on its own. Returns each mutation's outcome, in
/// order.
pub async fn save_batch(
    pool: &MySqlPool,
    mutations: &[Arc<Mutation>],
) -> Vec<Result<(), SaveError>> {
    if let [mutation] = mutations {
        return vec![save_alone(pool, mutation).await];
    }
    let shared: Vec<&Mutation> = mutations.iter().map(|mutation| &**mutation).collect();
    match save_together(pool, &shared).await {
        Together::Committed => mutations.iter().map(|_| Ok(())).collect(),
        Together::CommitFailed(error) => mutations
            .iter()
            .map(|_| {
                Err(SaveError::Database {
                    error: Arc::clone(&error),
                    commit_sent: true,
                })
            })
            .collect(),
        // Nothing was written: each room on its own, for its own answer.
        Together::RolledBack => {
            join_all(mutations.iter().map(|mutation| save_alone(pool, mutation))).await
        }
    }
}

/// How a shared transaction ended.
enum Together {
    Committed,
    /// COMMIT itself failed: whether it landed is unknown.
    CommitFailed(Arc<sqlx::Error>),
    /// A check or statement failed before COMMIT; nothing was written.
    RolledBack,
}

/// All of `mutations` in one transaction, one statement per table. Any failed
/// check rolls the whole transaction back (dropping it sends ROLLBACK).
async fn save_together(pool: &MySqlPool, mutations: &[&Mutation]) -> Together {
    let Ok(mut transaction) = pool.begin().await else {
        return Together::RolledBack;
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
    if sql::insert_commands(&mut transaction, &commands)
        .await
        .is_err()
    {
        return Together::RolledBack;
    }
    let outbox: Vec<&NewOutboxRow> = mutations
        .iter()
        .flat_map(|mutation| mutation.outbox.iter())
        .collect();
    if outbox_relay::insert_outbox_rows(&mut transaction, &outbox)
        .await
        .is_err()
    {
        return Together::RolledBack;
    }
    if !matches!(
        sql::write_metas(&mut transaction, mutations).await,
        Ok(true)
    ) {
        return Together::RolledBack;
    }
    let gifts: Vec<&str> = mutations
        .iter()
        .flat_map(|mutation| mutation.committed_gifts.iter().map(String::as_str))
        .collect();
    let now_ms = mutations.iter().map(|mutation| mutation.now_ms).max();
    if !matches!(
        sql::complete_sagas(&mut transaction, &gifts, now_ms.unwrap_or_default()).await,
        Ok(true)
    ) {
        return Together::RolledBack;
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
    if sql::insert_snapshots(&mut transaction, &snapshots)
        .await
        .is_err()
    {
        return Together::RolledBack;
    }
    match transaction.commit().await {
        Ok(()) => Together::Committed,
        Err(error) => Together::CommitFailed(Arc::new(error)),
    }
}
