//! The crate's single error type and its retry classification.
//!
//! Callers never parse codes themselves: [`Error::class`] says whether to back off
//! ([`ErrorClass::RateLimited`]), retry ([`ErrorClass::Transient`]), or give up
//! ([`ErrorClass::Permanent`]). Display output is deliberately short and never contains the
//! request URL (which carries the UserSig), the response body, or the secret key.

/// Tencent IM ErrorCodes this crate and the fake give meaning to.
pub mod codes {
    /// Group service internal error.
    pub const GROUP_INTERNAL: i64 = 10002;
    /// Group service: invalid command word (unknown API).
    pub const GROUP_BAD_COMMAND: i64 = 10003;
    /// Group service: invalid parameter.
    pub const GROUP_BAD_PARAM: i64 = 10004;
    /// Group service: operation frequency limit.
    pub const GROUP_FREQ_LIMIT: i64 = 10006;
    /// Group does not exist or was destroyed.
    pub const GROUP_NOT_FOUND: i64 = 10010;
    /// Group ID already used.
    pub const GROUP_ID_USED: i64 = 10021;
    /// Group message send frequency limit.
    pub const GROUP_MSG_FREQ_LIMIT: i64 = 10023;
    /// Group ID already used, by the operator itself.
    pub const GROUP_ID_USED_BY_SELF: i64 = 10025;
    /// Internal network error.
    pub const NETWORK_ERROR: i64 = 20004;
    /// Internal server error.
    pub const SERVER_INTERNAL: i64 = 20005;
    /// Request body is not valid JSON.
    pub const JSON_PARSE: i64 = 60003;
    /// REST API call frequency over the limit.
    pub const REST_FREQ_LIMIT: i64 = 60007;
    /// Service request timed out.
    pub const REQUEST_TIMEOUT: i64 = 60008;
    /// Unknown resource (API path).
    pub const BAD_RESOURCE: i64 = 60009;
    /// The API requires the app admin identity.
    pub const ADMIN_REQUIRED: i64 = 60010;
    /// SDKAppID request frequency over the limit.
    pub const APP_FREQ_LIMIT: i64 = 60011;
    /// The request did not carry an SDKAppID.
    pub const SDKAPPID_MISSING: i64 = 60012;
    /// Request too frequent.
    pub const TOO_FREQUENT_A: i64 = 60018;
    /// Request too frequent.
    pub const TOO_FREQUENT_B: i64 = 60019;
    /// UserSig expired: regenerate and retry.
    pub const USERSIG_EXPIRED: i64 = 70001;
    /// UserSig is empty.
    pub const USERSIG_EMPTY: i64 = 70002;
    /// UserSig invalid (undecodable or truncated).
    pub const USERSIG_INVALID: i64 = 70003;
    /// UserSig verification failed (signed with another key).
    pub const USERSIG_VERIFY_FAILED: i64 = 70009;
    /// The request identifier differs from the UserSig identifier.
    pub const USERSIG_IDENTIFIER_MISMATCH: i64 = 70013;
    /// The request SDKAppID differs from the UserSig SDKAppID.
    pub const USERSIG_SDKAPPID_MISMATCH: i64 = 70014;
    /// SDKAppID not found.
    pub const SDKAPPID_NOT_FOUND: i64 = 70020;
    /// Internal timeout.
    pub const INTERNAL_TIMEOUT: i64 = 70169;
    /// Internal error.
    pub const INTERNAL_ERROR: i64 = 70500;
    /// Message content too long: the `MsgBody` is over Tencent's 12 KB limit for group
    /// and one-to-one messages alike (content-security error domain). Resending the
    /// same body cannot succeed, so it classifies as permanent.
    pub const MSG_TOO_LONG: i64 = 80002;
    /// openim: JSON body failed to parse.
    pub const OPENIM_JSON: i64 = 90001;
    /// openim: MsgBody malformed.
    pub const OPENIM_MSG_BODY: i64 = 90002;
    /// openim: To_Account missing.
    pub const OPENIM_TO_ACCOUNT: i64 = 90003;
    /// openim: MsgRandom missing or not an integer.
    pub const OPENIM_MSG_RANDOM: i64 = 90005;

