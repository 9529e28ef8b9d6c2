//! When a verdict counts. After the faults stop, the checker polls (every
//! `poll`) until every rule passes or the settle deadline passes. A first
//! all-pass snapshot is not enough: effects may still be in flight (a late
//! redelivery that duplicates an effect, presence expiries and treasure
//! wake-ups that commit new events after the workload), and a snapshot taken
//! between them can pass by coincidence. So the checker then waits a quiet
//! period and takes a second snapshot, which must pass too and show the same
//! ledger ([`fingerprint`]): nothing committed, published, applied or sent
//! in between. If the ledger moved, the new snapshot starts another quiet
//! period; if a rule failed, polling resumes.
//!
//! The quiet period is a bounded wait, and deliberately so: it does not
//! stand in for waiting on a condition (the polling loop does that), it is
//! the settle check itself — "nothing changes the verdict for this long".
//! The whole check ends by the deadline plus one quiet period.

use super::{Check, verdict};
use crate::observe::Observation;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Rule: the verdict held over a quiet period.
pub const SETTLED: &str = "all rules held again after a quiet period, ledger unchanged";

/// Figures that change whenever anything in the ledger happens.
pub type Fingerprint = BTreeMap<&'static str, i64>;

/// The ledger's moving parts, as counts and sums (not the consumers'
/// duplicate counters or the clock, which move without any effect).
pub fn fingerprint(seen: &Observation) -> Fingerprint {
    let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    let status = |wanted: &str| count(seen.outbox.iter().filter(|e| e.status == wanted).count());
    let sum = |values: &mut dyn Iterator<Item = u64>| {
        values.fold(0i64, |total, value| {
            total.saturating_add(i64::try_from(value).unwrap_or(i64::MAX))
        })
    };
    BTreeMap::from([
        ("command log rows", count(seen.log.len())),
        (
            "room versions",
            sum(&mut seen.rooms.values().map(|(version, _)| *version)),
        ),
        ("outbox rows", count(seen.outbox.len())),
        ("outbox rows delivered", status("delivered")),
        ("outbox rows failed", status("failed")),
        ("consumer_dedup rows", count(seen.dedup.len())),
        (
            "credited value",
            sum(&mut seen.contributions.values().map(|(value, _)| *value)),
        ),
        (
            "broadcasts delivered",
            count(
                seen.broadcasts
                    .iter()
                    .filter(|b| b.1 == "delivered")
                    .count(),
            ),
        ),
        (
            "notices delivered",
            count(seen.notices.iter().filter(|n| n.3 == "delivered").count()),
        ),
        ("notice rows", count(seen.notices.len())),
        ("gift sagas", count(seen.sagas.len())),
        (
            "gift sagas committed",
            count(seen.sagas.iter().filter(|s| s.1 == "committed").count()),
        ),
        ("IM messages", count(seen.im_messages.len())),
        (
            "IM resends absorbed",
            i64::try_from(seen.im_deduplicated).unwrap_or(i64::MAX),
        ),
        ("wallet debited", seen.wallet.debited),
        ("wallet refunded", seen.wallet.refunded),
        (
            "dead letters",
            seen.dead_letter_topics.iter().map(|(_, n)| *n).sum(),
        ),
    ])
}

/// What the checker does after a snapshot.
#[derive(Debug)]
pub enum Next {
    /// Observe again after this long (some rule failed).
    Wait(Duration),
    /// Every rule passed: observe again after this quiet period to confirm.
    Confirm(Duration),
    /// Stop: the [`SETTLED`] verdict, to report with the last snapshot's.
    Done(Check),
}

/// The settle state: the deadline and the all-pass snapshot awaiting its
/// confirmation.
#[derive(Debug)]
pub struct Settler {
    deadline: Instant,
    poll: Duration,
    quiet: Duration,
    candidate: Option<Fingerprint>,
}

impl Settler {
    /// Polls every `poll` until `deadline`; confirms a pass after `quiet`.
    pub fn new(deadline: Instant, poll: Duration, quiet: Duration) -> Self {
        Self {
            deadline,
            poll,
            quiet,
            candidate: None,
        }
    }

    /// Whether the settle deadline has passed at `now`.
    pub fn expired(&self, now: Instant) -> bool {
        now >= self.deadline
    }

    /// An observation failed: any pending confirmation starts over.
    pub fn unobserved(&mut self) -> Duration {
        self.candidate = None;
        self.poll
    }

    /// Takes in one snapshot: whether every rule passed, and its ledger.
    pub fn after(&mut self, passed: bool, ledger: Fingerprint, now: Instant) -> Next {
        let quiet = self.quiet.as_secs_f64();
        if !passed {
            self.candidate = None;
            if self.expired(now) {
                return Next::Done(verdict(
                    SETTLED,
                    format!("{quiet:.0}s quiet period never reached"),
                    vec!["some rule above still failed at the settle deadline".into()],
                ));
            }
            return Next::Wait(self.poll);
        }
        match self.candidate.take() {
            Some(previous) if previous == ledger => Next::Done(verdict(
                SETTLED,
                format!("two all-pass snapshots {quiet:.0}s apart, same ledger"),
                Vec::new(),
            )),
            Some(previous) if self.expired(now) => Next::Done(verdict(
                SETTLED,
                format!("the ledger still moved over the last {quiet:.0}s"),
                vec![format!(
                    "still changing at the settle deadline: {}",
                    changes(&previous, &ledger)
                )],
            )),
            _ => {
                // A first pass, or the ledger moved since the last one: confirm
                // (again) after a quiet period, even past the deadline.
                self.candidate = Some(ledger);
                Next::Confirm(self.quiet)
            }
        }
    }
}

/// `name a → b` for each figure that differs.
pub fn changes(before: &Fingerprint, after: &Fingerprint) -> String {
    let moved: Vec<String> = after
        .iter()
        .filter(|(name, value)| before.get(*name) != Some(*value))
        .map(|(name, value)| {
            format!(
                "{name} {} → {value}",
                before.get(name).copied().unwrap_or_default()
            )
        })
        .collect();
    moved.join(", ")
}
