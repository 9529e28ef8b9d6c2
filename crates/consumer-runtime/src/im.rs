//! Tencent IM for consumers: the shared `tencent_im` config section (defined
//! once in the tencent-im crate, the same for every service), and how an IM failure becomes a [`HandlerError`]: throttling,
//! server errors and an expired signature are retried; anything else is
//! permanent and its Tencent error code ends up in the dead-letter reason.

use crate::HandlerError;
use serde::{Deserialize, Serialize};
use service_kit::duration::ConfigDuration;
use tencent_im::ErrorClass;

/// The `tencent_im` section of a consumer config: the one shared definition.
pub use tencent_im::ImSection as TencentImSection;

/// Retries of IM deliveries driven from a table (notices, broadcasts): the
/// row commits with the consumed event's effect; delivery is attempted right
/// after, and a failed one is swept up again when due.
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
    /// Delay before the next attempt after `attempts` failed ones.
    pub fn backoff_ms(&self, attempts: u32) -> i64 {
        let defaults = Self::default();
        let initial = self
            .initial_backoff
            .positive_or(defaults.initial_backoff)
            .as_millis();
        let max = self
            .max_backoff
            .positive_or(defaults.max_backoff)
            .as_millis();
        let shift = attempts.saturating_sub(1).min(20);
        initial.saturating_mul(1 << shift).min(max)
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

/// Error text short enough for a `last_error VARCHAR(512)` column.
pub fn short_error(error: &tencent_im::Error) -> String {
    let text = match error.code() {
        Some(code) => format!("error_code={code}: {error}"),
        None => error.to_string(),
    };
    let mut cut = text.len().min(500);
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text[..cut].to_string()
}

/// The IM group of `room_id` under `template` (`{room_id}` replaced).
pub fn group_id(template: &str, room_id: &str) -> String {
    template.replace("{room_id}", room_id)
}

/// Whether an IM failure is worth retrying.
pub fn is_retryable(error: &tencent_im::Error) -> bool {
    match error.class() {
        ErrorClass::RateLimited | ErrorClass::Transient => true,
        // The client already regenerated the signature once; another round
        // later may meet a fixed clock or key rotation.
        ErrorClass::ExpiredSig => true,
        ErrorClass::Permanent => false,
    }
}

/// The handler error for an IM failure; its text carries the Tencent code.
pub fn handler_error(error: &tencent_im::Error) -> HandlerError {
    let text = match error.code() {
        Some(code) => format!("tencent im error_code={code}: {error}"),
        None => format!("tencent im: {error}"),
    };
    if is_retryable(error) {
        HandlerError::Retryable(text)
    } else {
        HandlerError::Permanent(text)
    }
}

/// The start-up checks every consumer service shares, made before anything
/// is connected so a refusal names the key: the `tencent_im` section and the
/// admin `http_listen` address.
pub fn check_service_config(im: &TencentImSection, http_listen: &str) -> Result<(), crate::Error> {
    im.validate()?;
    service_kit::config::check_listen("http_listen", http_listen)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_map_by_class_and_keep_the_code() {
        let limited = tencent_im::Error::HttpStatus {
            api: "openim/sendmsg",
            status: 503,
        };
        assert!(matches!(
            handler_error(&limited),
            HandlerError::Retryable(_)
        ));
        let rejected = tencent_im::Error::HttpStatus {
            api: "openim/sendmsg",
            status: 403,
        };
        assert!(handler_error(&rejected).is_permanent());
        assert_eq!(group_id("room_{room_id}", "r1"), "room_r1");
        let retry = DeliveryRetryConfig::default();
        assert_eq!(retry.backoff_ms(1), 1_000);
        assert_eq!(retry.backoff_ms(3), 4_000);
        assert_eq!(retry.backoff_ms(30), 300_000);
    }
}
