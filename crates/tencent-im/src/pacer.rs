//! Per-group pacing of group messages: never more than Tencent's per-group
//! limit (40 messages per second per group, Use Limits page of Tencent Cloud
//! Chat) in any one-second window, however fast the calls return.
//!
//! A send takes one of the group's `per_second` permits before its request
//! leaves and gives it back **one second after the answer arrived**. Tencent
//! receives a request somewhere between our start and our answer, so with
//! that rule the N-th later send cannot start before the earlier one's
//! answer plus a second: any one-second window of Tencent's clock holds at
//! most `per_second` of our messages, whatever the network latency (a
//! window counted from our start times would not hold under jitter). A
//! dropped send (timeout, cancelled caller) frees its permit a second after
//! the drop. Each waiter sleeps until the earliest permit frees, or, when
//! every permit is held by a send still in flight, until one answers.
//!
//! The pacer is per process: one room's events arrive on one partition, and
//! one consumer instance owns a partition, so one pacer sees every message
//! of a group except during a rebalance (docs/design.md#hot-rooms bounds
//! that case). Idle groups are forgotten, so memory follows the groups
//! active within the last second.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// The window Tencent counts in. A millisecond more than a second absorbs
/// the clocks' rounding.
const WINDOW: Duration = Duration::from_millis(1001);

/// Past this many tracked groups, idle ones are swept on the next acquire.
const SWEEP_ABOVE: usize = 1024;

#[derive(Debug, Default)]
struct GroupWindow {
    /// Sends started and not yet answered (or dropped).
    in_flight: usize,
    /// When each answered send's permit frees, oldest first.
    frees_at: VecDeque<Instant>,
    /// Woken when an in-flight send answers.
    answered: Arc<Notify>,
}

impl GroupWindow {
    fn prune(&mut self, now: Instant) {
        while self.frees_at.front().is_some_and(|at| *at <= now) {
            self.frees_at.pop_front();
        }
    }

    fn held(&self) -> usize {
        self.in_flight + self.frees_at.len()
    }

    fn idle(&self, now: Instant) -> bool {
        self.in_flight == 0 && self.frees_at.back().is_none_or(|at| *at <= now)
    }
}

/// Counters of the pacer, for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PacerStats {
    /// Sends that found the group's budget spent and waited.
    pub waits: u64,
    /// Sends paced in all.
    pub sends: u64,
}

/// Permits per group, shared by every clone of the client.
#[derive(Debug)]
pub struct GroupPacer {
    per_second: usize,
    groups: Mutex<HashMap<String, GroupWindow>>,
    waits: AtomicU64,
    sends: AtomicU64,
}

/// A held permit; dropping it starts the one second before it frees.
#[derive(Debug)]
pub struct Permit {
    pacer: Arc<GroupPacer>,
    group: String,
}

/// What waiting for a permit found.
enum Wait {
    Until(Instant),
    Answer(Arc<Notify>),
}

impl GroupPacer {
    /// A pacer admitting `per_second` messages per group per second (at least 1).
    pub fn new(per_second: u32) -> Arc<Self> {
        Arc::new(GroupPacer {
            per_second: usize::try_from(per_second.max(1)).unwrap_or(usize::MAX),
            groups: Mutex::new(HashMap::new()),
            waits: AtomicU64::new(0),
            sends: AtomicU64::new(0),
        })
    }

    /// The configured messages per group per second.
    pub fn per_second(&self) -> usize {
        self.per_second
    }

    /// Permits of `group` free right now: how many messages could leave at once.
    pub fn available(&self, group: &str) -> usize {
        let now = Instant::now();
        let mut groups = self.lock();
        match groups.get_mut(group) {
            Some(window) => {
                window.prune(now);
                self.per_second.saturating_sub(window.held())
            }
            None => self.per_second,
        }
    }

