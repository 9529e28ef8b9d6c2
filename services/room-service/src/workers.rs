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
        self.tracker.spawn(async move {
            worker.await;
            tracing::info!(worker = name, "worker stopped");
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
