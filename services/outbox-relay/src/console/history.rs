//! What the overview shows over time, kept in memory: the relay's publish
//! count and commit→publish lag sampled every [`SAMPLE_EVERY`] into a ring
//! of the last 15 minutes, and the consumer groups' lag per partition as
//! last read from the broker.
//!
//! Why a ring of the relay's own metrics rather than a query: `room_outbox`
//! has no index on `delivered_at_ms`, so "rows delivered in the last 15
//! minutes" would read the delivered history (millions of rows) on every
//! refresh, competing with the relay's claims; the counters the relay
//! already keeps cost nothing to read. The ring is bounded
//! ([`RING_SAMPLES`]) and holds only this instance's publishes, which the
//! page says. Broker lag is read on this task, off the request path, every
//! [`LAG_EVERY`] (each read bounded by `service_kit::broker_lag::BROKER_TIMEOUT`),
//! so a refreshing page never opens broker connections.

use prometheus_client::{metrics::histogram::Histogram, registry::Registry};
use relay_engine::metrics::RelayMetrics;
use service_kit::broker_lag::{PartitionLag, read_group_lag};
use service_kit::time::now_ms;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often the ring takes a sample.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(10);
/// Samples kept: 15 minutes, plus the one a first delta starts from.
pub const RING_SAMPLES: usize = 91;
/// How often consumer lag is read from the broker.
pub const LAG_EVERY: Duration = Duration::from_secs(30);

/// One reading of the relay's counters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// When.
    pub at_ms: i64,
    /// `room_outbox_publish_success_total` then.
    pub published: u64,
    /// Sum of commit→publish lag observations, seconds.
    pub lag_sum_seconds: f64,
    /// Number of lag observations.
    pub lag_count: u64,
}

/// One consumer group's last lag reading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupLag {
    /// The group.
    pub group: String,
    /// The topic it consumes.
    pub topic: String,
    /// When it was read.
    pub read_at_ms: i64,
    /// Per partition, or why the broker did not answer.
    pub partitions: Result<Vec<PartitionLag>, String>,
}

/// Where the broker lag comes from: the relay's broker client properties
/// and the (group, topic) pairs to read; none in direct mode without a broker.
#[derive(Debug, Clone, Default)]
pub struct LagSources {
    /// `bootstrap.servers` and security, as the relay's producer uses them.
    pub client_properties: Vec<(String, String)>,
    /// Each group with its (namespaced) topic.
    pub groups: Vec<(String, String)>,
}

/// The shared history; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct History {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug, Default)]
struct Inner {
    ring: VecDeque<Sample>,
    lags: Vec<GroupLag>,
    /// The relay's metrics, once [`History::run`] samples them.
    relay: Option<RelayMetrics>,
}

/// The backlog gauges the relay of this process keeps (its own reads of the
/// whole outbox every few seconds, not only of its shards).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gauges {
    /// `room_outbox_pending`.
    pub pending: i64,
    /// `room_outbox_failed`.
    pub failed: i64,
}

impl History {
    /// Records a sample, dropping the oldest past [`RING_SAMPLES`].
    pub fn push(&self, sample: Sample) {
        let mut inner = self.lock();
        if inner.ring.len() == RING_SAMPLES {
            inner.ring.pop_front();
        }
        inner.ring.push_back(sample);
    }

    /// The samples, oldest first.
    pub fn samples(&self) -> Vec<Sample> {
        self.lock().ring.iter().copied().collect()
    }

    /// The last broker lag readings.
    pub fn lags(&self) -> Vec<GroupLag> {
        self.lock().lags.clone()
    }

    /// The backlog gauges of the relay this process runs; None when it runs
    /// none (or before the first gauge read, which a zero would fake).
    pub fn gauges(&self) -> Option<Gauges> {
        let inner = self.lock();
        let relay = inner.relay.as_ref()?;
        let gauges = Gauges {
            pending: relay.pending.get(),
            failed: relay.failed.get(),
        };
        (gauges.pending > 0 || gauges.failed > 0).then_some(gauges)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves plain data behind: keep using it.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Samples `metrics` every [`SAMPLE_EVERY`] and reads `sources`' lag every
    /// [`LAG_EVERY`] until `shutdown`.
    pub async fn run(
        self,
        metrics: RelayMetrics,
        sources: LagSources,
        shutdown: CancellationToken,
    ) {
        self.lock().relay = Some(metrics.clone());
        let mut samples = tokio::time::interval(SAMPLE_EVERY);
        let mut lag = tokio::time::interval(LAG_EVERY);
        samples.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        lag.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = samples.tick() => self.push(sample_of(&metrics)),
                _ = lag.tick(), if !sources.groups.is_empty() => {
                    let lags = read_lags(sources.clone()).await;
                    self.lock().lags = lags;
                }
            }
        }
    }
}