    /// Waits for a permit of `group`.
    pub async fn acquire(self: &Arc<Self>, group: &str) -> Permit {
        let mut waited = false;
        loop {
            let wait = {
                let now = Instant::now();
                let mut groups = self.lock();
                if groups.len() > SWEEP_ABOVE {
                    groups.retain(|_, window| !window.idle(now));
                }
                let window = groups.entry(group.to_owned()).or_default();
                window.prune(now);
                if window.held() < self.per_second {
                    window.in_flight += 1;
                    self.sends.fetch_add(1, Ordering::Relaxed);
                    if waited {
                        self.waits.fetch_add(1, Ordering::Relaxed);
                    }
                    return Permit {
                        pacer: self.clone(),
                        group: group.to_owned(),
                    };
                }
                match window.frees_at.front() {
                    Some(at) => Wait::Until(*at),
                    None => Wait::Answer(window.answered.clone()),
                }
            };
            waited = true;
            match wait {
                Wait::Until(at) => tokio::time::sleep_until(at).await,
                Wait::Answer(answered) => {
                    // Registered before the re-check, so an answer arriving
                    // in between still wakes this waiter.
                    let notified = answered.notified();
                    tokio::pin!(notified);
                    notified.as_mut().enable();
                    if self.all_in_flight(group) {
                        notified.await;
                    }
                }
            }
        }
    }

    /// Snapshot of the counters.
    pub fn stats(&self) -> PacerStats {
        PacerStats {
            waits: self.waits.load(Ordering::Relaxed),
            sends: self.sends.load(Ordering::Relaxed),
        }
    }

    /// True while every permit of `group` is held by a send not yet answered.
    fn all_in_flight(&self, group: &str) -> bool {
        self.lock()
            .get(group)
            .is_some_and(|window| window.frees_at.is_empty() && window.in_flight >= self.per_second)
    }

    fn release(&self, group: &str) {
        let now = Instant::now();
        let mut groups = self.lock();
        if let Some(window) = groups.get_mut(group) {
            window.in_flight = window.in_flight.saturating_sub(1);
            window.frees_at.push_back(now + WINDOW);
            window.answered.notify_waiters();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, GroupWindow>> {
        // Plain counters behind the lock: a panic elsewhere leaves them usable.
        self.groups
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.pacer.release(&self.group);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_group_gets_its_budget_then_waits_a_second_from_the_answers() {
        let pacer = GroupPacer::new(3);
        let start = Instant::now();
        for _ in 0..3 {
            drop(pacer.acquire("g").await);
        }
        assert_eq!(Instant::now(), start, "the budget passes at once");
        assert_eq!(pacer.available("g"), 0);
        assert_eq!(pacer.available("other"), 3, "groups are independent");
        drop(pacer.acquire("g").await);
        assert_eq!(
            Instant::now() - start,
            WINDOW,
            "the fourth waits for the first to free"
        );
        assert_eq!(pacer.stats(), PacerStats { waits: 1, sends: 4 });
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_answer_holds_its_permit_until_a_second_after_it() {
        let pacer = GroupPacer::new(1);
        let start = Instant::now();
        let slow = pacer.acquire("g").await;
        let waiter = {
            let pacer = pacer.clone();
            tokio::spawn(async move {
                drop(pacer.acquire("g").await);
                Instant::now()
            })
        };
        tokio::time::sleep(Duration::from_millis(700)).await;
        drop(slow);
        let admitted = waiter.await.expect("waiter");
        assert_eq!(
            admitted - start,
            Duration::from_millis(700) + WINDOW,
            "counted from the answer, not the start"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn no_window_of_a_second_holds_more_than_the_budget() {
        let pacer = GroupPacer::new(5);
        let mut starts = Vec::new();
        for _ in 0..23 {
            let permit = pacer.acquire("g").await;
            starts.push(Instant::now());
            // Each send takes 30 ms to answer.
            tokio::time::sleep(Duration::from_millis(30)).await;
            drop(permit);
        }
        for (index, first) in starts.iter().enumerate() {
            let within = starts[index..]
                .iter()
                .take_while(|at| at.duration_since(*first) < Duration::from_secs(1))
                .count();
            assert!(
                within <= 5,
                "{within} sends within a second of send {index}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn idle_groups_are_forgotten() {
        let pacer = GroupPacer::new(1);
        for index in 0..=SWEEP_ABOVE {
            drop(pacer.acquire(&format!("g{index}")).await);
        }
        tokio::time::sleep(WINDOW).await;
        drop(pacer.acquire("last").await);
        assert_eq!(pacer.lock().len(), 1, "only the group just used is kept");
    }
}
