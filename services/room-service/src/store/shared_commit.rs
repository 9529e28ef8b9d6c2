//! Cross-room group commit: the writes of different rooms that are ready at
//! the same moment — SaveMutations and the `debiting` saga rows written before
//! wallet debits — share one transaction.
//!
//! Per-room group commit (the room actor's batch) cannot help when traffic is
//! spread over many rooms: each room has one command in flight, and every
//! command paid whole transactions (BEGIN, a few statements, an fsynced
//! COMMIT; a gift two of them). Here a few commit lanes take whatever work is
//! queued when they become free — one item when the database keeps up, up to
//! `room.shared_commit_max_rooms` when it does not — and write it with one
//! multi-row statement per table, so the cost per command falls as load rises
//! and latency at low load is unchanged.
//!
//! Every item keeps its own all-or-nothing transaction semantics: a shared
//! transaction is all or nothing for all its items. When any check fails (a
//! reused command_id or saga, a version compare-and-set, a compensated saga,
//! any SQL error before COMMIT) the shared transaction is rolled back and each
//! item is written on its own, so each room gets its own precise answer. A
//! failed COMMIT leaves every item of the transaction unsure, exactly as it
//! leaves a single room's: mutations reload, saga starts fail (a saga row that
//! did land without a debit is refunded as "debit not found" by the sweep).
//!
//! Every transaction runs through `mysql.statement_timeout`. A shared one
//! cut off before COMMIT committed nothing and is not retried room by room
//! (the database is not answering; each room fails with `commit_sent:
//! false`); one cut off after COMMIT was sent is a failed COMMIT.

use std::sync::Arc;

use futures::future::join_all;
use prometheus_client::metrics::histogram::Histogram;
use service_kit::db::statement::{BoundedPool, is_timed_out};
use sqlx::{Connection, MySqlConnection, MySqlPool};
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::{Mutex, mpsc, oneshot};

use super::saga::{NewSaga, SagaStart, insert_sagas, start_sagas_alone};
use super::{Mutation, SaveError, save_alone, sql};

/// One room's write for a lane.
#[derive(Debug, Clone)]
pub enum Work {
    /// A SaveMutation.
    Save(Arc<Mutation>),
    /// The `debiting` rows of a batch's gifts, stamped with the time.
    StartSagas(Arc<[NewSaga]>, i64),
}

/// How one [`Work`] ended.
#[derive(Debug)]
pub enum Done {
    /// Outcome of a [`Work::Save`].
    Saved(Result<(), SaveError>),
    /// Outcome of a [`Work::StartSagas`], one start per saga.
    Started(Result<Vec<SagaStart>, Arc<sqlx::Error>>),
}

/// Work waiting for a lane, with where to send how it ended.
struct Submission {
    work: Work,
    done: oneshot::Sender<Done>,
}

/// The handle room actors submit to; the lanes run as tasks.
#[derive(Debug, Clone)]
pub struct SharedCommits {
    // Unbounded on purpose: each loaded room has at most one write in
    // flight, so the queue is bounded by the number of rooms already.
    queue: mpsc::UnboundedSender<Submission>,
}

impl std::fmt::Debug for Submission {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.work.fmt(formatter)
    }
}

impl SharedCommits {
    /// Starts `lanes` commit lanes on `pool` (a bare `MySqlPool` gets the
    /// default statement timeout), each committing the work of at
    /// most `max_rooms` rooms per transaction. `rooms_per_commit` observes the
    /// size of every transaction. The lanes stop when every handle is dropped.
    pub fn start(
        pool: impl Into<BoundedPool>,
        lanes: usize,
        max_rooms: usize,
        rooms_per_commit: Histogram,
    ) -> Self {
        let pool = pool.into();
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

    /// Commits `mutation`, alone or with other rooms' writes.
    pub async fn save(&self, mutation: Arc<Mutation>) -> Result<(), SaveError> {
        match self.submit(Work::Save(mutation)).await {
            Some(Done::Saved(result)) => result,
            _ => Err(SaveError::Database {
                error: lanes_gone(),
                commit_sent: false,
            }),
        }
    }

    /// Writes the `debiting` rows of `sagas`, alone or with other rooms' writes.
    pub async fn start_sagas(
        &self,
        sagas: Vec<NewSaga>,
        now_ms: i64,
    ) -> Result<Vec<SagaStart>, Arc<sqlx::Error>> {
        match self.submit(Work::StartSagas(sagas.into(), now_ms)).await {
            Some(Done::Started(result)) => result,
            _ => Err(lanes_gone()),
        }
    }

    async fn submit(&self, work: Work) -> Option<Done> {
        let (done, answer) = oneshot::channel();
        self.queue.send(Submission { work, done }).ok()?;
        // A lane that took the submission always answers it (even when its
        // transaction fails); a dropped sender means the runtime is stopping.
        answer.await.ok()
    }
}

fn lanes_gone() -> Arc<sqlx::Error> {
    Arc::new(sqlx::Error::PoolClosed)
}

async fn run_lane(
    pool: BoundedPool,
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
        let (work, done): (Vec<Work>, Vec<_>) = batch
            .into_iter()
            .map(|submission| (submission.work, submission.done))
            .unzip();
        let started = std::time::Instant::now();
        let results = commit_batch_within(&pool, &work).await;
        // Where commit time goes; `RUST_LOG=room_service::store=debug` shows it.
        tracing::debug!(
            rooms = work.len(),
            commit_ms = started.elapsed().as_secs_f64() * 1e3,
            "shared commit"
        );
        for (done, result) in done.into_iter().zip(results) {
            let _ = done.send(result);
        }
    }
}

