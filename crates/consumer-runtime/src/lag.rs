//! Consumer lag as the broker sees it: per partition of the group's topic,
//! the group's committed offset against the partition's high watermark.
//!
//! The reading itself lives in `service_kit::broker_lag` (one owner: the
//! relay's operator console reads it too); this module exports it.
//! Unlike `consumer_lag_seconds` (measured on the messages a consumer
//! handles), this reading needs no running consumer: [`read_group_lag`]
//! asks the broker directly, so the `consumer-lag` command (`host::cli`)
//! reports a group whose consumers are all down, and [`LagMonitor`] exports
//! it from a running consumer as `consumer_partition_lag_messages` and
//! `consumer_partition_committed_offset`.
//!
//! Off the hot path by construction: its own client (the group's id, never
//! subscribed, so it never joins the group or takes partitions), a blocking
//! read on the blocking pool every [`LAG_INTERVAL`], each broker call bounded
//! by [`BROKER_TIMEOUT`]. The gauges hold one series per partition of one
//! topic, a fixed number.

use crate::{ConsumerSettings, Error, metrics::ConsumerMetrics};
pub use service_kit::broker_lag::{BROKER_TIMEOUT, PartitionLag};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often a running consumer reads its group's lag from the broker.
pub const LAG_INTERVAL: Duration = Duration::from_secs(15);

/// Exports a running consumer's group lag, read from the broker on a timer.
#[derive(Debug, Clone)]
pub struct LagMonitor {
    client_properties: Vec<(String, String)>,
    group: String,
    topic: String,
    metrics: ConsumerMetrics,
}

impl LagMonitor {
    /// A monitor of the group and topic of `settings`, exporting into `metrics`.
    pub fn new(settings: &ConsumerSettings, metrics: &ConsumerMetrics) -> Self {
        Self {
            client_properties: settings.client_properties.clone(),
            group: settings.consumer_group.clone(),
            topic: settings.topic.clone(),
            metrics: metrics.clone(),
        }
    }

    /// One reading: the gauges of every partition, or the error (the gauges
    /// then keep their last values; a broker outage shows elsewhere).
    pub async fn read_once(&self) -> Result<Vec<PartitionLag>, Error> {
        let (properties, group, topic) = (
            self.client_properties.clone(),
            self.group.clone(),
            self.topic.clone(),
        );
        let lags = tokio::task::spawn_blocking(move || read_group_lag(&properties, &group, &topic))
            .await
            .map_err(|error| Error::Config(format!("lag reader task failed: {error}")))??;
        for lag in &lags {
            self.metrics
                .record_partition_lag(&self.group, lag.partition, lag.committed, lag.lag());
        }
        Ok(lags)
    }

    /// Reads every [`LAG_INTERVAL`] until `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) {
        let mut ticker = tokio::time::interval(LAG_INTERVAL);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = ticker.tick() => {}
            }
            if let Err(error) = self.read_once().await {
                tracing::warn!(consumer_group = %self.group, %error, "reading consumer lag from the broker failed");
            }
        }
    }
}

/// Reads `group`'s lag on `topic` from the broker named in
/// `client_properties`; `service_kit::broker_lag::read_group_lag` with this
/// crate's error. Blocking: call it from a blocking thread.
pub fn read_group_lag(
    client_properties: &[(String, String)],
    group: &str,
    topic: &str,
) -> Result<Vec<PartitionLag>, Error> {
    Ok(service_kit::broker_lag::read_group_lag(
        client_properties,
        group,
        topic,
    )?)
}
