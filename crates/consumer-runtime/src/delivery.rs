//! Retries of deliveries driven from a table (notices, big-gift broadcasts):
//! the row commits with the consumed event's effect; delivery is attempted
//! right after, and a failed one is swept up again when due. The wait between
//! attempts is the shared [`service_kit::backoff::Backoff`].

use serde::{Deserialize, Serialize};
use service_kit::{backoff::Backoff, duration::ConfigDuration};

/// The retry budget and sweep cadence of one delivery table.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DeliveryRetryConfig {
    /// Attempts before a row is marked `failed`.
    pub max_attempts: u32,
    /// Delay after the first failure.
    pub initial_backoff: ConfigDuration,
    /// Delay cap.
    pub max_backoff: ConfigDuration,
    /// How often due rows are looked for.
    pub sweep_interval: ConfigDuration,
    /// Rows per sweep.
    pub sweep_batch: u32,
    /// How long an attempt owns its row before a sweeper may take it over.
    pub claim_lease: ConfigDuration,
}

impl Default for DeliveryRetryConfig {
    fn default() -> Self {
        Self {
            max_attempts: 16,
            initial_backoff: ConfigDuration::from_secs(1),
            max_backoff: ConfigDuration::from_secs(300),
            sweep_interval: ConfigDuration::from_secs(1),
            sweep_batch: 100,
            claim_lease: ConfigDuration::from_secs(30),
        }
    }
}

impl DeliveryRetryConfig {
    /// The wait between attempts (the budget is `max_attempts`): exponential
    /// from `initial_backoff` up to `max_backoff` (non-positive values fall
    /// back to the defaults), with jitter.
    pub fn backoff(&self) -> Backoff {
        let defaults = Self::default();
        Backoff::exponential(
            self.initial_backoff
                .positive_or(defaults.initial_backoff)
                .as_std(),
            self.max_backoff.positive_or(defaults.max_backoff).as_std(),
        )
    }

    /// Delay before the next attempt after `attempts` failed ones, ms:
    /// `backoff().delay(attempts)`.
    pub fn backoff_ms(&self, attempts: u32) -> i64 {
        i64::try_from(self.backoff().delay(attempts).as_millis()).unwrap_or(i64::MAX)
    }

    /// The claim lease, ms.
    pub fn lease_ms(&self) -> i64 {
        self.claim_lease
            .positive_or(Self::default().claim_lease)
            .as_millis()
    }

    /// The sweep interval.
    pub fn sweep_every(&self) -> std::time::Duration {
        self.sweep_interval
            .positive_or(Self::default().sweep_interval)
            .as_std()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let retry = DeliveryRetryConfig::default();
        // The upper end of the jitter range is the un-jittered doubling.
        let ceiling_ms = |attempts| retry.backoff().ceiling(attempts).as_millis();
        assert_eq!(ceiling_ms(1), 1_000);
        assert_eq!(ceiling_ms(3), 4_000);
        assert_eq!(ceiling_ms(30), 300_000);
        // With jitter: between half and all of it.
        for (attempts, ceiling) in [(1, 1_000), (3, 4_000), (30, 300_000), (u32::MAX, 300_000)] {
            let delay = retry.backoff_ms(attempts);
            assert!(
                delay >= ceiling / 2 && delay <= ceiling,
                "{attempts}: {delay}"
            );
        }
    }

    #[test]
    fn non_positive_backoffs_fall_back_to_defaults() {
        let retry = DeliveryRetryConfig {
            initial_backoff: ConfigDuration::from_millis(0),
            max_backoff: ConfigDuration::from_millis(-1),
            ..DeliveryRetryConfig::default()
        };
        assert_eq!(retry.backoff(), DeliveryRetryConfig::default().backoff());
        assert_eq!(retry.backoff().initial(), std::time::Duration::from_secs(1));
    }
}