/// The counters of `metrics` now.
pub fn sample_of(metrics: &RelayMetrics) -> Sample {
    let (lag_sum_seconds, lag_count) = sum_and_count(&metrics.commit_to_publish_lag_seconds);
    Sample {
        at_ms: now_ms(),
        published: metrics.publish_success.get(),
        lag_sum_seconds,
        lag_count,
    }
}

/// A histogram's sum and count. prometheus-client exposes them only to its
/// tests, so they are read from the histogram's own text exposition (a
/// registry holding just this handle; a few hundred bytes every sample).
fn sum_and_count(histogram: &Histogram) -> (f64, u64) {
    // Not a service metric (deploy-check reads `registry.register` calls as
    // those): a scratch registry for this one encoding.
    let mut scratch = Registry::default();
    scratch.register("lag", "", histogram.clone());
    let mut text = String::new();
    if prometheus_client::encoding::text::encode(&mut text, &scratch).is_err() {
        return (0.0, 0);
    }
    let value = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (value("lag_sum "), value("lag_count ") as u64)
}

async fn read_lags(sources: LagSources) -> Vec<GroupLag> {
    let read = tokio::task::spawn_blocking(move || {
        sources
            .groups
            .iter()
            .map(|(group, topic)| GroupLag {
                group: group.clone(),
                topic: topic.clone(),
                read_at_ms: now_ms(),
                partitions: read_group_lag(&sources.client_properties, group, topic)
                    .map_err(|error| error.to_string()),
            })
            .collect()
    })
    .await;
    read.unwrap_or_default()
}

/// One minute of the ring: events published and their mean lag.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Minute {
    /// End of the minute.
    pub until_ms: i64,
    /// Events this relay published in it.
    pub published: u64,
    /// Mean commit→publish lag of them, seconds (None when none).
    pub mean_lag_seconds: Option<f64>,
}

/// The ring as per-minute deltas, oldest first (the first sample is only
/// where the first delta starts; a counter that went backwards, a restart,
/// counts from zero).
pub fn minutes(samples: &[Sample]) -> Vec<Minute> {
    let Some(first) = samples.first() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut start = first;
    for (index, sample) in samples.iter().enumerate().skip(1) {
        if sample.at_ms - start.at_ms >= 60_000 || index == samples.len() - 1 {
            out.push(delta(start, sample));
            start = sample;
        }
    }
    out
}

fn delta(from: &Sample, to: &Sample) -> Minute {
    let published = to
        .published
        .checked_sub(from.published)
        .unwrap_or(to.published);
    let count = to
        .lag_count
        .checked_sub(from.lag_count)
        .unwrap_or(to.lag_count);
    let sum = if to.lag_count >= from.lag_count {
        to.lag_sum_seconds - from.lag_sum_seconds
    } else {
        to.lag_sum_seconds
    };
    Minute {
        until_ms: to.at_ms,
        published,
        mean_lag_seconds: (count > 0).then(|| sum / count as f64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64, published: u64, lag_sum: f64, lag_count: u64) -> Sample {
        Sample {
            at_ms: secs * 1_000,
            published,
            lag_sum_seconds: lag_sum,
            lag_count,
        }
    }

    #[test]
    fn histogram_sum_and_count_are_read() {
        let histogram = Histogram::new([0.1, 1.0]);
        assert_eq!(sum_and_count(&histogram), (0.0, 0));
        histogram.observe(0.25);
        histogram.observe(2.0);
        assert_eq!(sum_and_count(&histogram), (2.25, 2));
    }

    #[test]
    fn the_ring_is_bounded() {
        let history = History::default();
        for second in 0..(RING_SAMPLES as i64 + 10) {
            history.push(at(second, 0, 0.0, 0));
        }
        let samples = history.samples();
        assert_eq!(samples.len(), RING_SAMPLES);
        assert_eq!(samples[0].at_ms, 10_000);
    }

    #[test]
    fn minutes_are_deltas_of_the_counters() {
        let samples: Vec<Sample> = (0..=12)
            .map(|step| {
                at(
                    step * 10,
                    step as u64 * 100,
                    step as f64 * 5.0,
                    step as u64 * 100,
                )
            })
            .collect();
        let per_minute = minutes(&samples);
        assert_eq!(per_minute.len(), 2);
        assert_eq!(per_minute[0].published, 600);
        assert_eq!(per_minute[0].until_ms, 60_000);
        assert!((per_minute[0].mean_lag_seconds.unwrap() - 0.05).abs() < 1e-9);
        // A restart (counter back to a small value) counts from zero.
        let restarted = [at(0, 500, 1.0, 10), at(60, 7, 0.7, 7)];
        assert_eq!(minutes(&restarted)[0].published, 7);
        assert_eq!(minutes(&[at(0, 0, 0.0, 0)]), Vec::new());
    }
}
