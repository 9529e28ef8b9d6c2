//! Per-partition offset tracking that repairs gaps instead of living with them.
//!
//! Our topics have no transactions and no compaction, so a partition's offsets
//! are dense: a message whose offset jumps past the next expected one means
//! the broker skipped records. Tansu does this whenever a fetch starts inside
//! a record batch (it serves only batches whose *base* offset is at or after
//! the fetch offset), which happens after a partition is resumed from
//! back-pressure or assigned at a committed offset in the middle of a batch.
//!
//! Two symptoms, one repair:
//! - a message arrives whose offset is past the expected one: it is dropped;
//! - nothing arrives although the broker's high watermark is past the
//!   expected offset and the client fetches at or below it (the skipped batch
//!   was the partition's last): the partition is *stalled*.
//!
//! Either way the dispatcher seeks back before the expected offset, so the
//! fetch starts at or before the start of the batch holding it; messages
//! below the expected offset are dropped as duplicates. The first seek goes
//! to the last *known batch start* at or before the expected offset: the
//! first message after any fetch (re)start (assignment, seek, resume) begins
//! a batch, because Tansu serves whole batches from a base offset. Without
//! one, it goes [`INITIAL_LOOKBACK`] offsets back. If the batch still is not
//! reached, the look-back doubles, up to [`MAX_LOOKBACK`] (far above the
//! producer's batch size) or offset 0. A gap that survives that is real
//! (retention deleted the records): the message is dispatched with an error
//! log rather than spinning forever.
//!
//! With a broker that serves fetches from inside a batch (Kafka), none of
//! this triggers: offsets never jump and nothing stalls.

use std::time::Duration;

/// First look-back of a repair, in offsets; doubles on every failed attempt.
const INITIAL_LOOKBACK: i64 = 64;

/// Largest look-back: a record batch holds at most librdkafka's
/// `batch.num.messages` (10,000 by default) records.
const MAX_LOOKBACK: i64 = 1 << 16;

/// How often librdkafka reports fetch positions and high watermarks.
pub(crate) const STATISTICS_INTERVAL: Duration = Duration::from_millis(500);

/// How long a partition fetches behind its high watermark without receiving
/// anything before it counts as stalled: two statistics reports.
pub(crate) const STALL_AFTER: Duration = Duration::from_secs(1);

/// What the dispatcher does with a received message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The next message in order: hand it to the worker.
    Dispatch,
    /// Already dispatched (a repair re-fetches a few): drop it.
    Duplicate,
    /// Messages before this one were skipped: drop it and seek the partition
    /// to `to`.
    Rewind { to: i64, expected: i64 },
    /// The gap survived a seek to offset 0 or the longest look-back: the
    /// records no longer exist. Dispatch, and say so.
    Unrepairable { expected: i64 },
}

/// The dispatcher's offset bookkeeping for one assigned partition.
#[derive(Debug)]
pub(crate) struct OffsetTracker {
    /// The offset the next message must have; unknown until the first
    /// message when the group had no committed offset.
    next_expected: Option<i64>,
    /// Look-back of the repair in progress.
    repair_lookback: Option<i64>,
    /// An offset at or before `next_expected` where a record batch begins.
    known_batch_start: Option<i64>,
    /// The fetch (re)started: the next message begins a batch.
    awaiting_batch_start: bool,
}

impl OffsetTracker {
    /// A tracker for a partition whose consumption starts at `committed`
    /// (the group's committed offset), when known.
    pub(crate) fn starting_at(committed: Option<i64>) -> Self {
        Self {
            next_expected: committed.filter(|offset| *offset >= 0),
            repair_lookback: None,
            known_batch_start: None,
            awaiting_batch_start: true,
        }
    }

    /// The client fetches from a new position (a resumed partition): the
    /// next message begins a batch.
    pub(crate) fn fetch_restarted(&mut self) {
        self.awaiting_batch_start = true;
    }

    /// Whether a repair is in progress.
    #[cfg(test)]
    pub(crate) fn repairing(&self) -> bool {
        self.repair_lookback.is_some()
    }

    /// Classifies the message at `offset` and advances the bookkeeping.
    pub(crate) fn observe(&mut self, offset: i64) -> Verdict {
        if std::mem::take(&mut self.awaiting_batch_start)
            && self.next_expected.is_none_or(|expected| offset <= expected)
        {
            self.known_batch_start = Some(offset);
        }
        let Some(expected) = self.next_expected else {
            self.next_expected = Some(offset + 1);
            return Verdict::Dispatch;
        };
        if offset < expected {
            return Verdict::Duplicate;
        }
        if offset == expected {
            self.next_expected = Some(offset + 1);
            self.repair_lookback = None;
            return Verdict::Dispatch;
        }
        match self.next_lookback(expected) {
            Some(to) => Verdict::Rewind { to, expected },
            None => {
                self.next_expected = Some(offset + 1);
                Verdict::Unrepairable { expected }
            }
        }
    }

