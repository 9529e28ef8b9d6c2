//! A consumer hosted by another process (room-service runs the IM bridge
//! in-process): the consumer plus its group's dedup purge and its lag read
//! from the broker (`crate::lag`), without the admin
//! HTTP, pool ownership or signal handling that [`super::Host`] adds for a
//! standalone service.

use super::Error;
use crate::{
    Consumer, ConsumerMetrics, ConsumerSettings, Decode, DedupPurge, Handler, lag::LagMonitor,
    purge,
};
use service_kit::db::statement::BoundedPool;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// A consumer and its dedup purge, embeddable in any process.
#[derive(Debug)]
pub struct EmbeddedConsumer<M, H> {
    consumer: Consumer<M, H>,
    db: BoundedPool,
    consumer_group: String,
    dedup_purge: DedupPurge,
    lag_monitor: LagMonitor,
}

impl<M: Decode, H: Handler<M>> EmbeddedConsumer<M, H> {
    /// Creates the consumer (subscribed, not yet consuming); `db` holds
    /// the group's `consumer_dedup` rows (its purge runs under the pool's
    /// `mysql.statement_timeout`, the default for a bare pool) and stays the
    /// caller's to close.
    pub fn new(
        settings: ConsumerSettings,
        handler: Arc<H>,
        db: impl Into<BoundedPool>,
        metrics: &ConsumerMetrics,
    ) -> Result<Self, Error> {
        let consumer_group = settings.consumer_group.clone();
        let dedup_purge = settings.dedup_purge;
        let lag_monitor = LagMonitor::new(&settings, metrics);
        let consumer = Consumer::new(settings, handler, metrics)?;
        Ok(Self {
            consumer,
            db: db.into(),
            consumer_group,
            dedup_purge,
            lag_monitor,
        })
    }

    /// Consumes until `shutdown`, then drains and commits. The purge and the
    /// lag reader stop with `shutdown` and are dropped once the consumer
    /// returned, so nothing of them outlives this call (the caller closes
    /// the pool after).
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), Error> {
        let purger = tokio::spawn(purge::run_purger(
            self.db,
            self.consumer_group,
            self.dedup_purge,
            shutdown.child_token(),
        ));
        let lag = tokio::spawn(self.lag_monitor.run(shutdown.child_token()));
        let result = self.consumer.run(shutdown).await;
        purger.abort();
        lag.abort();
        Ok(result?)
    }
}
