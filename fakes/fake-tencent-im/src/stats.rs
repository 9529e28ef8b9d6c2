//! The counters `/admin/stats` and [`crate::FakeImHandle::stats`] report: over every request
//! the fake answered, and per group over the messages sent to it.
//!
//! The per-group map keeps one entry per group a message was ever sent to since start or
//! the last reset. It is not pruned: a fake serves one test or one local stack, whose groups
//! are few enough to keep.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Counters over everything the fake answered since start or the last reset.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// Every `/v4/...` request.
    pub requests: u64,
    /// Requests answered with ErrorCode 0 (duplicates and drop-reason answers included).
    pub accepted: u64,
    /// Messages recorded.
    pub messages: u64,
    /// Recorded messages forgotten since because the record limit was reached.
    pub forgotten: u64,
    /// Messages answered OK but not recorded because their `Random` repeated.
    pub deduplicated: u64,
    /// Messages answered OK with an injected `MsgDropReason` and not recorded.
    pub dropped: u64,
    /// Group messages answered OK with `MsgDropReason: "MsgFreqCtrl"` and not recorded
    /// because their group was over its frequency limit (injected drops are in `dropped`).
    pub freq_dropped: u64,
    /// Messages refused with ErrorCode 80002 because their `MsgBody` was too long,
    /// group and one-to-one alike.
    pub oversized: u64,
    /// Requests answered with a non-zero ErrorCode, by code.
    pub rejected: BTreeMap<i64, u64>,
    /// Requests answered with an injected non-2xx HTTP status, by status.
    pub http_faults: BTreeMap<u16, u64>,
    /// Requests per API path (`service/command`).
    pub calls_by_api: BTreeMap<String, u64>,
    /// Per `GroupId`, the messages sent to that existing group.
    pub groups: BTreeMap<String, GroupStats>,
}

/// What became of the messages sent to one group.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupStats {
    /// Messages recorded (duplicates and dropped messages are not).
    pub delivered: u64,
    /// Messages answered `MsgDropReason: "MsgFreqCtrl"` by the frequency limit.
    pub freq_dropped: u64,
    /// Messages refused with ErrorCode 80002 (body too long).
    pub oversized: u64,
    /// The most messages delivered to the group within any one second.
    pub peak_per_second: u64,
}

impl Stats {
    /// Counts a message delivered to `group_id`, the `in_window`-th of its last second.
    pub(crate) fn count_group_delivery(&mut self, group_id: &str, in_window: u64) {
        let group = self.group(group_id);
        group.delivered += 1;
        group.peak_per_second = group.peak_per_second.max(in_window);
    }

    /// Counts a message to `group_id` dropped by the frequency limit.
    pub(crate) fn count_freq_drop(&mut self, group_id: &str) {
        self.freq_dropped += 1;
        self.group(group_id).freq_dropped += 1;
    }

    /// Counts a message refused as too long, sent to `group_id` when it went to a group.
    pub(crate) fn count_oversized(&mut self, group_id: Option<&str>) {
        self.oversized += 1;
        if let Some(group_id) = group_id {
            self.group(group_id).oversized += 1;
        }
    }

    fn group(&mut self, group_id: &str) -> &mut GroupStats {
        self.groups.entry(group_id.to_owned()).or_default()
    }
}
