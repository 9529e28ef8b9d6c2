//! The fake's recorded state: groups, messages, de-duplication, pending faults, rate limits,
//! stats.
//!
//! All of it sits behind one `std::sync::Mutex` that is never held across an `.await`, so the
//! HTTP handlers and the in-process [`crate::FakeImHandle`] see one consistent history.
//! A group message is judged in Tencent's order: a resend of a `Random` still in the dedup
//! window gets what the first send got and counts against nothing; only then does the
//! group's frequency limit ([`crate::limits`]) decide between delivering and dropping it.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use crate::faults::FaultRule;
use crate::limits::GroupFrequency;
use crate::records::{GroupRecord, MessageFilter, MessageKind, RecordedMessage};
use crate::stats::Stats;

/// Tencent drops a message whose `Random` repeats for the same target within this window.
pub const DEDUP_WINDOW: Duration = Duration::from_secs(5 * 60);

/// Default record limit: the oldest messages are forgotten past this many, so
/// a long-running local stack stays bounded (`FakeImConfig::max_recorded_messages`).
pub const MAX_RECORDED_MESSAGES: usize = 100_000;

/// What a send request carried, group or one-to-one alike.
pub(crate) struct SentMessage {
    pub from_account: Option<String>,
    pub random: u32,
    pub msg_body: serde_json::Value,
    pub msg_priority: Option<String>,
}

/// Where a message went, for de-duplication.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Target {
    Group(String),
    Account(String),
}

/// What a message took when it was accepted; a resend within the dedup window gets it again.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SeenMessage {
    pub at: Instant,
    pub msg_seq: u64,
    pub msg_time: u64,
}

/// Everything the fake remembers.
#[derive(Debug, Default)]
pub(crate) struct State {
    pub groups: BTreeMap<String, GroupRecord>,
    pub messages: VecDeque<RecordedMessage>,
    pub stats: Stats,
    pub faults: Vec<FaultRule>,
    pub rate_limit: Option<u32>,
    windows: HashMap<String, (Instant, u32)>,
    group_frequency: GroupFrequency,
    seen: HashMap<(Target, u32), SeenMessage>,
    pub next_c2c_seq: u64,
    pub next_auto_group: u64,
}

pub(crate) fn unix_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// What became of a message to an existing group.
#[derive(Debug, Clone, Copy)]
pub(crate) enum GroupDelivery {
    /// Recorded now, or earlier when this is a resend within the dedup window.
    Accepted(SeenMessage),
    /// Over the group's frequency limit: to be answered `MsgFreqCtrl`, nothing recorded.
    FreqDropped,
}

impl State {
    /// Nothing recorded yet; every group held to `group_msg_per_second` (`None`: no limit).
    pub fn new(group_msg_per_second: Option<u32>) -> Self {
        State {
            group_frequency: GroupFrequency::new(group_msg_per_second),
            ..State::default()
        }
    }

    /// Takes one use of the first pending fault matching `api`.
    pub fn take_fault(&mut self, api: &str) -> Option<FaultRule> {
        let index = self
            .faults
            .iter()
            .position(|rule| rule.matches(api) && rule.times > 0)?;
        let rule = &mut self.faults[index];
        rule.times -= 1;
        let taken = rule.clone();
        if rule.times == 0 {
            self.faults.remove(index);
        }
        Some(taken)
    }

    /// Counts the call in the current one-second window of `api`; false when over the limit.
    pub fn admit(&mut self, api: &str, now: Instant) -> bool {
        let Some(limit) = self.rate_limit else {
            return true;
        };
        let window = self.windows.entry(api.to_owned()).or_insert((now, 0));
        if now.saturating_duration_since(window.0) >= Duration::from_secs(1) {
            *window = (now, 0);
        }
        window.1 += 1;
        window.1 <= limit
    }

    pub fn set_rate_limit(&mut self, per_second: Option<u32>) {
        // 0 reads naturally as "no limit" in a JSON admin call.
        self.rate_limit = per_second.filter(|n| *n > 0);
        self.windows.clear();
    }

