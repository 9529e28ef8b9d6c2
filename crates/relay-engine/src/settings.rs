//! Validated, normalised relay settings derived from [`OutboxWorkerConfig`]
//! and the `rocketmq` section. This is where the rules of
//! docs/design.md#configuration-names live: non-positive durations and sizes
//! fall back to defaults (never a busy loop, a full scan or an unbounded
//! call) and an oversized batch is cut to [`MAX_BATCH_SIZE`] — never
//! silently: each such value is listed in [`RelaySettings::adjusted`] and
//! logged as a warning naming the key when the relay is built (docs/style.md,
//! configuration); unknown strategies or modes, or `mq`/`dual` without the MQ
//! publisher enabled, are start-up errors naming the key.

use crate::{
    Error,
    config::{OutboxWorkerConfig, PublishMode},
};
use service_kit::{
    Secret,
    adjusted::{Adjusted, Adjustments},
    backoff::{Backoff, Jitter, Strategy},
    mq::MqConfig,
};
use std::time::Duration;

/// Largest accepted `batch_size`; bigger values are cut to it, with a
/// warning (one claim statement must stay small enough not to hold locks
/// for long).
pub const MAX_BATCH_SIZE: usize = 5_000;

/// Settings the relay runs with.
#[derive(Debug, Clone)]
pub struct RelaySettings {
    /// Where events go.
    pub publish_mode: PublishMode,
    /// Idle polling interval.
    pub poll_interval: Duration,
    /// Rows claimed per batch.
    pub batch_size: usize,
    /// Deadline of one publish.
    pub publish_timeout: Duration,
    /// Attempts before dead-lettering.
    pub max_retry_count: u32,
    /// Wait before a failed row is due again: `retry_strategy` from
    /// `initial_backoff` up to `max_backoff`.
    pub backoff: Backoff,
    /// Exclusive claim duration.
    pub claim_lease: Duration,
    /// Shard lease duration.
    pub shard_lease: Duration,
    /// Subscribe to the commit nudge.
    pub nudge_enabled: bool,
    /// Redis URL of the nudge channel; a [`Secret`] because it may carry a
    /// password and the settings are `Debug`.
    pub redis_url: Secret,
    /// CA file of a `rediss://` nudge server (empty = system roots).
    pub redis_tls_ca_file: String,
    /// Delivered-row retention for purge.
    pub retention: Duration,
    /// This instance's id (leases, logs, `claimed_by`).
    pub node_id: String,
    /// Full name of the room-events topic (namespace applied).
    pub room_outbox_topic: String,
    /// Full name of the treasure wake-up topic (namespace applied).
    pub treasure_open_topic: String,
    /// `mq` mode through the two-write path of `direct`/`dual` (claim to
    /// `delivering`, then mark) instead of publishing on the shard lease
    /// alone. Not a config key: always false from [`Self::from_config`]; the
    /// benchmark sets it to measure the old path beside the new one.
    pub claim_mq_rows: bool,
    /// Values the config gave that the relay does not run with (the
    /// documented fallbacks and the batch cap); [`crate::build_relay`] logs
    /// each as a warning.
    pub adjusted: Vec<Adjusted>,
}

