//! The fake's recorded state: groups, messages, de-duplication, faults, rate limits, stats.
//!
//! All of it sits behind one `std::sync::Mutex` that is never held across an `.await`, so the
//! HTTP handlers and the in-process [`crate::FakeImHandle`] see one consistent history.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

/// Tencent drops a message whose `Random` repeats for the same target within this window.
pub const DEDUP_WINDOW: Duration = Duration::from_secs(5 * 60);

/// Default record limit: the oldest messages are forgotten past this many, so
/// a long-running local stack stays bounded (`FakeImConfig::max_recorded_messages`).
pub const MAX_RECORDED_MESSAGES: usize = 100_000;

/// Whether a recorded message went to a group or to one account.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MessageKind {
    /// `group_open_http_svc/send_group_msg`
    Group,
    /// `openim/sendmsg`
    C2c,
}

/// One accepted, non-duplicate message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedMessage {
    /// Group or one-to-one.
    pub kind: MessageKind,
    /// `GroupId` for group messages.
    pub group_id: Option<String>,
    /// `To_Account` for one-to-one messages.
    pub to_account: Option<String>,
    /// `From_Account`, when given.
    pub from_account: Option<String>,
    /// `Random` (group) or `MsgRandom` (one-to-one).
    pub random: u32,
    /// `MsgBody` exactly as received.
    pub msg_body: serde_json::Value,
    /// `MsgSeq` assigned (per group; a global counter for one-to-one).
    pub msg_seq: u64,
    /// When the fake accepted it, unix milliseconds.
    pub received_at_ms: u64,
}

/// A live group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupRecord {
    /// `GroupId`.
    pub group_id: String,
    /// `Type`, e.g. `AVChatRoom`.
    pub group_type: String,
    /// `Name`.
    pub name: String,
    /// `Owner_Account`, when given.
    pub owner_account: Option<String>,
    /// Creation time, unix milliseconds.
    pub created_at_ms: u64,
    /// Accounts removed via `delete_group_member`, in call order, without repeats.
    pub removed_members: Vec<String>,
    /// Muted accounts and the unix second their mute ends.
    pub muted_until: BTreeMap<String, u64>,
    /// Last `MsgSeq` handed out in this group.
    pub last_msg_seq: u64,
}

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
    /// Requests answered with a non-zero ErrorCode, by code.
    pub rejected: BTreeMap<i64, u64>,
    /// Requests answered with an injected non-2xx HTTP status, by status.
    pub http_faults: BTreeMap<u16, u64>,
    /// Requests per API path (`service/command`).
    pub calls_by_api: BTreeMap<String, u64>,
}

/// An injected fault. It applies to the next `times` calls matching `api`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultRule {
    /// `service/command`, e.g. `group_open_http_svc/send_group_msg`, or `*` for every API.
    #[serde(default = "any_api")]
    pub api: String,
    /// Answer HTTP 200 with this ErrorCode.
    #[serde(default)]
    pub error_code: Option<i64>,
    /// ErrorInfo to go with `error_code`.
    #[serde(default)]
    pub error_info: Option<String>,
    /// Answer with this HTTP status (takes precedence over `error_code`).
    #[serde(default)]
    pub http_status: Option<u16>,
    /// Answer a send with ErrorCode 0 and this `MsgDropReason`, recording nothing.
    #[serde(default)]
    pub msg_drop_reason: Option<String>,
    /// Delay before answering; alone it only slows the call down.
    #[serde(default)]
    pub latency_ms: u64,
    /// How many matching calls the rule applies to.
    #[serde(default = "one")]
    pub times: u32,
}

fn any_api() -> String {
    "*".to_owned()
}

fn one() -> u32 {
    1
}

impl FaultRule {
    fn base(api: &str) -> Self {
        FaultRule {
            api: api.to_owned(),
            error_code: None,
            error_info: None,
            http_status: None,
            msg_drop_reason: None,
            latency_ms: 0,
            times: 1,
        }
    }

    /// Answer the next call to `api` (or `*`) with ErrorCode `code`.
    pub fn error_code(api: &str, code: i64) -> Self {
        FaultRule {
            error_code: Some(code),
            ..FaultRule::base(api)
        }
    }

    /// Answer the next call to `api` (or `*`) with HTTP `status`.
    pub fn http_status(api: &str, status: u16) -> Self {
        FaultRule {
            http_status: Some(status),
            ..FaultRule::base(api)
        }
    }

    /// Answer the next send to `api` with `MsgDropReason: reason`.
    pub fn drop_reason(api: &str, reason: &str) -> Self {
        FaultRule {
            msg_drop_reason: Some(reason.to_owned()),
            ..FaultRule::base(api)
        }
    }

    /// Delay the next call to `api` (or `*`) by `latency_ms`.
    pub fn latency(api: &str, latency_ms: u64) -> Self {
        FaultRule {
            latency_ms,
            ..FaultRule::base(api)
        }
    }

    /// Applies the rule to `times` calls instead of one.
    pub fn times(self, times: u32) -> Self {
        FaultRule { times, ..self }
    }

    fn matches(&self, api: &str) -> bool {
        self.api == "*" || self.api == api
    }
}

/// Filters for [`State::messages`] and `GET /admin/messages`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageFilter {
    /// Only messages to this group.
    #[serde(default)]
    pub group_id: Option<String>,
    /// Only one-to-one messages to this account.
    #[serde(default)]
    pub to_account: Option<String>,
}

/// What a send request carried, group or one-to-one alike.
pub(crate) struct SentMessage {
    pub from_account: Option<String>,
    pub random: u32,
    pub msg_body: serde_json::Value,
}

/// Where a message went, for de-duplication.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Target {
    Group(String),
    Account(String),
}

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
    seen: HashMap<(Target, u32), SeenMessage>,
    pub next_c2c_seq: u64,
    pub next_auto_group: u64,
}

pub(crate) fn unix_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl State {
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

    /// Accepts a message to `target`. A resend of the same `random` within
    /// the dedup window gets what the first send got and records nothing;
    /// otherwise the message takes the sequence number `next_seq` hands out,
    /// is recorded and is remembered for the window.
    pub fn accept<E>(
        &mut self,
        target: Target,
        sent: SentMessage,
        now: Instant,
        limit: usize,
        next_seq: impl FnOnce(&mut Self) -> Result<u64, E>,
    ) -> Result<SeenMessage, E> {
        if let Some(seen) = self.duplicate_of(&target, sent.random, now) {
            self.stats.deduplicated += 1;
            return Ok(seen);
        }
        let msg_seq = next_seq(self)?;
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
                msg_seq,
                received_at_ms,
            },
            limit,
        );
        self.remember(target, random, seen);
        Ok(seen)
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

    pub fn reset(&mut self) {
        *self = State::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
