//! The worker slot every background task runs in (so shutdown can cancel and
//! await them all before the pools close), and the ticker the periodic
//! workers loop on. What the workers do lives elsewhere (the sweeps in
//! `sweeps`, the embedded relay in `embedded_relay`, the consumers in
//! `consumers`): this module names nothing else of the crate, so any of them
//! can take the slot without an import cycle.

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Background tasks that must stop before MySQL and Redis close.
#[derive(Debug, Clone, Default)]
pub struct Workers {
    tracker: TaskTracker,
    token: CancellationToken,
    /// Fired when the grace is spent: each worker's future is dropped where
    /// it waits (a publish to a broker that does not answer, say), so the
    /// pools never close under a worker that is still running.
    abort: CancellationToken,
}

impl Workers {
    /// Spawns a worker; it gets a token cancelled when shutdown reaches the
    /// "cancel workers" step, and must return soon after.
    pub fn spawn<F, Fut>(&self, name: &'static str, make: F)
    where
        F: FnOnce(CancellationToken) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let worker = make(self.token.child_token());
        let abort = self.abort.clone();
        self.tracker.spawn(async move {
            tokio::select! {
                () = worker => tracing::info!(worker = name, "worker stopped"),
                () = abort.cancelled() => {
                    tracing::warn!(worker = name, "worker aborted: it did not stop within the grace period");
                }
            }
        });
    }

    /// Cancels every worker.
    pub fn cancel(&self) {
        self.token.cancel();
    }

    /// Waits for every worker to return.
    pub async fn wait(&self) {
        self.tracker.close();
        self.tracker.wait().await;
    }

    /// Drops every worker still running and waits until they are gone.
    /// Whatever a worker held is released: an outbox row it had claimed stays
    /// `delivering` until its claim expires and is then published again
    /// (at least once, deduplicated by `event_id`).
    pub async fn abort(&self) {
        self.abort.cancel();
        self.wait().await;
    }

    /// Waits up to `grace` for the cancelled workers to stop, then aborts
    /// those still running; false when some had to be aborted.
    pub async fn stop_within(&self, grace: Duration) -> bool {
        if tokio::time::timeout(grace, self.wait()).await.is_ok() {
            return true;
        }
        tracing::warn!(
            ?grace,
            "workers did not stop within the grace period; aborting them"
        );
        self.abort().await;
        false
    }
}

/// Runs `tick` every `interval` (first after one interval) until `token` is cancelled.
pub async fn every<F, Fut>(interval: Duration, token: CancellationToken, mut tick: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = token.cancelled() => return,
            _ = ticker.tick() => {}
        }
        // A tick in progress finishes; the token is checked again before the next.
        tick().await;
    }
}
