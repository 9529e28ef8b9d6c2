//! Retry delays: `fixed_interval` waits `initial_backoff` every time;
//! `exponential_backoff` doubles from `initial_backoff` up to `max_backoff`
//! with "equal jitter" (half fixed, half random), so a burst of failures does
//! not retry in lockstep.

use crate::config::RetryStrategy;
use std::time::Duration;

/// Delay before attempt number `retry_count + 1`, where `retry_count >= 1` is
/// the number of failures so far. `jitter` in `[0, 1)` comes from the caller
/// (random in production, fixed in tests).
pub fn retry_delay(
    strategy: RetryStrategy,
    initial: Duration,
    max: Duration,
    retry_count: u32,
    jitter: f64,
) -> Duration {
    match strategy {
        RetryStrategy::FixedInterval => initial,
        RetryStrategy::ExponentialBackoff => {
            let exponent = retry_count.saturating_sub(1).min(30);
            let base = initial.saturating_mul(1u32 << exponent).min(max);
            let half = base / 2;
            half + half.mul_f64(jitter.clamp(0.0, 1.0))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn fixed_interval_never_grows() {
        for count in [1, 2, 10, 1000] {
            assert_eq!(
                retry_delay(
                    RetryStrategy::FixedInterval,
                    SECOND,
                    SECOND * 60,
                    count,
                    0.7
                ),
                SECOND
            );
        }
    }

    #[test]
    fn exponential_doubles_then_caps_with_bounded_jitter() {
        let delay = |count, jitter| {
            retry_delay(
                RetryStrategy::ExponentialBackoff,
                SECOND,
                SECOND * 10,
                count,
                jitter,
            )
        };
        assert_eq!(delay(1, 0.0), SECOND / 2);
        assert_eq!(delay(1, 1.0), SECOND);
        assert_eq!(delay(2, 1.0), SECOND * 2);
        assert_eq!(delay(3, 1.0), SECOND * 4);
        assert_eq!(delay(5, 1.0), SECOND * 10, "capped at max_backoff");
        assert_eq!(delay(u32::MAX, 1.0), SECOND * 10, "no overflow");
        assert!(delay(4, 0.5) >= SECOND * 4 && delay(4, 0.5) <= SECOND * 8);
    }
}