    /// Holds every group to `per_second` messages a second from now on (`None` or 0: no
    /// limit); returns the limit in force.
    pub fn set_group_rate_limit(&mut self, per_second: Option<u32>) -> Option<u32> {
        self.group_frequency.set_per_second(per_second);
        self.group_frequency.per_second()
    }

    /// The earlier acceptance of the same `Random` to the same target, if still in the window.
    pub fn duplicate_of(
        &mut self,
        target: &Target,
        random: u32,
        now: Instant,
    ) -> Option<SeenMessage> {
        self.seen
            .retain(|_, seen| now.saturating_duration_since(seen.at) < DEDUP_WINDOW);
        self.seen.get(&(target.clone(), random)).copied()
    }

    /// Accepts a message to the existing group `group_id` (`None` when there is no such
    /// group). A resend of the same `random` within the dedup window gets what the first
    /// send got and counts against nothing; a new message is dropped when the group is over
    /// its frequency limit, and otherwise takes the group's next `MsgSeq` and is recorded.
    pub fn accept_group_message(
        &mut self,
        group_id: &str,
        sent: SentMessage,
        now: Instant,
        record_limit: usize,
    ) -> Option<GroupDelivery> {
        let target = Target::Group(group_id.to_owned());
        if let Some(seen) = self.duplicate_of(&target, sent.random, now) {
            self.stats.deduplicated += 1;
            return Some(GroupDelivery::Accepted(seen));
        }
        if !self.group_frequency.admits(group_id, now) {
            self.stats.count_freq_drop(group_id);
            return Some(GroupDelivery::FreqDropped);
        }
        let group = self.groups.get_mut(group_id)?;
        group.last_msg_seq += 1;
        let msg_seq = group.last_msg_seq;
        let seen = self.record_new(target, sent, msg_seq, now, record_limit);
        let in_window = self.group_frequency.record_delivery(group_id, now);
        self.stats.count_group_delivery(group_id, in_window);
        Some(GroupDelivery::Accepted(seen))
    }

    /// Accepts a one-to-one message to `to_account`. A resend of the same `random` within
    /// the dedup window gets what the first send got; a new message takes the next global
    /// sequence number and is recorded.
    pub fn accept_c2c_message(
        &mut self,
        to_account: &str,
        sent: SentMessage,
        now: Instant,
        record_limit: usize,
    ) -> SeenMessage {
        let target = Target::Account(to_account.to_owned());
        if let Some(seen) = self.duplicate_of(&target, sent.random, now) {
            self.stats.deduplicated += 1;
            return seen;
        }
        self.next_c2c_seq += 1;
        let msg_seq = self.next_c2c_seq;
        self.record_new(target, sent, msg_seq, now, record_limit)
    }

    /// Records a new message to `target` under `msg_seq` and remembers it for the dedup
    /// window.
    fn record_new(
        &mut self,
        target: Target,
        sent: SentMessage,
        msg_seq: u64,
        now: Instant,
        record_limit: usize,
    ) -> SeenMessage {
        let received_at_ms = unix_millis();
        let seen = SeenMessage {
            at: now,
            msg_seq,
            msg_time: received_at_ms / 1000,
        };
        let (kind, group_id, to_account) = match &target {
            Target::Group(group_id) => (MessageKind::Group, Some(group_id.clone()), None),
            Target::Account(account) => (MessageKind::C2c, None, Some(account.clone())),
        };
        let random = sent.random;
        self.record_message(
            RecordedMessage {
                kind,
                group_id,
                to_account,
                from_account: sent.from_account,
                random,
                msg_body: sent.msg_body,
                msg_priority: sent.msg_priority,
                msg_seq,
                received_at_ms,
            },
            record_limit,
        );
        self.remember(target, random, seen);
        seen
    }

    pub fn remember(&mut self, target: Target, random: u32, seen: SeenMessage) {
        self.seen.insert((target, random), seen);
    }