impl RelaySettings {
    /// Validates the config; errors name the offending key.
    pub fn from_config(worker: &OutboxWorkerConfig, mq: &MqConfig) -> Result<Self, Error> {
        let defaults = OutboxWorkerConfig::default();
        let publish_mode = publish_mode(worker, mq)?;
        let retry_strategy = retry_strategy(worker)?;
        let mut adjusted = Adjustments::default();
        let batch_size = batch_size(&mut adjusted, worker.batch_size, defaults.batch_size);
        let max_retry_count = positive_count(
            &mut adjusted,
            "outbox_worker.max_retry_count",
            worker.max_retry_count,
            defaults.max_retry_count,
        );
        let backoff = backoff(&mut adjusted, worker, &defaults, retry_strategy);
        if worker.nudge_enabled {
            // Checked now (scheme, CA file) so a bad value stops the start-up
            // instead of leaving the relay polling-only with a warning per retry.
            crate::nudge::check(worker)?;
        }
        let node_id = if worker.node_id.is_empty() {
            default_node_id()
        } else {
            worker.node_id.clone()
        };
        Ok(Self {
            publish_mode,
            poll_interval: adjusted
                .positive(
                    "outbox_worker.poll_interval",
                    worker.poll_interval,
                    defaults.poll_interval,
                )
                .as_std(),
            batch_size,
            publish_timeout: adjusted
                .positive(
                    "outbox_worker.publish_timeout",
                    worker.publish_timeout,
                    defaults.publish_timeout,
                )
                .as_std(),
            max_retry_count: u32::try_from(max_retry_count).unwrap_or(u32::MAX),
            backoff,
            claim_lease: adjusted
                .positive(
                    "outbox_worker.claim_lease",
                    worker.claim_lease,
                    defaults.claim_lease,
                )
                .as_std(),
            shard_lease: adjusted
                .positive(
                    "outbox_worker.shard_lease",
                    worker.shard_lease,
                    defaults.shard_lease,
                )
                .as_std(),
            nudge_enabled: worker.nudge_enabled,
            redis_url: Secret::new(worker.redis_url.as_str()),
            redis_tls_ca_file: worker.redis_tls_ca_file.clone(),
            retention: adjusted
                .positive(
                    "outbox_worker.retention",
                    worker.retention,
                    defaults.retention,
                )
                .as_std(),
            node_id,
            room_outbox_topic: mq.topic(&mq.room_outbox.topic),
            treasure_open_topic: mq.topic(&mq.treasure_open.topic),
            claim_mq_rows: false,
            adjusted: adjusted.into_vec(),
        })
    }

    /// True when the mode includes the broker.
    pub fn uses_mq(&self) -> bool {
        matches!(self.publish_mode, PublishMode::Mq | PublishMode::Dual)
    }

    /// True when the mode includes the direct sinks.
    pub fn uses_direct(&self) -> bool {
        matches!(self.publish_mode, PublishMode::Direct | PublishMode::Dual)
    }
}

/// `outbox_worker.publish_mode`, refused unless known and, for `mq`/`dual`,
/// unless the broker's publisher is enabled.
fn publish_mode(worker: &OutboxWorkerConfig, mq: &MqConfig) -> Result<PublishMode, Error> {
    let publish_mode = match worker.publish_mode.as_str() {
        "direct" => PublishMode::Direct,
        "mq" => PublishMode::Mq,
        "dual" => PublishMode::Dual,
        other => {
            return Err(Error::Config(format!(
                "outbox_worker.publish_mode `{other}` is not one of direct, mq, dual"
            )));
        }
    };
    if matches!(publish_mode, PublishMode::Mq | PublishMode::Dual)
        && !(mq.enabled && mq.room_outbox.enabled)
    {
        return Err(Error::Config(format!(
            "outbox_worker.publish_mode={} requires rocketmq.enabled=true and rocketmq.room_outbox.enabled=true",
            worker.publish_mode
        )));
    }
    Ok(publish_mode)
}

/// `outbox_worker.retry_strategy`, refused unless known.
fn retry_strategy(worker: &OutboxWorkerConfig) -> Result<Strategy, Error> {
    Ok(match worker.retry_strategy.as_str() {
        "exponential_backoff" => Strategy::Exponential,
        // An empty value means the phase-1 default
        // (docs/design.md#configuration-names).
        "fixed_interval" | "" => Strategy::Fixed,
        other => {
            return Err(Error::Config(format!(
                "outbox_worker.retry_strategy `{other}` is not one of exponential_backoff, fixed_interval"
            )));
        }
    })
}

