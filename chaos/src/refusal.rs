//! How the workload's gateway answers a refusal, as docs/gateway.md lays it
//! down: a refusal carries `google.rpc.ErrorInfo` (its UPPER_SNAKE reason)
//! and, when retrying can succeed, `google.rpc.RetryInfo` in the standard
//! gRPC status details. The gateway retries UNAVAILABLE, ABORTED,
//! RESOURCE_EXHAUSTED and any refusal carrying RetryInfo, and the codes that
//! leave the outcome unknown (a deadline passed, the connection dropped),
//! always with the SAME `command_id`: after RetryInfo's delay when present
//! (capped at [`MAX_RETRY_DELAY`], floored at [`MIN_RETRY_DELAY`]), else
//! after its own exponential backoff. Any other refusal is final; the
//! workload never sends a command again under a new id.

use std::time::Duration;
use tonic_types::StatusExt;

/// Longest RetryInfo delay the gateway honours: a client that slept longer
/// on one server hint would look like an outage it caused itself.
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(2);
/// Shortest wait between two calls, so a zero delay cannot spin.
pub const MIN_RETRY_DELAY: Duration = Duration::from_millis(20);
/// First backoff when the refusal carries no RetryInfo; it doubles up to
/// [`MAX_RETRY_DELAY`].
pub const FIRST_BACKOFF: Duration = Duration::from_millis(200);

/// What a refusal says about retrying it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// `ErrorInfo.reason`, when the status carries one.
    pub reason: Option<String>,
    /// `RetryInfo.retry_delay`, when the status carries one.
    pub retry_delay: Option<Duration>,
    /// Whether the same command may be sent again.
    pub retryable: bool,
}

impl Refusal {
    /// Reads the status details of `status`.
    pub fn of(status: &tonic::Status) -> Self {
        let retry_info = status.get_details_retry_info();
        Self {
            reason: status.get_details_error_info().map(|info| info.reason),
            retry_delay: retry_info.as_ref().and_then(|info| info.retry_delay),
            retryable: retry_info.is_some() || is_retryable_code(status.code()),
        }
    }

    /// How long to wait before the next call: RetryInfo's delay (bounded),
    /// else `backoff`. The flag says whether RetryInfo decided it.
    pub fn wait(&self, backoff: Duration) -> (Duration, bool) {
        match self.retry_delay {
            Some(delay) => (delay.clamp(MIN_RETRY_DELAY, MAX_RETRY_DELAY), true),
            None => (backoff, false),
        }
    }

    /// `CODE REASON: message` for the ledger.
    pub fn describe(&self, status: &tonic::Status) -> String {
        match &self.reason {
            Some(reason) => format!("{:?} {reason}: {}", status.code(), status.message()),
            None => format!("{:?}: {}", status.code(), status.message()),
        }
    }
}

/// The next backoff after `backoff` was waited.
pub fn next_backoff(backoff: Duration) -> Duration {
    (backoff * 2).min(MAX_RETRY_DELAY)
}

/// Codes retried with the same id: the contract's three, and those that say
/// nothing definite about whether the command was applied.
fn is_retryable_code(code: tonic::Code) -> bool {
    matches!(
        code,
        tonic::Code::Unavailable
            | tonic::Code::Aborted
            | tonic::Code::ResourceExhausted
            | tonic::Code::DeadlineExceeded
            | tonic::Code::Internal
            | tonic::Code::Unknown
            | tonic::Code::Cancelled
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use tonic_types::{ErrorDetails, StatusExt};

    fn info(reason: &str) -> ErrorDetails {
        ErrorDetails::with_error_info(reason, "room-service.hyapp.io", HashMap::new())
    }

    fn refused(code: tonic::Code, details: ErrorDetails) -> tonic::Status {
        tonic::Status::with_error_details(code, "refused", details)
    }

    #[test]
    fn retry_info_sets_the_wait_within_bounds() {
        let mut details = info("ROOM_OWNED_ELSEWHERE");
        details.set_retry_info(Some(Duration::from_millis(700)));
        let refusal = Refusal::of(&refused(tonic::Code::Unavailable, details.clone()));
        assert_eq!(refusal.reason.as_deref(), Some("ROOM_OWNED_ELSEWHERE"));
        assert!(refusal.retryable);
        assert_eq!(
            refusal.wait(FIRST_BACKOFF),
            (Duration::from_millis(700), true)
        );
        details.set_retry_info(Some(Duration::from_secs(30)));
        let long = Refusal::of(&refused(tonic::Code::Unavailable, details.clone()));
        assert_eq!(long.wait(FIRST_BACKOFF), (MAX_RETRY_DELAY, true));
        details.set_retry_info(Some(Duration::ZERO));
        let zero = Refusal::of(&refused(tonic::Code::Unavailable, details));
        assert_eq!(zero.wait(FIRST_BACKOFF), (MIN_RETRY_DELAY, true));
    }

    #[test]
    fn without_retry_info_the_code_decides_and_backoff_waits() {
        let plain = Refusal::of(&tonic::Status::unavailable("down"));
        assert!(plain.retryable && plain.reason.is_none());
        assert_eq!(plain.wait(FIRST_BACKOFF), (FIRST_BACKOFF, false));
        for code in [tonic::Code::Aborted, tonic::Code::ResourceExhausted] {
            assert!(Refusal::of(&tonic::Status::new(code, "busy")).retryable);
        }
        let business = info("NOT_ON_MIC");
        let final_refusal = Refusal::of(&refused(tonic::Code::FailedPrecondition, business));
        assert!(!final_refusal.retryable);
        let mut later = info("ROOM_BUSY");
        later.set_retry_info(Some(Duration::from_millis(50)));
        assert!(
            Refusal::of(&refused(tonic::Code::FailedPrecondition, later)).retryable,
            "a reason with RetryInfo is retried whatever its code"
        );
        assert!(!Refusal::of(&tonic::Status::invalid_argument("bad")).retryable);
        assert_eq!(next_backoff(Duration::from_millis(1_500)), MAX_RETRY_DELAY);
    }
}
