//! Tencent's per-group message limit: at most `Expectations::im_group_limit`
//! (40) messages a group receives in any one second (docs/design.md#hot-rooms).
//!
//! The rule reads the messages the fake IM recorded, with the time it took
//! each, and slides a one-second window over every group: a window starts at
//! each message, `[t, t + 1000)` ms, and holds the messages of that group
//! received in it. Every window of a group holds no more than the one
//! starting at its own first message, so the busiest window starting at a
//! message is the busiest of all. It also fails when the fake refused any
//! message by that limit (`MsgFreqCtrl`): the fake enforces the limit itself,
//! so a refusal is where overshooting shows — pacing failed, and the message
//! reached IM only when retried.

use super::{Check, Expectations, IM_GROUP_RATE, verdict};
use crate::observe::Observation;
use std::collections::BTreeMap;

/// The window Tencent counts a group's messages in, in ms.
const WINDOW_MS: i64 = 1_000;

/// The busiest one-second window of a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct BusiestSecond {
    /// Receipt time of the window's first message, unix ms.
    pub start_ms: i64,
    /// Messages received in `[start_ms, start_ms + 1000)`.
    pub messages: usize,
}

/// The window `[t, t + 1000)` holding the most of `sorted_ms` (ascending),
/// over every `t` in it; the earliest of equal windows; `None` when empty.
pub(super) fn busiest_second(sorted_ms: &[i64]) -> Option<BusiestSecond> {
    let mut busiest: Option<BusiestSecond> = None;
    let mut end = 0;
    for (first, start_ms) in sorted_ms.iter().copied().enumerate() {
        while end < sorted_ms.len() && sorted_ms[end] < start_ms + WINDOW_MS {
            end += 1;
        }
        let messages = end - first;
        if busiest.is_none_or(|best| messages > best.messages) {
            busiest = Some(BusiestSecond { start_ms, messages });
        }
    }
    busiest
}

/// Receipt times of every group's messages, ascending.
fn receipts_by_group(seen: &Observation) -> BTreeMap<&str, Vec<i64>> {
    let mut receipts: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    for message in &seen.im_messages {
        if let Some(group) = message.group_id.as_deref() {
            receipts
                .entry(group)
                .or_default()
                .push(message.received_at_ms);
        }
    }
    for times in receipts.values_mut() {
        times.sort_unstable();
    }
    receipts
}

pub(super) fn group_rate_within_limit(seen: &Observation, expect: &Expectations) -> Check {
    let limit = expect.im_group_limit;
    let mut offenders = Vec::new();
    let mut peak: Option<(&str, BusiestSecond)> = None;
    for (group, times) in receipts_by_group(seen) {
        let Some(busiest) = busiest_second(&times) else {
            continue;
        };
        if busiest.messages > limit {
            offenders.push(format!(
                "group {group}: {} messages in the second [{}, {}) ms, limit {limit}",
                busiest.messages,
                busiest.start_ms,
                busiest.start_ms + WINDOW_MS
            ));
        }
        if peak.is_none_or(|(_, best)| busiest.messages > best.messages) {
            peak = Some((group, busiest));
        }
    }
    for (group, refused) in &seen.im_freq_dropped_by_group {
        offenders.push(format!(
            "group {group}: {refused} message(s) refused by the fake's frequency limit \
             (MsgFreqCtrl): pacing failed"
        ));
    }
    // The total with no group named still means refusals happened.
    if seen.im_freq_dropped > 0 && seen.im_freq_dropped_by_group.is_empty() {
        offenders.push(format!(
            "{} message(s) refused by the fake's frequency limit (MsgFreqCtrl), no group named",
            seen.im_freq_dropped
        ));
    }
    verdict(
        IM_GROUP_RATE,
        format!(
            "limit {limit}/s; busiest second {}; {} refused by the limit",
            peak.map_or(
                "none (no group message)".into(),
                |(group, busiest)| format!("{} messages in {group}", busiest.messages)
            ),
            seen.im_freq_dropped
        ),
        offenders,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn busiest(times: &[i64]) -> Option<(i64, usize)> {
        busiest_second(times).map(|window| (window.start_ms, window.messages))
    }

    #[test]
    fn the_window_is_one_second_wide_and_excludes_its_end() {
        assert_eq!(busiest(&[]), None);
        assert_eq!(busiest(&[5]), Some((5, 1)));
        assert_eq!(busiest(&[0, 999]), Some((0, 2)));
        assert_eq!(busiest(&[0, 1_000]), Some((0, 1)));
    }

    #[test]
    fn the_busiest_window_may_start_at_any_message() {
        // A window fixed on whole seconds would see 2 and 2; sliding, 500..1499 holds 4.
        assert_eq!(busiest(&[0, 500, 900, 1_100, 1_400, 2_000]), Some((500, 4)));
        assert_eq!(busiest(&[7, 7, 7]), Some((7, 3)));
    }
}
