//! Tencent's limits on group and one-to-one messages: the per-group sending frequency and
//! the size of a message body.
//!
//! Tencent Cloud Chat's Use Limits page
//! (<https://www.tencentcloud.com/document/product/1047/34381>) says "A one-to-one or group
//! message must be no longer than 12KB." and "Up to 40 messages can be sent per second per
//! group (regardless of the group type, and this limit applies to each group separately)."
//! Its Audio-Video Group FAQ (<https://www.tencentcloud.com/document/product/1047/38173>)
//! adds that messages over the limit are discarded by the backend, and that a message with
//! `MsgPriority: High` is kept in preference to lower-priority ones.
//!
//! The fake models the frequency limit the strict way: in any sliding one-second window of
//! the fake's own clock, a group receives at most `per_second` delivered messages, and every
//! priority counts against that same number. A message over the limit is discarded whatever
//! its priority: Tencent only promises that `High` is *less likely* to be discarded, and the
//! strict reading is the one a sender's pacing must survive. The caller answers a discarded
//! message with `MsgDropReason: "MsgFreqCtrl"`.
//!
//! Memory: a group's window holds the delivery times of its last second only (at most
//! `per_second` of them while the limit is on), an empty window is dropped when its group is
//! next seen, and past [`SWEEP_ABOVE`] groups every idle window is dropped.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

/// Tencent's limit on messages delivered to one group per second (Use Limits page), the
/// fake's default (`FakeImConfig::group_msg_per_second`).
pub const GROUP_MSG_PER_SECOND: u32 = 40;

/// Tencent's limit on a message body, 12 KB (Use Limits page), the fake's default
/// (`FakeImConfig::max_msg_body_bytes`). The fake measures the `MsgBody` array as
/// received, serialised back to compact JSON.
pub const MAX_MSG_BODY_BYTES: usize = 12_288;

/// The window Tencent counts a group's messages in.
const WINDOW: Duration = Duration::from_secs(1);

/// Past this many tracked groups, the windows of groups idle for a second are dropped.
const SWEEP_ABOVE: usize = 1024;

/// Bytes `msg_body` takes as compact JSON, the measure [`MAX_MSG_BODY_BYTES`] applies to.
pub(crate) fn msg_body_bytes(msg_body: &serde_json::Value) -> usize {
    // Serialising a `Value` cannot fail; an impossible failure counts as too long.
    serde_json::to_vec(msg_body).map_or(usize::MAX, |bytes| bytes.len())
}

/// Every group's deliveries of the last second, and the limit they are held to.
#[derive(Debug, Default)]
pub(crate) struct GroupFrequency {
    per_second: Option<u32>,
    /// Delivery times per group, oldest first, none older than [`WINDOW`] once pruned.
    windows: HashMap<String, VecDeque<Instant>>,
}

impl GroupFrequency {
    /// Holds every group to `per_second` messages (`None` or 0: no limit).
    pub fn new(per_second: Option<u32>) -> Self {
        GroupFrequency {
            per_second: per_second.filter(|n| *n > 0),
            windows: HashMap::new(),
        }
    }

    /// The limit in force.
    pub fn per_second(&self) -> Option<u32> {
        self.per_second
    }

    /// Changes the limit from now on; 0 reads as "no limit", as in the admin JSON call.
    /// Deliveries already in a window keep counting, so lowering the limit takes effect
    /// at once rather than after a fresh second.
    pub fn set_per_second(&mut self, per_second: Option<u32>) {
        self.per_second = per_second.filter(|n| *n > 0);
    }

    /// Whether one more message to `group_id` at `now` stays within the limit. Records
    /// nothing: only a delivered message counts ([`GroupFrequency::record_delivery`]).
    pub fn admits(&mut self, group_id: &str, now: Instant) -> bool {
        let in_window = match self.windows.get_mut(group_id) {
            Some(window) => {
                prune(window, now);
                window.len()
            }
            None => 0,
        };
        if in_window == 0 {
            self.windows.remove(group_id);
        }
        self.per_second
            .is_none_or(|limit| in_window < limit as usize)
    }