    /// Codes that mean "slow down".
    pub const RATE_LIMITED: &[i64] = &[
        REST_FREQ_LIMIT,
        APP_FREQ_LIMIT,
        TOO_FREQUENT_A,
        TOO_FREQUENT_B,
        GROUP_FREQ_LIMIT,
        GROUP_MSG_FREQ_LIMIT,
    ];
    /// Codes that mean "retry later".
    pub const TRANSIENT: &[i64] = &[
        GROUP_INTERNAL,
        REQUEST_TIMEOUT,
        INTERNAL_TIMEOUT,
        INTERNAL_ERROR,
        NETWORK_ERROR,
        SERVER_INTERNAL,
    ];
}

/// `MsgDropReason` value meaning the message hit frequency control and was not delivered.
pub const MSG_FREQ_CTRL: &str = "MsgFreqCtrl";

/// Longest ErrorInfo / detail kept in an [`Error`], so logs stay bounded.
const MAX_INFO_CHARS: usize = 200;

/// What a caller should do about an [`Error`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// Tencent throttled the call or dropped the message: back off, then retry.
    RateLimited,
    /// Server hiccup, timeout or network failure: retry.
    Transient,
    /// The UserSig was rejected as expired even after one regeneration.
    ExpiredSig,
    /// Retrying will not help.
    Permanent,
}

/// Everything a Tencent IM call can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Tencent answered with a non-zero ErrorCode.
    #[error("tencent im {api} error {code}: {info}")]
    Api {
        /// The API path, e.g. `group_open_http_svc/send_group_msg`.
        api: &'static str,
        /// Tencent's ErrorCode.
        code: i64,
        /// ErrorInfo, truncated.
        info: String,
    },
    /// The send succeeded at the protocol level but Tencent dropped the message.
    #[error("tencent im {api} message dropped: {reason}")]
    Dropped {
        /// The API path.
        api: &'static str,
        /// `MsgDropReason`, e.g. `MsgFreqCtrl`.
        reason: String,
    },
    /// Non-2xx HTTP status.
    #[error("tencent im {api} http status {status}")]
    HttpStatus {
        /// The API path.
        api: &'static str,
        /// HTTP status code.
        status: u16,
    },
    /// The request did not complete within the configured timeout.
    #[error("tencent im {api} timed out")]
    Timeout {
        /// The API path.
        api: &'static str,
    },
    /// Connecting, sending or reading failed.
    #[error("tencent im {api} transport error: {detail}")]
    Transport {
        /// The API path.
        api: &'static str,
        /// Error text with the URL stripped.
        detail: String,
    },
    /// A 2xx answer that is not the expected JSON envelope.
    #[error("tencent im {api} bad response: {detail}")]
    Decode {
        /// The API path.
        api: &'static str,
        /// Parser error text (never the body).
        detail: String,
    },
    /// The client configuration is unusable.
    #[error("invalid tencent im config: {0}")]
    Config(String),
}

impl Error {
    /// Classifies the error for retry decisions.
    pub fn class(&self) -> ErrorClass {
        match self {
            Error::Api { code, .. } => class_of_code(*code),
            Error::Dropped { reason, .. } if reason == MSG_FREQ_CTRL => ErrorClass::RateLimited,
            Error::Dropped { .. } => ErrorClass::Permanent,
            Error::HttpStatus { status, .. } if *status == 429 || *status >= 500 => {
                ErrorClass::Transient
            }
            Error::HttpStatus { .. } => ErrorClass::Permanent,
            // A garbled 2xx is most likely a gateway hiccup; retry budgets bound the damage
            // if it is in fact a permanent schema change.
            Error::Timeout { .. } | Error::Transport { .. } | Error::Decode { .. } => {
                ErrorClass::Transient
            }
            Error::Config(_) => ErrorClass::Permanent,
        }
    }

