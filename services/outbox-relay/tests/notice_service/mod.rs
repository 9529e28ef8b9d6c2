//! notice-consumer's service for the relay's tests, composed as its
//! `lib.rs` composes it: its handler module included by file (no test crate
//! depends on a service; ARCHITECTURE.md, "Tests share fixtures by file"),
//! the config sections it reads, the notice handler with its delivery
//! sweeper, and its delivery table for `deliveries retry`.

#[allow(
    dead_code,
    reason = "notice-consumer's handler module; the tests use part of it"
)]
#[path = "../../../notice-consumer/src/notices.rs"]
mod notices;

use consumer_runtime::{
    ConsumerConfig,
    delivery::DeliveryRetryConfig,
    host::{self, ConsumerService, FailedDeliveries, ServiceConfig, SharedSections},
};
use notices::{NoticeDeliveries, NoticeProcessor};
use outbox_schema::{groups, pb};
use service_kit::{db::MysqlConfig, mq::MqConfig, telemetry::LogConfig};
use std::{fmt::Display, sync::Arc};

/// notice-consumer's service.
pub struct Notice;

/// The sections of notice-consumer's config the service reads.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Config {
    pub log: LogConfig,
    pub mysql: MysqlConfig,
    pub rocketmq: MqConfig,
    pub consumer: ConsumerConfig,
    pub tencent_im: tencent_im::ImSection,
    pub delivery: DeliveryRetryConfig,
    pub http_listen: String,
}

impl ServiceConfig for Config {
    const SERVICE: &str = "notice-consumer";
    const ENV_PREFIX: &str = "NOTICE";

    fn shared(&self) -> SharedSections<'_> {
        SharedSections {
            log: &self.log,
            mysql: &self.mysql,
            rocketmq: &self.rocketmq,
            consumer: &self.consumer,
            default_group: groups::NOTICE.group,
            http_listen: &self.http_listen,
        }
    }

    fn check_tencent_im(&self) -> Result<(), impl Display> {
        self.tencent_im.validate()
    }
}

impl ConsumerService for Notice {
    type Config = Config;
    type Message = pb::RoomOutboxEvent;
    type Handler = NoticeProcessor;
    const ABOUT: &str = "notice-consumer";

    async fn build(
        config: &Config,
        host: &mut host::Builder,
    ) -> Result<Arc<NoticeProcessor>, host::Error> {
        let im = config.tencent_im.client().map_err(host::Error::config)?;
        Ok(NoticeProcessor::start(im, config.delivery.clone(), host))
    }

    fn failed_deliveries() -> Option<FailedDeliveries> {
        Some(FailedDeliveries::of::<NoticeDeliveries>())
    }
}
