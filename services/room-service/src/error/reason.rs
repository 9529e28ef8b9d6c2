//! [`Reason`]: every reason room-service itself gives a refusal (room-core's
//! rule codes, `room_core::Rejection::ALL_CODES`, are the others), and
//! [`Retry`], what a caller may do after one. The enum, its list
//! [`Reason::ALL`], its text and its retry advice come from one table below,
//! so none can miss a reason; docs/gateway.md mirrors the table, and
//! `tests/gateway_contract.rs` fails when the two disagree.

use std::time::Duration;

/// Whether, and when, a refused call can succeed when sent again unchanged
/// (same request, same `command_id`). The delay is the `RetryInfo` sent with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// Sending it again cannot succeed: no `RetryInfo`.
    Never,
    /// It may succeed after this long (zero: at once).
    After(Duration),
}

impl Retry {
    /// The `RetryInfo.retry_delay`, if the refusal is retryable.
    pub const fn delay(self) -> Option<Duration> {
        match self {
            Retry::Never => None,
            Retry::After(delay) => Some(delay),
        }
    }
}

/// Until the liveness/takeover code names the time left on a holder's key,
/// a `room_owned_elsewhere` refusal advises this wait.
pub const OWNED_ELSEWHERE_DEFAULT_DELAY: Duration = Duration::from_millis(250);

/// Declares [`Reason`] and its table from one list, so the variants,
/// [`Reason::ALL`], the texts and the retry advice cannot diverge.
macro_rules! reasons {
    ($($(#[doc = $doc:literal])* $variant:ident = $text:literal, $retry:expr;)*) => {
        /// A reason room-service gives a refusal, sent lowercase as
        /// `x-error-reason` and UPPER_SNAKE_CASE as `ErrorInfo.reason`.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Reason {
            $($(#[doc = $doc])* $variant,)*
        }

        impl Reason {
            /// Every reason, in table order.
            pub const ALL: &'static [Reason] = &[$(Reason::$variant),*];

            /// The stable lowercase reason (`x-error-reason`).
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Reason::$variant => $text,)*
                }
            }

            /// What a caller may do after a refusal with this reason.
            pub const fn retry(self) -> Retry {
                match self {
                    $(Reason::$variant => $retry,)*
                }
            }
        }
    };
}

const fn millis(ms: u64) -> Retry {
    Retry::After(Duration::from_millis(ms))
}

// The one table of retry advice (docs/gateway.md mirrors it). A delay says
// when the cause is likely gone; the gateway adds jitter and its own budget.
reasons! {
    /// A request field is malformed.
    InvalidArgument = "invalid_argument", Retry::Never;
    /// The end-user assertion is missing, expired or does not verify.
    Unauthenticated = "unauthenticated", Retry::Never;
    /// The caller's certificate identity may not call this service.
    CallerNotAllowed = "caller_not_allowed", Retry::Never;
    /// The end-user assertion names another user than the request acts as.
    UserMismatch = "user_mismatch", Retry::Never;
    /// The command_id was used before for a different request.
    CommandIdReused = "command_id_reused", Retry::Never;
    /// The gift failed and was refunded; its command_id is spent.
    GiftCompensated = "gift_compensated", Retry::Never;
    /// The gift's refund failed; operators settle it; its command_id is spent.
    GiftRefundFailed = "gift_refund_failed", Retry::Never;
    /// The gift is still being processed or recovered (settled within
    /// seconds, also after its holder died).
    GiftInFlight = "gift_in_flight", millis(500);
    /// Another live instance holds the room and the call could not be
    /// forwarded to it; the error's own `retry_after` overrides the delay.
    RoomOwnedElsewhere = "room_owned_elsewhere", Retry::After(OWNED_ELSEWHERE_DEFAULT_DELAY);
    /// Another owner wrote the room since it was loaded here; the next
    /// attempt reloads it or reaches the new holder.
    StaleOwner = "stale_owner", millis(0);
    /// The wallet refused the debit: the sender cannot pay.
    InsufficientBalance = "insufficient_balance", Retry::Never;
    /// The wallet refused the debit for another reason.
    WalletRefused = "wallet_refused", Retry::Never;
    /// The wallet could not be reached.
    WalletUnavailable = "wallet_unavailable", millis(1000);
    /// MySQL could not be reached.
    DatabaseUnavailable = "database_unavailable", millis(1000);
    /// Redis could not be reached.
    RedisUnavailable = "redis_unavailable", millis(1000);
    /// The room's mailbox is full.
    Overloaded = "overloaded", millis(100);
    /// This instance holds its limit of loaded rooms, none idle.
    TooManyLoadedRooms = "too_many_loaded_rooms", millis(1000);
    /// This instance is draining: another one answers at once.
    ShuttingDown = "shutting_down", millis(0);
    /// Invalid configuration (a start-up error; never expected on a call).
    Config = "config", Retry::Never;
    /// A listener failed (a start-up error; never expected on a call).
    Server = "server", Retry::Never;
    /// A bug or corrupt data.
    Internal = "internal", Retry::Never;
}

impl Reason {
    /// The `ErrorInfo.reason`: the lowercase reason in UPPER_SNAKE_CASE.
    pub fn error_info_reason(self) -> String {
        upper_snake(self.as_str())
    }
}

/// `seat_taken` → `SEAT_TAKEN` (AIP-193's form of a reason).
pub fn upper_snake(reason: &str) -> String {
    reason.to_ascii_uppercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_unique_snake_case_and_distinct_from_rule_codes() {
        let mut seen = std::collections::BTreeSet::new();
        for reason in Reason::ALL {
            let text = reason.as_str();
            assert!(seen.insert(text), "duplicate {text}");
            assert!(
                text.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{text}"
            );
            assert_eq!(reason.error_info_reason(), text.to_ascii_uppercase());
        }
        // `invalid_argument` is both room-core's and ours, with one meaning:
        // a malformed request, never retried. No other text is shared.
        let shared: Vec<&str> = room_core::Rejection::ALL_CODES
            .iter()
            .copied()
            .filter(|code| seen.contains(code))
            .collect();
        assert_eq!(shared, ["invalid_argument"]);
    }

    #[test]
    fn spent_or_refused_requests_are_never_retried_and_passing_causes_are() {
        use Reason::*;
        for reason in [
            InvalidArgument,
            Unauthenticated,
            CallerNotAllowed,
            UserMismatch,
            CommandIdReused,
            GiftCompensated,
            GiftRefundFailed,
            InsufficientBalance,
            WalletRefused,
            Internal,
        ] {
            assert_eq!(reason.retry(), Retry::Never, "{reason:?}");
        }
        for reason in [
            GiftInFlight,
            RoomOwnedElsewhere,
            StaleOwner,
            WalletUnavailable,
            DatabaseUnavailable,
            RedisUnavailable,
            Overloaded,
            TooManyLoadedRooms,
            ShuttingDown,
        ] {
            let delay = reason.retry().delay();
            assert!(
                delay.is_some_and(|delay| delay <= Duration::from_secs(1)),
                "{reason:?}: {delay:?}"
            );
        }
    }
}