    /// Records a message, forgetting the oldest past `limit` (and counting
    /// them, so that a checker can tell a forgotten message from a lost one).
    pub fn record_message(&mut self, message: RecordedMessage, limit: usize) {
        while self.messages.len() >= limit.max(1) {
            self.messages.pop_front();
            self.stats.forgotten += 1;
        }
        self.messages.push_back(message);
        self.stats.messages += 1;
    }

    pub fn messages(&self, filter: &MessageFilter) -> Vec<RecordedMessage> {
        self.messages
            .iter()
            .filter(|m| {
                filter
                    .group_id
                    .as_ref()
                    .is_none_or(|g| m.group_id.as_ref() == Some(g))
            })
            .filter(|m| {
                filter
                    .to_account
                    .as_ref()
                    .is_none_or(|a| m.to_account.as_ref() == Some(a))
            })
            .cloned()
            .collect()
    }

    /// Forgets everything; the group frequency limit goes back to `group_msg_per_second`.
    pub fn reset(&mut self, group_msg_per_second: Option<u32>) {
        *self = State::new(group_msg_per_second);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A state with the group `g`, every group held to `per_second`.
    fn with_group(per_second: Option<u32>) -> State {
        let mut state = State::new(per_second);
        let group = GroupRecord {
            group_id: "g".into(),
            group_type: "AVChatRoom".into(),
            name: "room".into(),
            owner_account: None,
            created_at_ms: 0,
            removed_members: Vec::new(),
            muted_until: BTreeMap::new(),
            last_msg_seq: 0,
        };
        state.groups.insert("g".into(), group);
        state
    }

    /// The `MsgSeq` a `High` message to `g` got, or `None` when the limit dropped it.
    fn send(state: &mut State, random: u32, now: Instant) -> Option<u64> {
        let sent = SentMessage {
            from_account: None,
            random,
            msg_body: serde_json::Value::Null,
            msg_priority: Some("High".into()),
        };
        match state.accept_group_message("g", sent, now, 100) {
            Some(GroupDelivery::Accepted(seen)) => Some(seen.msg_seq),
            Some(GroupDelivery::FreqDropped) => None,
            None => panic!("group g exists"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn over_the_group_limit_even_a_high_message_is_dropped_and_takes_no_seq() {
        let mut state = with_group(Some(2));
        let start = Instant::now();
        assert_eq!(send(&mut state, 1, start), Some(1));
        assert_eq!(send(&mut state, 2, start), Some(2));
        assert_eq!(send(&mut state, 3, start), None);
        assert_eq!(
            send(&mut state, 4, start + Duration::from_millis(999)),
            None
        );
        assert_eq!(
            send(&mut state, 5, start + Duration::from_secs(1)),
            Some(3),
            "the next MsgSeq: dropped messages took none"
        );
        let randoms: Vec<u32> = state.messages.iter().map(|m| m.random).collect();
        assert_eq!(randoms, [1, 2, 5]);
        assert_eq!(state.messages[0].msg_priority.as_deref(), Some("High"));
        assert_eq!(state.stats.freq_dropped, 2);
        let group = &state.stats.groups["g"];
        assert_eq!((group.delivered, group.freq_dropped), (3, 2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_resend_is_answered_as_before_without_counting_against_the_limit() {
        let mut state = with_group(Some(2));
        let now = Instant::now();
        assert_eq!(send(&mut state, 1, now), Some(1));
        assert_eq!(send(&mut state, 1, now), Some(1), "duplicate");
        assert_eq!(
            send(&mut state, 2, now),
            Some(2),
            "the duplicate took no slot"
        );
        assert_eq!(
            send(&mut state, 1, now),
            Some(1),
            "a full window still answers a duplicate as the first send"
        );
        assert_eq!(send(&mut state, 3, now), None);
        assert_eq!(state.stats.deduplicated, 2);
        assert_eq!(state.stats.groups["g"].delivered, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn the_peak_is_the_busiest_sliding_second() {
        let mut state = with_group(None);
        let start = Instant::now();
        // Two per calendar second, four within the sliding second 900..1900 ms.
        for (random, ms) in [(1, 900), (2, 950), (3, 1000), (4, 1050)] {
            assert!(send(&mut state, random, start + Duration::from_millis(ms)).is_some());
        }
        for (random, ms) in [(5, 3000), (6, 3100), (7, 3200)] {
            assert!(send(&mut state, random, start + Duration::from_millis(ms)).is_some());
        }
        let group = &state.stats.groups["g"];
        assert_eq!((group.delivered, group.peak_per_second), (7, 4));
    }

    #[tokio::test(start_paused = true)]
    async fn reset_restores_the_configured_group_limit() {
        let mut state = with_group(Some(40));
        assert_eq!(state.set_group_rate_limit(Some(1)), Some(1));
        assert_eq!(state.set_group_rate_limit(Some(0)), None, "0 is no limit");
        state.reset(Some(40));
        assert_eq!(state.group_frequency.per_second(), Some(40));
        let sent = SentMessage {
            from_account: None,
            random: 1,
            msg_body: serde_json::Value::Null,
            msg_priority: None,
        };
        assert!(
            state
                .accept_group_message("g", sent, Instant::now(), 100)
                .is_none(),
            "groups are forgotten too"
        );
        assert!(state.stats.groups.is_empty());
    }

    #[test]
    fn past_the_limit_the_oldest_messages_are_forgotten_and_counted() {
        let mut state = State::default();
        for seq in 1..=5 {
            state.record_message(
                RecordedMessage {
                    kind: MessageKind::Group,
                    group_id: Some("g".into()),
                    to_account: None,
                    from_account: None,
                    random: seq as u32,
                    msg_body: serde_json::Value::Null,
                    msg_priority: None,
                    msg_seq: seq,
                    received_at_ms: 0,
                },
                3,
            );
        }
        let kept: Vec<u64> = state.messages.iter().map(|m| m.msg_seq).collect();
        assert_eq!(kept, [3, 4, 5]);
        assert_eq!(state.stats.messages, 5);
        assert_eq!(state.stats.forgotten, 2);
    }

    #[test]
    fn faults_apply_in_order_for_their_count() {
        let mut state = State::default();
        state
            .faults
            .push(FaultRule::error_code("a/x", 10002).times(2));
        state.faults.push(FaultRule::http_status("*", 503));
        assert_eq!(
            state.take_fault("b/y").and_then(|f| f.http_status),
            Some(503)
        );
        assert_eq!(state.take_fault("b/y"), None);
        assert_eq!(
            state.take_fault("a/x").and_then(|f| f.error_code),
            Some(10002)
        );
        assert_eq!(
            state.take_fault("a/x").and_then(|f| f.error_code),
            Some(10002)
        );
        assert_eq!(state.take_fault("a/x"), None);
    }

    #[test]
    fn rate_limit_counts_per_api_per_second() {
        let mut state = State::default();
        let now = Instant::now();
        assert!(state.admit("a/x", now), "unlimited by default");
        state.set_rate_limit(Some(2));
        assert!(state.admit("a/x", now));
        assert!(state.admit("a/x", now));
        assert!(!state.admit("a/x", now));
        assert!(state.admit("b/y", now), "other apis have their own window");
        assert!(
            state.admit("a/x", now + Duration::from_secs(1)),
            "a new second resets"
        );
    }

    #[test]
    fn duplicates_expire_after_the_window() {
        let mut state = State::default();
        let now = Instant::now();
        let target = Target::Group("g".into());
        state.remember(
            target.clone(),
            7,
            SeenMessage {
                at: now,
                msg_seq: 1,
                msg_time: 0,
            },
        );
        assert!(
            state
                .duplicate_of(&target, 7, now + Duration::from_secs(299))
                .is_some()
        );
        assert!(
            state
                .duplicate_of(&Target::Account("g".into()), 7, now)
                .is_none()
        );
        assert!(state.duplicate_of(&target, 7, now + DEDUP_WINDOW).is_none());
    }
}
