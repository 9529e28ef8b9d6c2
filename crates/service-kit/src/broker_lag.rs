//! Consumer lag as the broker sees it: per partition of a topic, a
//! consumer group's committed offset against the partition's high
//! watermark. One owner for every reader: the consumers' `consumer-lag`
//! command and lag gauges (`consumer_runtime::lag`) and the relay's
//! operator console, which shows every group's lag without depending on the
//! consumer runtime.
//!
//! The reading needs no running consumer: [`read_group_lag`] asks the broker
//! directly with its own client (the group's id, never subscribed, so it
//! never joins the group or takes partitions), each broker call bounded by
//! [`BROKER_TIMEOUT`]. Blocking: call it from a blocking thread.

use crate::Error;
use rdkafka::{
    ClientConfig, Offset, TopicPartitionList,
    consumer::{BaseConsumer, Consumer as _},
};
use std::time::Duration;

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
    let client: BaseConsumer = config.create().map_err(broker)?;
    let metadata = client
        .fetch_metadata(Some(topic), BROKER_TIMEOUT)
        .map_err(broker)?;
    let partitions: Vec<i32> = metadata
        .topics()
        .iter()
        .filter(|entry| entry.name() == topic && entry.error().is_none())
        .flat_map(|entry| entry.partitions().iter().map(|partition| partition.id()))
        .collect();
    if partitions.is_empty() {
        return Err(Error::Broker(format!(
            "topic {topic} does not exist or has no partitions"
        )));
    }
    let mut wanted = TopicPartitionList::new();
    for partition in &partitions {
        wanted.add_partition(topic, *partition);
    }
    let committed = client
        .committed_offsets(wanted, BROKER_TIMEOUT)
        .map_err(broker)?;
    let mut lags = Vec::with_capacity(partitions.len());
    for partition in partitions {
        let (low_watermark, high_watermark) = client
            .fetch_watermarks(topic, partition, BROKER_TIMEOUT)
            .map_err(broker)?;
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

fn broker(error: rdkafka::error::KafkaError) -> Error {
    Error::Broker(error.to_string())
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
