//! Consumer lag as the broker sees it: per partition of the group's topic,
//! the group's committed offset against the partition's high watermark.
//!
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
use rdkafka::{
    ClientConfig, Offset, TopicPartitionList,
    consumer::{BaseConsumer, Consumer as _},
};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often a running consumer reads its group's lag from the broker.
pub const LAG_INTERVAL: Duration = Duration::from_secs(15);

/// Bound on each broker call of one reading (metadata, committed offsets,
/// one watermark query per partition).
pub const BROKER_TIMEOUT: Duration = Duration::from_secs(5);

/// One partition's position as the broker reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionLag {
    /// Partition number.
    pub partition: i32,
    /// The group's committed offset (the next message it will read); `None`
    /// when the group has committed nothing on this partition.
    pub committed: Option<i64>,
    /// Oldest offset the broker still holds.
    pub low_watermark: i64,
    /// Offset the next produced message gets.
    pub high_watermark: i64,
}

impl PartitionLag {
    /// Messages the group has not consumed: from its committed offset (or,
    /// without one, from the oldest message the broker holds, which is where
    /// the group starts: `auto.offset.reset=earliest`) to the high watermark.
    /// A committed offset below the low watermark counts from the low
    /// watermark: retention already removed what lies between.
    pub fn lag(&self) -> i64 {
        let from = self
            .committed
            .unwrap_or(self.low_watermark)
            .max(self.low_watermark);
        (self.high_watermark - from).max(0)
    }
}

/// Reads `group`'s lag on `topic` from the broker named in
/// `client_properties` (bootstrap servers, security). Blocking: call it from
/// a blocking thread. Fails when the topic does not exist or the broker does
/// not answer within [`BROKER_TIMEOUT`] per call.
pub fn read_group_lag(
    client_properties: &[(String, String)],
    group: &str,
    topic: &str,
) -> Result<Vec<PartitionLag>, Error> {
    let mut config = ClientConfig::new();
    for (key, value) in client_properties {
        config.set(key, value);
    }
    // The group's id only to read its offsets: never subscribed, so this
    // client never joins the group or moves a partition.
    config
        .set("group.id", group)
        .set("client.id", format!("{group}-lag-reader"))
        .set("enable.auto.commit", "false");
    let client: BaseConsumer = config.create()?;
    let metadata = client.fetch_metadata(Some(topic), BROKER_TIMEOUT)?;
    let partitions: Vec<i32> = metadata
        .topics()
        .iter()
        .filter(|entry| entry.name() == topic && entry.error().is_none())
        .flat_map(|entry| entry.partitions().iter().map(|partition| partition.id()))
        .collect();
    if partitions.is_empty() {
        return Err(Error::Config(format!(
            "topic {topic} does not exist or has no partitions"
        )));
    }
    let mut wanted = TopicPartitionList::new();
    for partition in &partitions {
        wanted.add_partition(topic, *partition);
    }
    let committed = client.committed_offsets(wanted, BROKER_TIMEOUT)?;
    let mut lags = Vec::with_capacity(partitions.len());
    for partition in partitions {
        let (low_watermark, high_watermark) =
            client.fetch_watermarks(topic, partition, BROKER_TIMEOUT)?;
        let committed = match committed
            .find_partition(topic, partition)
            .map(|element| element.offset())
        {
            Some(Offset::Offset(offset)) => Some(offset),
            _ => None,
        };
        lags.push(PartitionLag {
            partition,
            committed,
            low_watermark,
            high_watermark,
        });
    }
    Ok(lags)
}

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

#[cfg(test)]
mod tests {
    use super::PartitionLag;

    fn at(committed: Option<i64>, low: i64, high: i64) -> i64 {
        PartitionLag {
            partition: 0,
            committed,
            low_watermark: low,
            high_watermark: high,
        }
        .lag()
    }

    #[test]
    fn lag_counts_from_the_committed_offset_or_the_oldest_retained_message() {
        assert_eq!(at(Some(7), 0, 10), 3);
        assert_eq!(at(Some(10), 0, 10), 0);
        assert_eq!(at(None, 4, 10), 6);
        // Retention removed messages the group never read: only what is left counts.
        assert_eq!(at(Some(2), 5, 10), 5);
        assert_eq!(at(None, 0, 0), 0);
    }
}