    /// Counts a message delivered to `group_id` at `now`; returns how many the group
    /// received in the one-second window ending now, this one included. The largest such
    /// count is the group's busiest second: any window's count is bounded by that of the
    /// window ending at its own last delivery.
    pub fn record_delivery(&mut self, group_id: &str, now: Instant) -> u64 {
        if !self.windows.contains_key(group_id) && self.windows.len() >= SWEEP_ABOVE {
            self.sweep_idle(now);
        }
        let window = self.windows.entry(group_id.to_owned()).or_default();
        prune(window, now);
        window.push_back(now);
        window.len() as u64
    }

    fn sweep_idle(&mut self, now: Instant) {
        self.windows.retain(|_, window| {
            prune(window, now);
            !window.is_empty()
        });
    }

    #[cfg(test)]
    fn tracked_groups(&self) -> usize {
        self.windows.len()
    }
}

/// Forgets the deliveries a second or more before `now`.
fn prune(window: &mut VecDeque<Instant>, now: Instant) {
    while window
        .front()
        .is_some_and(|at| now.saturating_duration_since(*at) >= WINDOW)
    {
        window.pop_front();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deliver(frequency: &mut GroupFrequency, group_id: &str, now: Instant) -> Option<u64> {
        frequency
            .admits(group_id, now)
            .then(|| frequency.record_delivery(group_id, now))
    }

    #[tokio::test(start_paused = true)]
    async fn a_group_gets_at_most_its_limit_in_any_sliding_second() {
        let mut frequency = GroupFrequency::new(Some(3));
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        assert_eq!(deliver(&mut frequency, "g", at(0)), Some(1));
        assert_eq!(deliver(&mut frequency, "g", at(400)), Some(2));
        assert_eq!(deliver(&mut frequency, "g", at(800)), Some(3));
        assert_eq!(
            deliver(&mut frequency, "g", at(999)),
            None,
            "4 within 0..1000"
        );
        assert_eq!(
            deliver(&mut frequency, "g", at(1000)),
            Some(3),
            "the first left the window: 400, 800 and 1000 remain"
        );
        // A fixed window starting at 1000 would admit this one; the sliding one sees
        // 400, 800 and 1000 within the last second.
        assert_eq!(deliver(&mut frequency, "g", at(1300)), None);
        assert_eq!(deliver(&mut frequency, "g", at(1400)), Some(3));
    }

    #[tokio::test(start_paused = true)]
    async fn groups_are_limited_separately() {
        let mut frequency = GroupFrequency::new(Some(1));
        let now = Instant::now();
        assert_eq!(deliver(&mut frequency, "a", now), Some(1));
        assert_eq!(deliver(&mut frequency, "a", now), None);
        assert_eq!(deliver(&mut frequency, "b", now), Some(1));
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_limit_every_message_passes_and_is_still_counted() {
        let mut frequency = GroupFrequency::new(Some(0));
        assert_eq!(frequency.per_second(), None, "0 means no limit");
        let now = Instant::now();
        let counts: Vec<_> = (0..50).map(|_| deliver(&mut frequency, "g", now)).collect();
        assert_eq!(counts.last(), Some(&Some(50)));
        frequency.set_per_second(Some(10));
        assert_eq!(
            deliver(&mut frequency, "g", now + Duration::from_millis(500)),
            None,
            "a lowered limit applies to the deliveries already in the window"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn idle_windows_are_dropped() {
        let mut frequency = GroupFrequency::new(Some(5));
        let start = Instant::now();
        for index in 0..SWEEP_ABOVE {
            frequency.record_delivery(&format!("g{index}"), start);
        }
        assert_eq!(frequency.tracked_groups(), SWEEP_ABOVE);
        assert!(frequency.admits("g0", start + WINDOW));
        assert_eq!(
            frequency.tracked_groups(),
            SWEEP_ABOVE - 1,
            "an empty window goes when its group is next seen"
        );
        frequency.record_delivery("busy", start + WINDOW);
        frequency.record_delivery("new", start + WINDOW);
        assert_eq!(
            frequency.tracked_groups(),
            2,
            "past the bound, only the groups of the last second are kept"
        );
    }

    #[test]
    fn body_size_is_its_compact_json() {
        let body = serde_json::json!([{"MsgType": "TIMTextElem", "MsgContent": {"Text": "é"}}]);
        let compact = r#"[{"MsgContent":{"Text":"é"},"MsgType":"TIMTextElem"}]"#;
        assert_eq!(msg_body_bytes(&body), compact.len());
    }
}
