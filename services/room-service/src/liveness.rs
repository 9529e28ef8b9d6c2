//! This instance's liveness key (docs/design.md#fast-takeover): a key in
//! Redis, renewed several times a second, whose lapse tells every other
//! instance that this one is gone — in about `redis.liveness_ttl` (1 s by
//! default) instead of the room leases' TTL. The lease scripts (`redis`)
//! take a room over from a holder whose key has lapsed.
//!
//! The same key fences this instance itself: a room actor may only write
//! while the key is known to be held. When a renewal finds that the key had
//! lapsed (this process was paused, or Redis was unreachable or stalled for
//! longer than the TTL), the lapse epoch moves on and every actor confirms
//! its lease in Redis again before its next batch; one whose room was taken
//! over meanwhile gives it up without writing. The version compare-and-set
//! stays the last fence for a write already on its way.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::redis::Redis;

/// How often the key is renewed, as a fraction of its TTL: four chances per
/// TTL, so one slow round trip does not let it lapse.
const RENEWALS_PER_TTL: u32 = 4;

/// What an actor checks before a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Standing {
    /// Moves on each time the key lapsed; a lease confirmed under an older
    /// epoch must be confirmed again.
    pub epoch: u64,
    /// Whether the key is known to be held right now.
    pub held: bool,
}

#[derive(Debug, Default)]
struct State {
    /// When the key lapses unless renewed: the last successful renewal's
    /// send time plus the TTL (Redis counted from no earlier than that).
    held_until: Option<Instant>,
    epoch: u64,
}

/// This instance's liveness key and what is known of it locally.
#[derive(Debug)]
pub struct Liveness {
    ttl: Duration,
    state: Mutex<State>,
}

impl Liveness {
    /// Liveness with keys of `ttl`; `Duration::ZERO` turns fast takeover off
    /// (a holder is then gone only when its lease expires).
    pub fn new(ttl: Duration) -> Arc<Self> {
        Arc::new(Self {
            ttl,
            state: Mutex::new(State::default()),
        })
    }

    /// Whether liveness keys are in use.
    pub fn enabled(&self) -> bool {
        !self.ttl.is_zero()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// The current lapse epoch and whether the key is held now. With fast
    /// takeover off, always held under epoch 0.
    pub fn standing(&self) -> Standing {
        if !self.enabled() {
            return Standing {
                epoch: 0,
                held: true,
            };
        }
        let state = self.lock();
        Standing {
            epoch: state.epoch,
            held: state.held_until.is_some_and(|until| Instant::now() < until),
        }
    }

    /// Records a renewal sent at `sent` that succeeded; `continued` says
    /// whether Redis still had our key. Returns whether it had lapsed.
    fn renewed(&self, sent: Instant, continued: bool) -> bool {
        let mut state = self.lock();
        let lapsed_here = state.held_until.is_none_or(|until| sent >= until);
        let lapsed = !continued || lapsed_here;
        if lapsed {
            state.epoch += 1;
        }
        state.held_until = Some(sent + self.ttl);
        lapsed
    }

    /// Renews the key once; `Err` when Redis did not answer within half the
    /// TTL (the key may lapse before the next attempt).
    pub async fn renew_once(&self, redis: &Redis) -> Result<bool, crate::Error> {
        let sent = Instant::now();
        let continued = tokio::time::timeout(self.ttl / 2, redis.renew_liveness(self.ttl))
            .await
            .map_err(|_| crate::Error::Redis("liveness renewal timed out".into()))??;
        Ok(self.renewed(sent, continued))
    }

    /// Renews the key every TTL/4 until `stop`, then deletes it (a graceful
    /// stop has released its leases already, so nothing is left to take over).
    pub async fn run(self: Arc<Self>, redis: Redis, metrics: Metrics, stop: CancellationToken) {
        if !self.enabled() {
            return;
        }
        let every = self.ttl / RENEWALS_PER_TTL;
        let mut ticker = tokio::time::interval(every);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                _ = ticker.tick() => {}
            }
            match self.renew_once(&redis).await {
                Ok(false) => {}
                Ok(true) => {
                    metrics.liveness_lapses.inc();
                    tracing::warn!(
                        "this instance's liveness key had lapsed; every room lease is confirmed again before its next write"
                    );
                }
                Err(error) => {
                    metrics.liveness_renewal_failures.inc();
                    tracing::warn!(%error, "liveness renewal failed");
                }
            }
        }
        if let Err(error) = redis.drop_liveness().await {
            tracing::debug!(%error, "liveness key removal failed; it lapses by itself");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_means_always_held_and_never_lapsing() {
        let liveness = Liveness::new(Duration::ZERO);
        assert!(!liveness.enabled());
        assert_eq!(
            liveness.standing(),
            Standing {
                epoch: 0,
                held: true
            }
        );
    }

    #[test]
    fn the_first_renewal_and_every_lapse_move_the_epoch() {
        let liveness = Liveness::new(Duration::from_secs(1));
        assert!(!liveness.standing().held, "not held before any renewal");
        let start = Instant::now();
        assert!(liveness.renewed(start, false), "a new key is a lapse");
        let first = liveness.standing();
        assert!(first.held);
        // In time, and Redis still had it: the same epoch.
        assert!(!liveness.renewed(start + Duration::from_millis(250), true));
        assert_eq!(liveness.standing().epoch, first.epoch);
        // Redis lost it (expired during a stall, or a failover).
        assert!(liveness.renewed(start + Duration::from_millis(500), false));
        assert_eq!(liveness.standing().epoch, first.epoch + 1);
        // Sent after our own deadline (this process was paused): a lapse
        // even if Redis answers that the key is there.
        assert!(liveness.renewed(start + Duration::from_secs(3), true));
        assert_eq!(liveness.standing().epoch, first.epoch + 2);
    }
}