/// The wait before a failed row is due again, from `initial_backoff` up to
/// `max_backoff` by `strategy`.
fn backoff(
    adjusted: &mut Adjustments,
    worker: &OutboxWorkerConfig,
    defaults: &OutboxWorkerConfig,
    strategy: Strategy,
) -> Backoff {
    let initial_backoff = adjusted.positive(
        "outbox_worker.initial_backoff",
        worker.initial_backoff,
        defaults.initial_backoff,
    );
    let max_backoff = adjusted.positive(
        "outbox_worker.max_backoff",
        worker.max_backoff,
        defaults.max_backoff,
    );
    // A cap below the first wait cannot be meant as written: the first
    // wait wins, as it always did, and the cap is reported raised.
    let max_backoff = adjusted.at_least("outbox_worker.max_backoff", max_backoff, initial_backoff);
    let (initial_backoff, max_backoff) = (initial_backoff.as_std(), max_backoff.as_std());
    // `fixed_interval` keeps its documented contract — exactly
    // `initial_backoff` every time — so only the exponential strategy jitters.
    Backoff::new(strategy, initial_backoff, max_backoff).with_jitter(match strategy {
        Strategy::Exponential => Jitter::Equal,
        Strategy::Fixed => Jitter::None,
    })
}

/// `batch_size`: a non-positive value falls back to the default, a value
/// over [`MAX_BATCH_SIZE`] is cut to it; both recorded.
fn batch_size(adjusted: &mut Adjustments, given: i64, default: i64) -> usize {
    let positive = positive_count(adjusted, "outbox_worker.batch_size", given, default);
    let capped = adjusted.at_most("outbox_worker.batch_size", positive, MAX_BATCH_SIZE as i64);
    usize::try_from(capped).unwrap_or(MAX_BATCH_SIZE)
}

/// `given` when positive, else `default` (recorded).
fn positive_count(adjusted: &mut Adjustments, key: &str, given: i64, default: i64) -> i64 {
    if given > 0 {
        return given;
    }
    adjusted.note(key, given, default);
    default
}

