//! One partition's offset ledger: which offsets a worker has taken on and
//! not finished, and so how far the group may commit.
//!
//! With one room lane per key (`Handler::PER_KEY_LANES`) a partition's
//! messages finish out of offset order: a quiet room's event is done while a
//! hot room's earlier one still waits for its IM budget. The committed
//! offset must never pass a message that is not done, so it is the lowest
//! offset still outstanding (or one past the highest taken when none is):
//! a crash redelivers from there, and dedup by `event_id` absorbs what was
//! already done beyond it. In partition order the same rule gives what the
//! worker stored before (one past the last message done).

use std::collections::BTreeSet;

/// Offsets taken and not yet finished, plus the highest taken.
#[derive(Debug, Default)]
pub(crate) struct OffsetLedger {
    outstanding: BTreeSet<i64>,
    highest_taken: Option<i64>,
    /// The last commit point handed out, so it only ever moves forward.
    committed: Option<i64>,
}

impl OffsetLedger {
    /// Takes `offset` on; false when it was taken before (a message
    /// re-fetched after a seek), which the caller then skips.
    pub fn take(&mut self, offset: i64) -> bool {
        if self.highest_taken.is_some_and(|highest| offset <= highest) {
            return false;
        }
        self.highest_taken = Some(offset);
        self.outstanding.insert(offset);
        // Consumption started here: a commit point is news only past it.
        self.committed.get_or_insert(offset);
        true
    }

    /// Marks `offsets` finished; returns the new commit point (the next
    /// offset to consume) when it moved forward.
    pub fn finish(&mut self, offsets: impl IntoIterator<Item = i64>) -> Option<i64> {
        for offset in offsets {
            self.outstanding.remove(&offset);
        }
        let point = match self.outstanding.first() {
            Some(lowest) => *lowest,
            None => self.highest_taken? + 1,
        };
        if self.committed.is_some_and(|committed| point <= committed) {
            return None;
        }
        self.committed = Some(point);
        Some(point)
    }

    /// How many offsets are taken and not finished.
    #[cfg(test)]
    pub fn outstanding(&self) -> usize {
        self.outstanding.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_order_finishing_commits_one_past_each() {
        let mut ledger = OffsetLedger::default();
        assert!(ledger.take(10) && ledger.take(11));
        assert_eq!(ledger.finish([10]), Some(11));
        assert_eq!(ledger.finish([11]), Some(12));
        assert_eq!(ledger.outstanding(), 0);
    }

    #[test]
    fn the_commit_point_waits_for_the_lowest_outstanding_offset() {
        let mut ledger = OffsetLedger::default();
        for offset in 5..=8 {
            assert!(ledger.take(offset));
        }
        // A quiet room's 6 and 8 finish while the hot room's 5 and 7 wait.
        assert_eq!(ledger.finish([6, 8]), None, "5 is still outstanding");
        assert_eq!(ledger.finish([5]), Some(7));
        assert_eq!(ledger.finish([7]), Some(9));
    }

    #[test]
    fn offsets_taken_before_are_refused() {
        let mut ledger = OffsetLedger::default();
        assert!(ledger.take(3));
        assert!(!ledger.take(3));
        assert!(!ledger.take(2));
        assert!(ledger.take(4));
        assert_eq!(ledger.outstanding(), 2);
    }

    #[test]
    fn finishing_nothing_new_does_not_move_the_point() {
        let mut ledger = OffsetLedger::default();
        assert_eq!(ledger.finish([]), None, "nothing taken yet");
        assert!(ledger.take(1));
        assert_eq!(ledger.finish([1]), Some(2));
        assert_eq!(ledger.finish([1]), None);
    }
}
