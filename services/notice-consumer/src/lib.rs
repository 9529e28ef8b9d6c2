//! Notice consumer: consumes room facts from `hyapp_room_outbox` in group
//! `hyapp-notice-room-outbox`, turns private-notice facts into rows of
//! `notice_delivery_events` (exactly once, with the dedup claim in the same
//! transaction) and delivers each row as one C2C IM message, retrying failed
//! deliveries from the table (see [`notices`]).
//!
//! [`App`] is the consumer host ([`consumer_runtime::host`]) running
//! [`Service`]: the [`NoticeProcessor`] as handler and its delivery sweeper
//! as a background task.

pub mod config;
pub mod notices;

use config::Config;
use consumer_runtime::host::{self, ConsumerService, FailedDeliveries};
use notices::{NoticeDeliveries, NoticeProcessor};
use outbox_schema::pb;
use std::sync::Arc;

/// Errors of the notice consumer (the consumer services' one error type).
pub use consumer_runtime::host::Error;

/// The notice-consumer service: Kafka consumer, delivery sweeper, dedup
/// purge and admin HTTP.
pub type App = host::Host<Service>;

/// The notice consumer as a consumer service.
#[derive(Debug)]
pub struct Service;

impl ConsumerService for Service {
    type Config = Config;
    type Message = pb::RoomOutboxEvent;
    type Handler = NoticeProcessor;
    const ABOUT: &str = "Turns private-notice room facts into C2C IM messages";

    async fn build(
        config: &Config,
        host: &mut host::Builder,
    ) -> Result<Arc<NoticeProcessor>, Error> {
        let im = config.tencent_im.client().map_err(Error::config)?;
        Ok(NoticeProcessor::start(
            im,
            config.notice.delivery.clone(),
            host,
        ))
    }

    fn failed_deliveries() -> Option<FailedDeliveries> {
        Some(FailedDeliveries::of::<NoticeDeliveries>())
    }
}