fn default_node_id() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .map(|name| name.trim().to_string())
        .unwrap_or_else(|_| "relay".into());
    format!("{host}-{}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;
    use service_kit::duration::ConfigDuration;

    fn mq_enabled() -> MqConfig {
        let mut mq = MqConfig {
            enabled: true,
            ..MqConfig::default()
        };
        mq.room_outbox.enabled = true;
        mq
    }

    #[test]
    fn non_positive_values_fall_back_to_defaults() {
        let worker = OutboxWorkerConfig {
            poll_interval: ConfigDuration::from_millis(0),
            batch_size: -5,
            publish_timeout: ConfigDuration::from_millis(-1),
            max_retry_count: 0,
            ..OutboxWorkerConfig::default()
        };
        let settings = RelaySettings::from_config(&worker, &MqConfig::default()).unwrap();
        assert_eq!(settings.poll_interval, Duration::from_secs(1));
        assert_eq!(settings.batch_size, 100);
        assert_eq!(settings.publish_timeout, Duration::from_secs(3));
        assert_eq!(settings.max_retry_count, 10);
        let keys: Vec<&str> = settings
            .adjusted
            .iter()
            .map(|adjusted| adjusted.key.as_str())
            .collect();
        assert_eq!(
            keys,
            [
                "outbox_worker.batch_size",
                "outbox_worker.max_retry_count",
                "outbox_worker.poll_interval",
                "outbox_worker.publish_timeout"
            ],
            "every fallback is reported, naming its key"
        );
        let defaults =
            RelaySettings::from_config(&OutboxWorkerConfig::default(), &MqConfig::default());
        assert!(
            defaults.unwrap().adjusted.is_empty(),
            "the defaults need no adjustment"
        );
    }

    #[test]
    fn unknown_strategy_and_mode_name_the_key() {
        let worker = OutboxWorkerConfig {
            retry_strategy: "linear".into(),
            ..OutboxWorkerConfig::default()
        };
        let error = RelaySettings::from_config(&worker, &MqConfig::default())
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("outbox_worker.retry_strategy") && error.contains("linear"),
            "{error}"
        );

        let worker = OutboxWorkerConfig {
            publish_mode: "kafka".into(),
            ..OutboxWorkerConfig::default()
        };
        let error = RelaySettings::from_config(&worker, &MqConfig::default())
            .unwrap_err()
            .to_string();
        assert!(error.contains("outbox_worker.publish_mode"), "{error}");
    }

    #[test]
    fn mq_and_dual_require_the_mq_publisher() {
        for mode in ["mq", "dual"] {
            let worker = OutboxWorkerConfig {
                publish_mode: mode.into(),
                ..OutboxWorkerConfig::default()
            };
            let error = RelaySettings::from_config(&worker, &MqConfig::default())
                .unwrap_err()
                .to_string();
            assert!(error.contains("rocketmq.room_outbox.enabled"), "{error}");
            assert!(RelaySettings::from_config(&worker, &mq_enabled()).is_ok());
        }
    }

    #[test]
    fn empty_strategy_means_fixed_interval_and_batch_is_clamped() {
        let worker = OutboxWorkerConfig {
            retry_strategy: String::new(),
            batch_size: 1_000_000,
            ..OutboxWorkerConfig::default()
        };
        let settings = RelaySettings::from_config(&worker, &MqConfig::default()).unwrap();
        assert_eq!(settings.backoff.strategy(), Strategy::Fixed);
        assert_eq!(settings.batch_size, MAX_BATCH_SIZE);
        assert_eq!(
            settings.adjusted[0].to_string(),
            "outbox_worker.batch_size: given 1000000, using 5000"
        );
    }

    #[test]
    fn a_max_backoff_below_the_initial_one_is_raised_and_reported() {
        let worker = OutboxWorkerConfig {
            initial_backoff: ConfigDuration::from_secs(5),
            max_backoff: ConfigDuration::from_secs(1),
            ..OutboxWorkerConfig::default()
        };
        let settings = RelaySettings::from_config(&worker, &MqConfig::default()).unwrap();
        assert_eq!(settings.backoff.delay_with(1, 1.0), Duration::from_secs(5));
        assert_eq!(settings.adjusted.len(), 1, "{:?}", settings.adjusted);
        assert_eq!(
            settings.adjusted[0].to_string(),
            "outbox_worker.max_backoff: given 1s, using 5s"
        );
    }

    const SECOND: Duration = Duration::from_secs(1);

    fn backoff(strategy: &str, max_secs: i64) -> Backoff {
        let worker = OutboxWorkerConfig {
            retry_strategy: strategy.into(),
            initial_backoff: ConfigDuration::from_secs(1),
            max_backoff: ConfigDuration::from_secs(max_secs),
            ..OutboxWorkerConfig::default()
        };
        RelaySettings::from_config(&worker, &MqConfig::default())
            .unwrap()
            .backoff
    }

    #[test]
    fn fixed_interval_never_grows() {
        let backoff = backoff("fixed_interval", 60);
        for count in [1, 2, 10, 1000] {
            assert_eq!(backoff.delay_with(count, 0.7), SECOND);
            assert_eq!(
                backoff.delay(count),
                SECOND,
                "fixed_interval is not jittered"
            );
        }
    }

    #[test]
    fn exponential_doubles_then_caps_with_bounded_jitter() {
        let backoff = backoff("exponential_backoff", 10);
        let delay = |count, jitter| backoff.delay_with(count, jitter);
        assert_eq!(delay(1, 0.0), SECOND / 2);
        assert_eq!(delay(1, 1.0), SECOND);
        assert_eq!(delay(2, 1.0), SECOND * 2);
        assert_eq!(delay(3, 1.0), SECOND * 4);
        assert_eq!(delay(5, 1.0), SECOND * 10, "capped at max_backoff");
        assert_eq!(delay(u32::MAX, 1.0), SECOND * 10, "no overflow");
        assert!(delay(4, 0.5) >= SECOND * 4 && delay(4, 0.5) <= SECOND * 8);
        let random = backoff.delay(4);
        assert!(random >= SECOND * 4 && random <= SECOND * 8, "{random:?}");
    }
}