    /// Tencent's ErrorCode, when the failure came from one.
    pub fn code(&self) -> Option<i64> {
        match self {
            Error::Api { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// Whether another attempt later may succeed: throttling, server errors
    /// and an expired signature (the client already regenerated it once; a
    /// later round may meet a fixed clock or a rotated key) are worth one.
    pub fn is_retryable(&self) -> bool {
        match self.class() {
            ErrorClass::RateLimited | ErrorClass::Transient | ErrorClass::ExpiredSig => true,
            ErrorClass::Permanent => false,
        }
    }

    /// The error with Tencent's code in front, for logs, dead-letter reasons
    /// and `last_error` columns: `tencent im error_code=10007: …`.
    pub fn summary(&self) -> String {
        match self.code() {
            Some(code) => format!("tencent im error_code={code}: {self}"),
            None => format!("tencent im: {self}"),
        }
    }

    /// [`Error::summary`] cut on a char boundary to fit a `VARCHAR(512)` column.
    pub fn short_summary(&self) -> String {
        let mut text = self.summary();
        let mut cut = text.len().min(500);
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text
    }

    /// The API path the failing call targeted, when there was one.
    pub fn api(&self) -> Option<&'static str> {
        match self {
            Error::Api { api, .. }
            | Error::Dropped { api, .. }
            | Error::HttpStatus { api, .. }
            | Error::Timeout { api }
            | Error::Transport { api, .. }
            | Error::Decode { api, .. } => Some(api),
            Error::Config(_) => None,
        }
    }

    pub(crate) fn api_error(api: &'static str, code: i64, info: &str) -> Self {
        Error::Api {
            api,
            code,
            info: truncate(info),
        }
    }

    pub(crate) fn from_reqwest(api: &'static str, err: reqwest::Error) -> Self {
        if err.is_timeout() {
            return Error::Timeout { api };
        }
        // The URL carries the UserSig in its query string, so it must not reach the message.
        let err = err.without_url();
        let mut detail = err.to_string();
        let mut source = std::error::Error::source(&err);
        while let Some(cause) = source {
            detail.push_str(": ");
            detail.push_str(&cause.to_string());
            source = cause.source();
        }
        Error::Transport {
            api,
            detail: truncate(&detail),
        }
    }
}

/// Classifies a Tencent ErrorCode.
pub fn class_of_code(code: i64) -> ErrorClass {
    if codes::RATE_LIMITED.contains(&code) {
        ErrorClass::RateLimited
    } else if codes::TRANSIENT.contains(&code) {
        ErrorClass::Transient
    } else if code == codes::USERSIG_EXPIRED {
        ErrorClass::ExpiredSig
    } else {
        ErrorClass::Permanent
    }
}

pub(crate) fn truncate(text: &str) -> String {
    match text.char_indices().nth(MAX_INFO_CHARS) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_classify_as_documented() {
        for code in [60007, 60011, 60018, 60019, 10006, 10023] {
            assert_eq!(class_of_code(code), ErrorClass::RateLimited, "{code}");
        }
        for code in [10002, 60008, 70169, 70500, 20004, 20005] {
            assert_eq!(class_of_code(code), ErrorClass::Transient, "{code}");
        }
        assert_eq!(class_of_code(70001), ErrorClass::ExpiredSig);
        assert_eq!(class_of_code(10004), ErrorClass::Permanent);
    }

    #[test]
    fn a_message_too_long_is_permanent() {
        assert_eq!(class_of_code(codes::MSG_TOO_LONG), ErrorClass::Permanent);
        let err = Error::api_error(
            "group_open_http_svc/send_group_msg",
            codes::MSG_TOO_LONG,
            "message content too long",
        );
        assert_eq!(err.class(), ErrorClass::Permanent);
        assert!(!err.is_retryable());
    }

    #[test]
    fn http_and_drop_classes() {
        let api = "group_open_http_svc/send_group_msg";
        for status in [429, 500, 502, 503] {
            assert_eq!(
                Error::HttpStatus { api, status }.class(),
                ErrorClass::Transient
            );
        }
        assert_eq!(
            Error::HttpStatus { api, status: 400 }.class(),
            ErrorClass::Permanent
        );
        let dropped = Error::Dropped {
            api,
            reason: MSG_FREQ_CTRL.to_owned(),
        };
        assert_eq!(dropped.class(), ErrorClass::RateLimited);
    }

    #[test]
    fn long_error_info_is_truncated_on_a_char_boundary() {
        let long = "é".repeat(500);
        let err = Error::api_error("openim/sendmsg", 90001, &long);
        let shown = err.to_string();
        assert!(shown.chars().count() < 260, "{}", shown.len());
        assert!(shown.ends_with("..."));
    }

    #[test]
    fn retry_decisions_follow_the_class_and_summaries_keep_the_code() {
        let limited = Error::HttpStatus {
            api: "openim/sendmsg",
            status: 503,
        };
        assert!(limited.is_retryable());
        let rejected = Error::HttpStatus {
            api: "openim/sendmsg",
            status: 403,
        };
        assert!(!rejected.is_retryable());
        let api = Error::api_error(
            "group_open_http_svc/send_group_msg",
            10004,
            &"x".repeat(900),
        );
        assert!(api.summary().starts_with("tencent im error_code=10004: "));
        let short = api.short_summary();
        assert!(short.len() <= 500 && short.starts_with("tencent im error_code=10004"));
    }
}