/// [`commit_batch_within`] with the default statement timeout.
pub async fn commit_batch(pool: &MySqlPool, work: &[Work]) -> Vec<Done> {
    commit_batch_within(&BoundedPool::from(pool.clone()), work).await
}

/// Writes `work` (of different rooms) in one shared transaction; when that
/// is rolled back, each item on its own. Returns how each ended, in order.
pub async fn commit_batch_within(pool: &BoundedPool, work: &[Work]) -> Vec<Done> {
    if work.len() > 1 {
        let failed = |error: &Arc<sqlx::Error>, commit_sent| {
            let failure = |item: &Work| match item {
                Work::Save(_) => Done::Saved(Err(SaveError::Database {
                    error: Arc::clone(error),
                    commit_sent,
                })),
                Work::StartSagas(..) => Done::Started(Err(Arc::clone(error))),
            };
            work.iter().map(failure).collect()
        };
        match commit_together(pool, work).await {
            Together::Committed => return work.iter().map(committed).collect(),
            Together::CommitFailed(error) => return failed(&error, true),
            Together::TimedOut(error) => return failed(&error, false),
            // Nothing was written: each item on its own, for its own answer.
            Together::RolledBack => {}
        }
    }
    join_all(work.iter().map(|item| commit_alone(pool, item))).await
}

fn committed(work: &Work) -> Done {
    match work {
        Work::Save(_) => Done::Saved(Ok(())),
        Work::StartSagas(sagas, _) => {
            Done::Started(Ok(sagas.iter().map(|_| SagaStart::Started).collect()))
        }
    }
}

async fn commit_alone(pool: &BoundedPool, work: &Work) -> Done {
    match work {
        Work::Save(mutation) => Done::Saved(save_alone(pool, mutation).await),
        Work::StartSagas(sagas, now_ms) => {
            Done::Started(start_sagas_alone(pool, sagas, *now_ms).await)
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
    /// The statement timeout cut the transaction off before COMMIT was
    /// sent: nothing was written, and the database is not answering.
    TimedOut(Arc<sqlx::Error>),
}

/// All of `work` in one transaction, one statement per table, within the
/// statement timeout. Any failed check rolls the whole transaction back
/// (dropping it sends ROLLBACK).
async fn commit_together(pool: &BoundedPool, work: &[Work]) -> Together {
    let commit_sent = AtomicBool::new(false);
    let sent = &commit_sent;
    let outcome: Result<Together, sqlx::Error> = pool
        .run(|connection, _| {
            Box::pin(async move { Ok(write_together(connection, work, sent).await) })
        })
        .await;
    match outcome {
        Ok(together) => together,
        Err(error) if sent.load(Ordering::SeqCst) => Together::CommitFailed(Arc::new(error)),
        Err(error) if is_timed_out(&error) => Together::TimedOut(Arc::new(error)),
        // No connection within the acquire timeout: nothing was written.
        Err(_) => Together::RolledBack,
    }
}

/// [`commit_together`]'s transaction on `connection`; `sent` is set just
/// before COMMIT goes out.
async fn write_together(
    connection: &mut MySqlConnection,
    work: &[Work],
    sent: &AtomicBool,
) -> Together {
    let mutations: Vec<&Mutation> = work
        .iter()
        .filter_map(|item| match item {
            Work::Save(mutation) => Some(&**mutation),
            Work::StartSagas(..) => None,
        })
        .collect();
    let sagas: Vec<(&NewSaga, i64)> = work
        .iter()
        .filter_map(|item| match item {
            Work::StartSagas(rows, now_ms) => Some(rows.iter().map(move |saga| (saga, *now_ms))),
            Work::Save(_) => None,
        })
        .flatten()
        .collect();
    let Ok(mut transaction) = connection.begin().await else {
        return Together::RolledBack;
    };
    if !sagas.is_empty()
        && insert_sagas(&sagas)
            .build()
            .execute(&mut *transaction)
            .await
            .is_err()
    {
        return Together::RolledBack;
    }
    if !mutations.is_empty()
        && sql::write_mutations(&mut transaction, &mutations)
            .await
            .is_err()
    {
        return Together::RolledBack;
    }
    sent.store(true, Ordering::SeqCst);
    match transaction.commit().await {
        Ok(()) => Together::Committed,
        Err(error) => Together::CommitFailed(Arc::new(error)),
    }
}