    /// The partition is stalled behind the broker's high watermark: the
    /// offset to seek to, or `None` while the start offset is unknown. A
    /// repair that ran out of look-back starts over, since the records exist.
    pub(crate) fn stalled(&mut self) -> Option<i64> {
        let expected = self.next_expected?;
        self.next_lookback(expected).or_else(|| {
            self.repair_lookback = Some(INITIAL_LOOKBACK);
            Some((expected - INITIAL_LOOKBACK).max(0))
        })
    }

    /// The offset the next expected one is still awaited at.
    pub(crate) fn next_expected(&self) -> Option<i64> {
        self.next_expected
    }

    /// Advances the look-back and returns the seek target, or `None` (and
    /// ends the repair) when the last seek went to offset 0 or as far back
    /// as allowed.
    fn next_lookback(&mut self, expected: i64) -> Option<i64> {
        let lookback = match self.repair_lookback {
            None => self
                .known_batch_start
                .map(|start| expected - start)
                .filter(|distance| (0..=MAX_LOOKBACK).contains(distance))
                .unwrap_or(INITIAL_LOOKBACK),
            Some(previous) if expected - previous <= 0 || previous >= MAX_LOOKBACK => {
                self.repair_lookback = None;
                return None;
            }
            Some(previous) => previous.saturating_mul(2).max(INITIAL_LOOKBACK),
        };
        self.repair_lookback = Some(lookback);
        self.awaiting_batch_start = true;
        Some((expected - lookback).max(0))
    }

    /// The seek of a [`Verdict::Rewind`] failed: accept the message after all
    /// (nothing would bring the skipped ones back) and stop repairing.
    pub(crate) fn abandon_repair(&mut self, offset: i64) {
        self.next_expected = Some(offset + 1);
        self.repair_lookback = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Serves a partition the way Tansu does: a fetch from `offset` starts at
    /// the first batch whose base offset is at or after it.
    fn tansu_fetch(batch_bases: &[i64], end: i64, offset: i64) -> Vec<i64> {
        let start = batch_bases
            .iter()
            .copied()
            .find(|base| *base >= offset)
            .unwrap_or(end);
        (start..end).collect()
    }

    /// Drives a tracker through Tansu-style fetches (re-fetching after every
    /// rewind, and after a stall while the high watermark `end` is ahead)
    /// and returns the offsets dispatched. With `pause_every`, the partition
    /// is paused after that many dispatches and resumed where it stopped.
    fn consume_pausing(
        tracker: &mut OffsetTracker,
        batch_bases: &[i64],
        end: i64,
        from: i64,
        pause_every: Option<usize>,
    ) -> Vec<i64> {
        let mut dispatched = Vec::new();
        let mut fetch_from = from;
        let mut seeks = 0;
        'fetch: loop {
            assert!(seeks < 64 + end, "repair does not terminate");
            for offset in tansu_fetch(batch_bases, end, fetch_from) {
                match tracker.observe(offset) {
                    Verdict::Dispatch | Verdict::Unrepairable { .. } => {
                        dispatched.push(offset);
                        if pause_every.is_some_and(|every| dispatched.len() % every == 0) {
                            // librdkafka resumes at the next offset.
                            tracker.fetch_restarted();
                            fetch_from = offset + 1;
                            continue 'fetch;
                        }
                    }
                    Verdict::Duplicate => {}
                    Verdict::Rewind { to, .. } => {
                        seeks += 1;
                        fetch_from = to;
                        continue 'fetch;
                    }
                }
            }
            if tracker
                .next_expected()
                .is_some_and(|expected| expected < end)
                && let Some(to) = tracker.stalled()
            {
                seeks += 1;
                fetch_from = to;
                continue 'fetch;
            }
            return dispatched;
        }
    }

    fn consume(tracker: &mut OffsetTracker, batch_bases: &[i64], end: i64, from: i64) -> Vec<i64> {
        consume_pausing(tracker, batch_bases, end, from, None)
    }

    #[test]
    fn in_order_messages_are_dispatched() {
        let mut tracker = OffsetTracker::starting_at(Some(5));
        assert_eq!(tracker.observe(5), Verdict::Dispatch);
        assert_eq!(tracker.observe(6), Verdict::Dispatch);
        assert_eq!(tracker.observe(6), Verdict::Duplicate);
        assert_eq!(tracker.observe(2), Verdict::Duplicate);
        assert!(!tracker.repairing());
    }

    #[test]
    fn without_a_committed_offset_the_first_message_sets_the_start() {
        let mut tracker = OffsetTracker::starting_at(None);
        assert_eq!(tracker.observe(40), Verdict::Dispatch);
        assert_eq!(tracker.observe(41), Verdict::Dispatch);
        let mut tracker = OffsetTracker::starting_at(Some(-1001));
        assert_eq!(tracker.observe(0), Verdict::Dispatch);
    }

