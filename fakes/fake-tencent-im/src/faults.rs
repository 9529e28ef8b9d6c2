//! Faults a test injects: the next calls to an API answer with an ErrorCode, an HTTP
//! status or a `MsgDropReason`, or only answer late, so that callers' failure handling can
//! be exercised on demand.

use serde::{Deserialize, Serialize};

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

    pub(crate) fn matches(&self, api: &str) -> bool {
        self.api == "*" || self.api == api
    }
}
