//! The registry of loaded rooms and the per-room actor.
//!
//! Each room has at most one actor on this node, owning its [`Cell`] and a
//! bounded mailbox: commands of one room are serialised, different rooms run
//! in parallel. The actor acquires the room's Redis lease and rebuilds the
//! cell on first use, renews the lease at a third of its TTL, drains up to
//! `group_commit_max_batch` queued commands into one transaction, and drops
//! the cell (releasing the lease) after `idle_ttl` without traffic. Before
//! a batch it confirms the lease again when this instance's liveness key
//! lapsed since the last confirmation (`liveness`): a room taken over
//! meanwhile is given up without a write.
//!
//! Memory stays bounded: at most `room.max_loaded_rooms` rooms are loaded;
//! a new one evicts the least recently used room idle for at least
//! `room.evict_idle_after`, or is refused (`RESOURCE_EXHAUSTED`) when none
//! is. A room whose cell is still vacant after a batch (a command for a room
//! that does not exist) unloads at once.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use room_core::RoomStatus;

use crate::Error;
use crate::cell::{Cell, CommandJob, Job, rebuild};
use crate::deps::Deps;
use crate::gifts::settle_orphaned_gifts;
use crate::pipeline::{CellFate, process_batch};
use crate::redis::Acquired;

struct Entry {
    sender: mpsc::Sender<Job>,
    generation: u64,
    /// Last time a job was queued: eviction takes the oldest.
    last_used: Instant,
    /// Cancelled when the room is evicted to make room for another.
    evict: CancellationToken,
}

impl Entry {
    /// Idle: nothing queued and no job for at least `min_idle`.
    fn is_idle(&self, now: Instant, min_idle: Duration) -> bool {
        self.sender.capacity() == self.sender.max_capacity()
            && now.duration_since(self.last_used) >= min_idle
    }
}

/// Loaded rooms of this node.
pub struct Cells {
    deps: Arc<Deps>,
    entries: Mutex<HashMap<String, Entry>>,
    next_generation: AtomicU64,
    tracker: TaskTracker,
    stop: CancellationToken,
}

impl std::fmt::Debug for Cells {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cells")
            .field("loaded", &self.loaded())
            .finish_non_exhaustive()
    }
}

