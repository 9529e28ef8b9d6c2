//! The librdkafka group consumer type ([`KafkaConsumer`]) and its context
//! ([`RebalanceContext`]): the rebalance hooks that flag revoked partitions
//! and queue assignment changes, the commit callback, and the latest
//! per-partition fetch statistics.
//!
//! The dispatcher (`consumer`) creates the consumer and reads the context;
//! the partition workers (`worker`) store offsets through it. Keeping the
//! type in this leaf, which names nothing else of the crate, lets both use
//! it without `worker` importing `consumer`, which spawns the workers.

use rdkafka::{
    ClientContext, Statistics, TopicPartitionList,
    consumer::{BaseConsumer, ConsumerContext, Rebalance, StreamConsumer},
    error::{KafkaError, KafkaResult},
    types::RDKafkaErrorCode,
};
use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Instant,
};

/// The librdkafka consumer with our rebalance hooks.
pub(crate) type KafkaConsumer = StreamConsumer<RebalanceContext>;

/// Rebalance hooks: flag revoked partitions so their workers stop taking
/// messages, and queue assignment changes for the dispatcher. Also keeps
/// librdkafka's latest per-partition fetch statistics.
pub(crate) struct RebalanceContext {
    consumer_group: String,
    topic: String,
    /// Revoked flag of each partition's current worker.
    pub(crate) revoke_flags: Mutex<HashMap<i32, Arc<AtomicBool>>>,
    /// Assignment changes not yet applied by the dispatcher.
    pub(crate) changes: Mutex<Vec<AssignmentChange>>,
    /// Whether `changes` holds anything (checked without the lock).
    pub(crate) changes_pending: AtomicBool,
    /// librdkafka's latest fetch statistics per partition.
    pub(crate) fetch_stats: Mutex<HashMap<i32, FetchStats>>,
}

/// One rebalance outcome, applied by the dispatcher in order.
pub(crate) enum AssignmentChange {
    Assigned(Vec<i32>),
    Revoked(Vec<i32>),
}

/// What librdkafka last reported about fetching one partition.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FetchStats {
    /// The broker's high watermark.
    pub(crate) high_watermark: i64,
    /// The offset librdkafka fetches next.
    pub(crate) fetch_offset: i64,
    /// Messages fetched but not yet handed to the dispatcher.
    pub(crate) queued: i64,
    pub(crate) reported_at: Instant,
}

impl ClientContext for RebalanceContext {
    fn stats(&self, statistics: Statistics) {
        let Some(topic) = statistics.topics.get(&self.topic) else {
            return;
        };
        let now = Instant::now();
        let mut fetch_stats = lock(&self.fetch_stats);
        for (partition, stats) in &topic.partitions {
            if *partition >= 0 {
                fetch_stats.insert(
                    *partition,
                    FetchStats {
                        high_watermark: stats.hi_offset,
                        fetch_offset: stats.next_offset,
                        queued: stats.fetchq_cnt,
                        reported_at: now,
                    },
                );
            }
        }
    }
}

impl RebalanceContext {
    /// A context for `consumer_group`'s consumer of `topic`, with nothing assigned yet.
    pub(crate) fn new(consumer_group: String, topic: String) -> Self {
        Self {
            consumer_group,
            topic,
            revoke_flags: Mutex::new(HashMap::new()),
            changes: Mutex::new(Vec::new()),
            changes_pending: AtomicBool::new(false),
            fetch_stats: Mutex::new(HashMap::new()),
        }
    }

    fn record(&self, change: AssignmentChange) {
        lock(&self.changes).push(change);
        self.changes_pending.store(true, Ordering::Release);
    }
}

impl ConsumerContext for RebalanceContext {
    fn pre_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Revoke(partitions) => {
                let partitions: Vec<i32> = partitions
                    .elements()
                    .iter()
                    .filter(|element| element.topic() == self.topic)
                    .map(|element| element.partition())
                    .collect();
                {
                    let flags = lock(&self.revoke_flags);
                    for partition in &partitions {
                        if let Some(flag) = flags.get(partition) {
                            flag.store(true, Ordering::Relaxed);
                        }
                    }
                }
                tracing::info!(consumer_group = %self.consumer_group, ?partitions, "partitions revoked");
                self.record(AssignmentChange::Revoked(partitions));
            }
            Rebalance::Assign(partitions) => {
                let partitions: Vec<i32> = partitions
                    .elements()
                    .iter()
                    .filter(|element| element.topic() == self.topic)
                    .map(|element| element.partition())
                    .collect();
                tracing::info!(consumer_group = %self.consumer_group, ?partitions, "partitions assigned");
                self.record(AssignmentChange::Assigned(partitions));
            }
            Rebalance::Error(error) => {
                tracing::warn!(consumer_group = %self.consumer_group, %error, "rebalance failed");
            }
        }
    }

    fn commit_callback(&self, result: KafkaResult<()>, _offsets: &TopicPartitionList) {
        match result {
            Ok(()) | Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => {}
            Err(error) => {
                tracing::warn!(consumer_group = %self.consumer_group, %error, "offset commit failed");
            }
        }
    }
}

/// Locks one of the context's mutexes.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The guarded data are plain collections; a panic elsewhere leaves them usable.
    mutex.lock().unwrap_or_else(|poison| poison.into_inner())
}
