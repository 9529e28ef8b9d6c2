//! The one retry backoff of the platform: how long to wait after the n-th
//! consecutive failure before trying again. The relay's row retries, the
//! consumer's in-place retries, the delivery-table sweepers and the relay's
//! nudge reconnect all compute their waits here, so they cannot drift apart.
//!
//! Guarantees: a delay never exceeds the configured ceiling (`max` for
//! exponential, `initial` for fixed), never panics and never overflows for
//! any `u32` failure count; with jitter it is at least half the ceiling.

use std::time::Duration;

/// How the wait grows with consecutive failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// `initial * 2^(failures-1)`, capped at `max`.
    Exponential,
    /// `initial` every time (`max` is not used).
    Fixed,
}

/// How much of the computed delay is randomised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Jitter {
    /// The delay exactly as computed.
    None,
    /// "Equal jitter": half of the delay is fixed, the other half random.
    ///
    /// Why this and not full jitter (`random(0..delay)`): the fixed half keeps
    /// a floor under every wait, so a retry never fires almost at once against
    /// a dependency that just failed and the delay still grows visibly with
    /// each failure; the random half spreads a burst of failures (a broker or
    /// IM outage fails many rows, messages or connections at the same moment)
    /// over time, so they do not all retry in lockstep and hit the recovering
    /// dependency together.
    Equal,
}

/// A retry backoff: strategy, first delay, cap and jitter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    strategy: Strategy,
    initial: Duration,
    max: Duration,
    jitter: Jitter,
}

impl Backoff {
    /// A backoff of `strategy` from `initial` up to `max`, with equal jitter.
    pub const fn new(strategy: Strategy, initial: Duration, max: Duration) -> Self {
        Self {
            strategy,
            initial,
            max,
            jitter: Jitter::Equal,
        }
    }

    /// Doubling from `initial` up to `max`, with equal jitter.
    pub const fn exponential(initial: Duration, max: Duration) -> Self {
        Self::new(Strategy::Exponential, initial, max)
    }

    /// `interval` every time, with equal jitter.
    pub const fn fixed(interval: Duration) -> Self {
        Self::new(Strategy::Fixed, interval, interval)
    }

    /// The same backoff with `jitter` instead.
    #[must_use]
    pub const fn with_jitter(self, jitter: Jitter) -> Self {
        Self { jitter, ..self }
    }

    /// How the delay grows.
    pub const fn strategy(&self) -> Strategy {
        self.strategy
    }

    /// The delay after the first failure (before jitter).
    pub const fn initial(&self) -> Duration {
        self.initial
    }

    /// The delay cap of the exponential strategy.
    pub const fn max(&self) -> Duration {
        self.max
    }

    /// The jitter applied.
    pub const fn jitter(&self) -> Jitter {
        self.jitter
    }

    /// The delay before the next attempt after `failures` consecutive failures
    /// (1 = the first attempt failed; 0 is treated as 1), jittered with the
    /// thread RNG.
    pub fn delay(&self, failures: u32) -> Duration {
        let fraction = match self.jitter {
            Jitter::None => 0.0,
            Jitter::Equal => rand::random::<f64>(),
        };
        self.delay_with(failures, fraction)
    }

    /// [`Backoff::delay`] with the random draw given: `jitter_fraction` in
    /// `[0, 1]` (clamped; NaN counts as 0) picks where in the jitter range the
    /// delay falls — 0 the shortest, 1 the full [`Backoff::ceiling`].
    /// Deterministic, for tests.
    pub fn delay_with(&self, failures: u32, jitter_fraction: f64) -> Duration {
        let ceiling = self.ceiling(failures);
        match self.jitter {
            Jitter::None => ceiling,
            Jitter::Equal => {
                let spread = ceiling / 2;
                (ceiling - spread).saturating_add(scale(spread, jitter_fraction))
            }
        }
    }

    /// The longest delay after `failures` consecutive failures: the delay
    /// without jitter.
    pub fn ceiling(&self, failures: u32) -> Duration {
        match self.strategy {
            Strategy::Fixed => self.initial,
            Strategy::Exponential => {
                // In u128 nanoseconds (a Duration is below 2^94 ns): a shift
                // that would lose bits saturates, and the cap brings it back
                // into range, for any `u32` count.
                let initial = self.initial.as_nanos();
                let exponent = failures.saturating_sub(1);
                let grown = if initial == 0 {
                    0
                } else if exponent < initial.leading_zeros() {
                    initial << exponent
                } else {
                    u128::MAX
                };
                from_nanos(grown.min(self.max.as_nanos()))
            }
        }
    }
}

/// `duration * fraction` for `fraction` in `[0, 1]`, in integer nanoseconds so
/// that no float rounding can overflow or panic.
fn scale(duration: Duration, fraction: f64) -> Duration {
    const ONE: f64 = (1u64 << 32) as f64;
    let fraction = if fraction.is_nan() {
        0.0
    } else {
        fraction.clamp(0.0, 1.0)
    };
    // At most 2^32; a Duration is below 2^94 ns, so the product fits a u128.
    let numerator = (fraction * ONE) as u128;
    from_nanos(duration.as_nanos().saturating_mul(numerator) >> 32)
}