impl Cells {
    /// An empty registry.
    pub fn new(deps: Arc<Deps>) -> Arc<Self> {
        Arc::new(Self {
            deps,
            entries: Mutex::new(HashMap::new()),
            next_generation: AtomicU64::new(1),
            tracker: TaskTracker::new(),
            stop: CancellationToken::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.entries
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// Number of loaded rooms.
    pub fn loaded(&self) -> usize {
        self.lock().len()
    }

    /// Whether the room has an actor on this node.
    pub fn is_loaded(&self, room_id: &str) -> bool {
        self.lock().contains_key(room_id)
    }

    /// Queues a job on the room's actor, starting it if needed.
    pub fn submit(self: &Arc<Self>, room_id: &str, job: Job) {
        let mut job = job;
        // Two tries: the first may hit an actor that is just shutting down.
        for _ in 0..2 {
            if self.stop.is_cancelled() {
                job.fail(Error::ShuttingDown);
                return;
            }
            let (sender, generation) = match self.sender(room_id) {
                Ok(found) => found,
                Err(error) => {
                    job.fail(error);
                    return;
                }
            };
            match sender.try_send(job) {
                Ok(()) => return,
                Err(mpsc::error::TrySendError::Full(returned)) => {
                    returned.fail(Error::Overloaded {
                        room_id: room_id.to_owned(),
                    });
                    return;
                }
                Err(mpsc::error::TrySendError::Closed(returned)) => {
                    self.forget(room_id, generation);
                    job = returned;
                }
            }
        }
        job.fail(Error::Overloaded {
            room_id: room_id.to_owned(),
        });
    }

    fn sender(self: &Arc<Self>, room_id: &str) -> Result<(mpsc::Sender<Job>, u64), Error> {
        let now = Instant::now();
        let mut entries = self.lock();
        if let Some(entry) = entries.get_mut(room_id) {
            entry.last_used = now;
            return Ok((entry.sender.clone(), entry.generation));
        }
        let settings = &self.deps.settings;
        if entries.len() >= settings.max_loaded_rooms {
            // Linear, but only at the cap, and cheaper than the rebuild a
            // new room costs anyway.
            let victim = entries
                .iter()
                .filter(|(_, entry)| entry.is_idle(now, settings.evict_idle_after))
                .min_by_key(|(_, entry)| entry.last_used)
                .map(|(victim, _)| victim.clone());
            let Some(victim) = victim else {
                self.deps.metrics.cells_refused.inc();
                return Err(Error::TooManyRooms {
                    limit: settings.max_loaded_rooms,
                });
            };
            if let Some(evicted) = entries.remove(&victim) {
                // Its actor runs what is queued, then releases the lease.
                evicted.evict.cancel();
                self.deps.metrics.cells_evicted.inc();
            }
        }
        let generation = self.next_generation.fetch_add(1, Ordering::Relaxed);
        let (sender, receiver) = mpsc::channel(settings.mailbox_capacity);
        let evict = CancellationToken::new();
        entries.insert(
            room_id.to_owned(),
            Entry {
                sender: sender.clone(),
                generation,
                last_used: now,
                evict: evict.clone(),
            },
        );
        self.deps.metrics.cells_loaded.set(entries.len() as i64);
        drop(entries);
        let actor = Actor {
            cells: Arc::clone(self),
            room_id: room_id.to_owned(),
            generation,
            receiver,
            evict,
        };
        self.tracker.spawn(actor.run());
        Ok((sender, generation))
    }

    /// Removes the room's entry if it still belongs to actor `generation`.
    fn forget(&self, room_id: &str, generation: u64) {
        let mut entries = self.lock();
        if entries
            .get(room_id)
            .is_some_and(|entry| entry.generation == generation)
        {
            entries.remove(room_id);
        }
        self.deps.metrics.cells_loaded.set(entries.len() as i64);
    }

    /// Stops every actor (their queued jobs still run) and waits for them to
    /// release their leases. Called after the gRPC server stopped.
    pub async fn shutdown(&self) {
        self.stop.cancel();
        self.tracker.close();
        self.tracker.wait().await;
    }
}

struct Actor {
    cells: Arc<Cells>,
    room_id: String,
    generation: u64,
    receiver: mpsc::Receiver<Job>,
    evict: CancellationToken,
}

/// The room's lease as the actor last confirmed it.
struct LeaseClock {
    ttl: Duration,
    /// Until when it is ours without asking Redis again.
    valid_until: Instant,
    last_renewed: Instant,
    /// This instance's liveness epoch when it was last confirmed.
    confirmed_epoch: u64,
}

/// Why an actor loop ended.
enum Exit {
    Idle,
    Stopped,
    LeaseLost,
    LoadFailed,
}

impl Actor {
    async fn run(mut self) {
        let exit = self.serve().await;
        self.cells.forget(&self.room_id, self.generation);
        self.receiver.close();
        let error = match exit {
            Exit::Stopped => Error::ShuttingDown,
            _ => Error::StaleOwner {
                room_id: self.room_id.clone(),
            },
        };
        // Jobs that slipped in before the close; their callers may retry.
        while let Ok(job) = self.receiver.try_recv() {
            job.fail(error.clone());
        }
        if !matches!(exit, Exit::LeaseLost | Exit::LoadFailed)
            && let Err(error) = self.cells.deps.redis.release_lease(&self.room_id).await
        {
            tracing::debug!(room_id = %self.room_id, %error, "lease release failed");
        }
    }

    async fn serve(&mut self) -> Exit {
        let deps = Arc::clone(&self.cells.deps);
        let settings = &deps.settings;
        let lease_ttl = Duration::from_millis(deps.redis.lease_ttl_ms().unsigned_abs());
        let renew_every = lease_ttl / 3;
        let mut cell: Option<Cell> = None;
        let mut lease = LeaseClock {
            ttl: lease_ttl,
            valid_until: Instant::now(),
            last_renewed: Instant::now(),
            confirmed_epoch: deps.liveness.standing().epoch,
        };
        let mut idle_deadline = tokio::time::Instant::now() + settings.idle_ttl;
        loop {
            let renew_at = tokio::time::Instant::from_std(lease.last_renewed + renew_every);
            let first = tokio::select! {
                job = self.receiver.recv() => match job {
                    Some(job) => job,
                    // Only after `forget` + `close` below: everything queued has run.
                    None => return Exit::Idle,
                },
                () = tokio::time::sleep_until(renew_at), if cell.is_some() => {
                    if !self.renew(&mut lease, renew_every).await {
                        return Exit::LeaseLost;
                    }
                    continue;
                }
                () = tokio::time::sleep_until(idle_deadline) => {
                    self.unload();
                    idle_deadline = tokio::time::Instant::now() + Duration::from_secs(86_400);
                    continue;
                }
                () = self.evict.cancelled(), if !self.receiver.is_closed() => {
                    // Already unregistered by the eviction.
                    self.receiver.close();
                    continue;
                }
                () = self.cells.stop.cancelled() => return Exit::Stopped,
            };
            if !self.receiver.is_closed() {
                idle_deadline = tokio::time::Instant::now() + settings.idle_ttl;
            }
            let lease_time = match self.ensure_loaded(&mut cell, &mut lease).await {
                Ok(lease_time) => lease_time,
                Err(error) => {
                    self.fail_queued(first, &error);
                    return Exit::LoadFailed;
                }
            };
            let Some(loaded) = cell.as_mut() else {
                continue;
            };
            let fate = self.run_jobs(&deps, loaded, first, lease_time).await;
            if fate == CellFate::Reload {
                cell = None;
            } else if cell
                .as_ref()
                .is_some_and(|loaded| loaded.state.status == RoomStatus::Vacant)
                && !self.receiver.is_closed()
            {
                // Nothing was created: keep no actor and no lease for an id
                // that names no room.
                self.unload();
            }
        }
    }

    /// Renews the room's lease when a third of its TTL passed; `false` once
    /// it is lost (or may have expired while Redis could not be reached).
    async fn renew(&self, lease: &mut LeaseClock, renew_every: Duration) -> bool {
        match self.cells.deps.redis.renew_lease(&self.room_id).await {
            Ok(true) => {
                lease.last_renewed = Instant::now();
                lease.valid_until = lease.last_renewed + lease.ttl;
                true
            }
            Ok(false) => {
                tracing::warn!(room_id = %self.room_id, "room lease lost, dropping cell");
                false
            }
            Err(error) => {
                tracing::warn!(room_id = %self.room_id, %error, "room lease renewal failed");
                // Retry soon; give up once the lease may have expired.
                lease.last_renewed = Instant::now()
                    .checked_sub(renew_every)
                    .unwrap_or_else(Instant::now)
                    + Duration::from_millis(500);
                Instant::now() < lease.valid_until
            }
        }
    }

    /// Loads the cell (lease + rebuild) on first use or after a reload
    /// request, and confirms the lease again when it may have expired or
    /// this instance's liveness key lapsed since it was confirmed (another
    /// instance may have taken the room over meanwhile). Returns the time
    /// that took, or the error the queued jobs fail with (the actor then
    /// stops).
    async fn ensure_loaded(
        &self,
        cell: &mut Option<Cell>,
        lease: &mut LeaseClock,
    ) -> Result<Duration, Error> {
        let standing = self.cells.deps.liveness.standing();
        let needs_load = cell.is_none() || Instant::now() >= lease.valid_until;
        if !needs_load && standing.epoch == lease.confirmed_epoch && standing.held {
            return Ok(Duration::ZERO);
        }
        let started = Instant::now();
        let confirmed = self.confirm(cell).await;
        let lease_time = started.elapsed();
        match confirmed {
            Ok(acquired) => {
                lease.last_renewed = acquired;
                lease.valid_until = acquired + lease.ttl;
                lease.confirmed_epoch = standing.epoch;
                Ok(lease_time)
            }
            // Redis cannot be reached to confirm, and the lease has not
            // expired: nobody can take the room over through that Redis
            // either, so serve on (as through any Redis outage); a partition
            // that cuts off only this instance lets another take over, and
            // the version CAS decides. The next batch tries to confirm again.
            Err(Error::Redis(_)) if !needs_load && cell.is_some() => Ok(lease_time),
            Err(error) => Err(error),
        }
    }

    /// Fails `first` and every job queued behind it with `error`.
    fn fail_queued(&mut self, first: Job, error: &Error) {
        first.fail(error.clone());
        let mut rest = Vec::new();
        while let Ok(job) = self.receiver.try_recv() {
            rest.push(job);
        }
        for job in rest {
            job.fail(error.clone());
        }
    }

    /// Group commit: takes what is already queued behind `first`, up to the
    /// batch limit, and runs it on `loaded` in mailbox order — reads see
    /// the commands queued before them committed.
    async fn run_jobs(
        &mut self,
        deps: &Deps,
        loaded: &mut Cell,
        first: Job,
        lease_time: Duration,
    ) -> CellFate {
        let settings = &deps.settings;
        let limit = if settings.group_commit {
            settings.max_batch
        } else {
            1
        };
        let mut jobs = vec![first];
        while jobs.len() < limit {
            match self.receiver.try_recv() {
                Ok(job) => jobs.push(job),
                Err(_) => break,
            }
        }
        let mut batch: Vec<CommandJob> = Vec::new();
        let mut fate = CellFate::Keep;
        for job in jobs {
            match job {
                Job::Command(command) => batch.push(command),
                Job::Read(read) => {
                    if !batch.is_empty() {
                        fate = process_batch(deps, loaded, std::mem::take(&mut batch), lease_time)
                            .await;
                        if fate == CellFate::Reload {
                            read(Err(self.stale()));
                            continue;
                        }
                    }
                    read(Ok(&loaded.state));
                }
            }
        }
        if batch.is_empty() {
            return fate;
        }
        if fate == CellFate::Reload {
            for job in batch {
                job.answer(Err(self.stale()), Default::default());
            }
            return fate;
        }
        process_batch(deps, loaded, batch, lease_time).await
    }

    fn stale(&self) -> Error {
        Error::StaleOwner {
            room_id: self.room_id.clone(),
        }
    }
    /// Acquires (or confirms) the room's lease and makes `cell` the one to
    /// serve; returns when the lease was confirmed. The cell is kept when
    /// the lease was ours all along, else rebuilt from MySQL — after a
    /// takeover, too, as the holder that lapsed may have written since it
    /// was loaded. A rebuilt room first settles the gifts an earlier holder
    /// left between debit and commit, so a retry of one gets its final
    /// answer at once.
    async fn confirm(&self, cell: &mut Option<Cell>) -> Result<Instant, Error> {
        let deps = &self.cells.deps;
        let acquired = deps.redis.acquire_lease(&self.room_id).await?;
        let confirmed_at = Instant::now();
        if let Acquired::TookOver(from) = &acquired {
            deps.metrics.lease_takeovers.inc();
            tracing::info!(room_id = %self.room_id, from = %from.node_id, "room taken over from a holder whose liveness key lapsed");
            *cell = None;
        }
        if cell.is_none() {
            let settings = &deps.settings;
            let rebuilt = rebuild(
                &deps.store,
                &self.room_id,
                &settings.rules,
                settings.recent_per_room,
            )
            .await?;
            settle_orphaned_gifts(deps, &self.room_id).await;
            *cell = Some(rebuilt);
        }
        Ok(confirmed_at)
    }

    /// Unregisters the room so new jobs start a fresh actor, and closes the
    /// mailbox: what was queued before still runs on this cell, then the
    /// loop ends and the lease is released.
    fn unload(&mut self) {
        self.cells.forget(&self.room_id, self.generation);
        self.receiver.close();
    }
}