    #[test]
    fn a_gap_rewinds_before_the_expected_offset() {
        let mut tracker = OffsetTracker::starting_at(Some(100));
        assert_eq!(
            tracker.observe(130),
            Verdict::Rewind {
                to: 36,
                expected: 100
            }
        );
        assert!(tracker.repairing());
        // The re-fetch starts before 100: earlier offsets are dropped.
        assert_eq!(tracker.observe(64), Verdict::Duplicate);
        assert_eq!(tracker.observe(100), Verdict::Dispatch);
        assert!(!tracker.repairing());
    }

    #[test]
    fn the_lookback_doubles_until_the_batch_is_reached() {
        let mut tracker = OffsetTracker::starting_at(Some(1000));
        assert_eq!(
            tracker.observe(1200),
            Verdict::Rewind {
                to: 936,
                expected: 1000
            }
        );
        assert_eq!(
            tracker.observe(1200),
            Verdict::Rewind {
                to: 872,
                expected: 1000
            }
        );
        assert_eq!(
            tracker.observe(1200),
            Verdict::Rewind {
                to: 744,
                expected: 1000
            }
        );
    }

    #[test]
    fn a_gap_that_survives_a_seek_to_zero_is_reported_and_passed() {
        let mut tracker = OffsetTracker::starting_at(Some(10));
        assert_eq!(
            tracker.observe(50),
            Verdict::Rewind {
                to: 0,
                expected: 10
            }
        );
        assert_eq!(tracker.observe(50), Verdict::Unrepairable { expected: 10 });
        assert_eq!(tracker.observe(51), Verdict::Dispatch);
        assert!(!tracker.repairing());
    }

    #[test]
    fn the_lookback_stops_growing_at_its_maximum() {
        let mut tracker = OffsetTracker::starting_at(Some(1 << 20));
        let mut seeks = 0;
        while let Verdict::Rewind { .. } = tracker.observe((1 << 20) + 5) {
            seeks += 1;
            assert!(seeks < 20, "no end to the repair");
        }
        // 64, 128, … 65,536: eleven seeks, then the message is passed on.
        assert_eq!(seeks, 11);
    }

    #[test]
    fn a_stalled_partition_is_sought_back_and_starts_over_when_out_of_lookback() {
        assert_eq!(OffsetTracker::starting_at(None).stalled(), None);
        let mut tracker = OffsetTracker::starting_at(Some(100));
        assert_eq!(tracker.stalled(), Some(36));
        assert_eq!(tracker.stalled(), Some(0));
        // Offset 0 reached without result: start over rather than give up.
        assert_eq!(tracker.stalled(), Some(36));
        assert_eq!(tracker.observe(100), Verdict::Dispatch);
        assert!(!tracker.repairing());
    }

    #[test]
    fn abandoning_a_repair_accepts_the_message() {
        let mut tracker = OffsetTracker::starting_at(Some(10));
        assert!(matches!(tracker.observe(20), Verdict::Rewind { .. }));
        tracker.abandon_repair(20);
        assert!(!tracker.repairing());
        assert_eq!(tracker.observe(21), Verdict::Dispatch);
    }

    #[test]
    fn a_start_inside_a_batch_delivers_every_offset_in_order() {
        // Batches of uneven sizes, including ones far larger than the first
        // look-back; resume from every offset of the log.
        let bases = [0, 3, 4, 200, 201, 900, 905, 1100];
        let end = 1200;
        for committed in 0..end {
            let mut tracker = OffsetTracker::starting_at(Some(committed));
            let dispatched = consume(&mut tracker, &bases, end, committed);
            let expected: Vec<i64> = (committed..end).collect();
            assert_eq!(dispatched, expected, "resumed at {committed}");
        }
    }

    #[test]
    fn a_resume_inside_a_batch_seeks_to_the_known_batch_start() {
        let mut tracker = OffsetTracker::starting_at(Some(0));
        for offset in 0..100 {
            assert_eq!(tracker.observe(offset), Verdict::Dispatch);
        }
        // Paused and resumed at 100, inside the batch that starts at 0.
        tracker.fetch_restarted();
        assert_eq!(
            tracker.observe(500),
            Verdict::Rewind {
                to: 0,
                expected: 100
            }
        );
        assert_eq!(tracker.observe(0), Verdict::Duplicate);
        assert_eq!(tracker.observe(100), Verdict::Dispatch);
    }

    #[test]
    fn frequent_pauses_inside_batches_deliver_every_offset_in_order() {
        let bases = [0, 3, 4, 200, 201, 900, 905, 1100];
        for pause_every in [1, 7, 64, 333] {
            let mut tracker = OffsetTracker::starting_at(None);
            let dispatched = consume_pausing(&mut tracker, &bases, 1200, 0, Some(pause_every));
            assert_eq!(
                dispatched,
                (0..1200).collect::<Vec<_>>(),
                "pausing every {pause_every}"
            );
        }
    }

    #[test]
    fn records_deleted_by_retention_are_skipped_once() {
        // The log starts at 500 (retention removed 0..500); the group's
        // committed offset is older.
        let bases = [500, 700];
        let dispatched = consume(&mut OffsetTracker::starting_at(Some(120)), &bases, 800, 120);
        assert_eq!(dispatched, (500..800).collect::<Vec<_>>());
    }
}