/// A `Duration` of `nanos` nanoseconds, saturating at `Duration::MAX`.
fn from_nanos(nanos: u128) -> Duration {
    const PER_SECOND: u128 = 1_000_000_000;
    match u64::try_from(nanos / PER_SECOND) {
        Ok(secs) => Duration::new(secs, (nanos % PER_SECOND) as u32),
        Err(_) => Duration::MAX,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    fn exact(backoff: Backoff) -> Backoff {
        backoff.with_jitter(Jitter::None)
    }

    #[test]
    fn exponential_doubles_from_initial() {
        let backoff = exact(Backoff::exponential(SECOND, SECOND * 100));
        assert_eq!(backoff.delay(1), SECOND);
        assert_eq!(backoff.delay(2), SECOND * 2);
        assert_eq!(backoff.delay(3), SECOND * 4);
        assert_eq!(backoff.delay(6), SECOND * 32);
        assert_eq!(backoff.delay(0), SECOND, "0 failures counts as 1");
    }

    #[test]
    fn exponential_caps_at_max() {
        let backoff = exact(Backoff::exponential(SECOND, SECOND * 10));
        assert_eq!(backoff.delay(4), SECOND * 8);
        assert_eq!(backoff.delay(5), SECOND * 10);
        assert_eq!(backoff.delay(1000), SECOND * 10);
        let below = exact(Backoff::exponential(SECOND, SECOND / 2));
        assert_eq!(below.delay(1), SECOND / 2, "a cap below initial still caps");
    }

    #[test]
    fn fixed_never_grows() {
        let backoff = exact(Backoff::new(Strategy::Fixed, SECOND, SECOND * 60));
        for failures in [0, 1, 2, 10, 1000, u32::MAX] {
            assert_eq!(backoff.delay(failures), SECOND);
        }
        let jittered = Backoff::fixed(SECOND);
        for failures in [1, 2, 1000] {
            let delay = jittered.delay(failures);
            assert!(delay >= SECOND / 2 && delay <= SECOND, "{delay:?}");
        }
    }

    #[test]
    fn equal_jitter_spans_the_upper_half() {
        let backoff = Backoff::exponential(SECOND, SECOND * 10);
        assert_eq!(backoff.delay_with(1, 0.0), SECOND / 2);
        assert_eq!(backoff.delay_with(1, 1.0), SECOND);
        assert_eq!(backoff.delay_with(2, 1.0), SECOND * 2);
        assert_eq!(backoff.delay_with(3, 1.0), SECOND * 4);
        assert_eq!(backoff.delay_with(3, 0.5), SECOND * 3);
        assert_eq!(backoff.delay_with(5, 1.0), SECOND * 10, "capped");
        assert_eq!(backoff.delay_with(5, 0.0), SECOND * 5);
        assert_eq!(backoff.delay_with(1, -3.0), SECOND / 2, "clamped");
        assert_eq!(backoff.delay_with(1, 7.0), SECOND, "clamped");
        assert_eq!(backoff.delay_with(1, f64::NAN), SECOND / 2);
        for failures in [1, 2, 3, 4, 5, 40] {
            let ceiling = backoff.ceiling(failures);
            for _ in 0..200 {
                let delay = backoff.delay(failures);
                assert!(delay >= ceiling / 2 && delay <= ceiling, "{delay:?}");
            }
        }
    }

    #[test]
    fn jitter_actually_varies() {
        let backoff = Backoff::exponential(SECOND, SECOND);
        let delays: std::collections::HashSet<_> = (0..50).map(|_| backoff.delay(1)).collect();
        assert!(delays.len() > 1, "50 draws gave one value");
    }

    #[test]
    fn odd_nanoseconds_keep_the_bounds() {
        let backoff = Backoff::fixed(Duration::from_nanos(3));
        assert_eq!(backoff.delay_with(1, 0.0), Duration::from_nanos(2));
        assert_eq!(backoff.delay_with(1, 1.0), Duration::from_nanos(3));
    }

    #[test]
    fn no_overflow_for_any_count_or_duration() {
        for backoff in [
            Backoff::exponential(SECOND, SECOND * 10),
            Backoff::exponential(Duration::MAX, Duration::MAX),
            Backoff::exponential(Duration::from_nanos(1), Duration::MAX),
            Backoff::fixed(Duration::MAX),
            Backoff::fixed(Duration::ZERO),
        ] {
            for failures in [0, 1, 31, 32, 33, 64, u32::MAX - 1, u32::MAX] {
                for fraction in [0.0, 0.5, 1.0] {
                    assert!(backoff.delay_with(failures, fraction) <= backoff.ceiling(failures));
                }
                let _ = backoff.delay(failures);
            }
        }
        let huge = Backoff::exponential(Duration::from_nanos(1), Duration::MAX);
        assert_eq!(huge.ceiling(33), Duration::from_nanos(1 << 32));
        assert_eq!(huge.ceiling(u32::MAX), Duration::MAX);
        let capped = Backoff::exponential(SECOND, SECOND * 10);
        assert_eq!(capped.delay_with(u32::MAX, 1.0), SECOND * 10);
        assert_eq!(
            Backoff::exponential(Duration::MAX, Duration::MAX).delay_with(u32::MAX, 1.0),
            Duration::MAX
        );
    }
}
