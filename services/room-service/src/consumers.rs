//! Consumers room-service hosts in-process, on the shared consumer runtime:
//!
//! - **treasure-open** (group `hyapp-room-treasure-open`, when
//!   `rocketmq.treasure_open.enabled`): a wake-up issues `OpenTreasure` with
//!   its deterministic `command_id`, through the normal command pipeline, so a
//!   redelivered wake-up is an idempotent replay; room-core re-validates the
//!   box, level, `open_at_ms` and the UTC reset. Dedup is the command log's
//!   own `command_id` idempotency, not `consumer_dedup`.
//! - **IM bridge** (group `hyapp-room-im-bridge`, when
//!   `rocketmq.room_outbox.tencent_im_consumer_enabled`; see
//!   docs/design.md#consumer-semantics): the im-bridge library, unchanged.

use crate::{Error, config::Config, error::ErrorCode, service::Rooms};
use consumer_runtime::{
    Consumer, ConsumerMetrics, ConsumerSettings, Delivery, Handler, HandlerError, Outcome,
};
use outbox_schema::{names, pb, treasure_open_command_id};
use room_core::Rejection;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Turns wake-ups into OpenTreasure commands.
#[derive(Debug, Clone)]
pub struct TreasureOpenHandler {
    rooms: Rooms,
}

impl TreasureOpenHandler {
    /// A handler issuing commands through `rooms`.
    pub fn new(rooms: Rooms) -> Self {
        Self { rooms }
    }
}

impl Handler<pb::TreasureOpenWakeup> for TreasureOpenHandler {
    async fn handle(
        &self,
        delivery: &Delivery<pb::TreasureOpenWakeup>,
    ) -> Result<Outcome, HandlerError> {
        let wakeup = &delivery.message;
        let command_id = treasure_open_command_id(&wakeup.room_id, &wakeup.box_id, wakeup.level);
        if command_id != wakeup.command_id {
            return Err(HandlerError::permanent(format!(
                "wake-up command_id {} does not match its box ({command_id})",
                wakeup.command_id
            )));
        }
        match self
            .rooms
            .open_treasure(&wakeup.room_id, &wakeup.box_id, wakeup.level, &command_id)
            .await
        {
            Ok(reply) if reply.replayed => Ok(Outcome::Duplicate),
            Ok(_) => Ok(Outcome::Applied),
            Err(error) => classify(&wakeup.room_id, &wakeup.box_id, error),
        }
    }
}

/// What a failed OpenTreasure means for the wake-up. The rule may have
/// refused here or on the instance holding the room (the command was
/// forwarded), so it is read through [`Error::rejection_code`].
fn classify(room_id: &str, box_id: &str, error: Error) -> Result<Outcome, HandlerError> {
    match error.rejection_code() {
        // Early (clock skew between nodes): try again after backoff.
        Some(code) if code == (Rejection::TreasureNotDue { open_at_ms: 0 }).code() => {
            Err(HandlerError::retryable(error))
        }
        // The box is gone, replaced or past the daily reset: the wake-up is stale, nothing to open.
        Some(_) => {
            tracing::info!(room_id, box_id, reason = %error, "stale treasure wake-up ignored");
            Ok(Outcome::Ignored)
        }
        None => match error.code() {
            ErrorCode::InvalidArgument | ErrorCode::NotFound | ErrorCode::AlreadyExists => {
                Err(HandlerError::permanent(error))
            }
            _ => Err(HandlerError::retryable(error)),
        },
    }
}

/// A consumer task ready to run.
pub type ConsumerTask =
    Box<dyn FnOnce(CancellationToken) -> futures::future::BoxFuture<'static, ()> + Send>;

/// The enabled in-process consumers, named, waiting to be spawned.
#[derive(Default)]
pub struct ConsumerTasks(pub Vec<(&'static str, ConsumerTask)>);

impl std::fmt::Debug for ConsumerTasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(name, _)| name))
            .finish()
    }
}

/// Builds the enabled in-process consumers (subscribed, not yet consuming).
pub fn build(
    config: &Config,
    rooms: &Rooms,
    pool: &service_kit::db::statement::BoundedPool,
    metrics: &ConsumerMetrics,
    registry: &mut prometheus_client::registry::Registry,
) -> Result<ConsumerTasks, Error> {
    let config_error = |error: consumer_runtime::Error| Error::Config(error.to_string());
    let mut tasks: Vec<(&'static str, ConsumerTask)> = Vec::new();
    let mq = &config.rocketmq;
    if mq.enabled && mq.treasure_open.enabled {
        let settings = ConsumerSettings::resolve(
            mq,
            &config.consumer,
            &mq.treasure_open.topic,
            &mq.treasure_open.consumer_group,
            mq.treasure_open.consumer_max_reconsume_times,
        )
        .map_err(config_error)?;
        let consumer = Consumer::new(
            settings,
            Arc::new(TreasureOpenHandler::new(rooms.clone())),
            metrics,
        )
        .map_err(config_error)?;
        tasks.push((
            "treasure_open_consumer",
            Box::new(move |token| {
                Box::pin(async move {
                    if let Err(error) = consumer.run(token).await {
                        tracing::error!(consumer_group = names::GROUP_TREASURE_OPEN, %error, "consumer stopped");
                    }
                })
            }),
        ));
    }
    if mq.enabled && mq.room_outbox.tencent_im_consumer_enabled {
        let settings = im_bridge_engine::settings(mq, &config.consumer)
            .map_err(|error| Error::Config(error.to_string()))?;
        let client = config
            .tencent_im
            .client()
            .map_err(|error| Error::Config(error.to_string()))?;
        let bridge = im_bridge_engine::ImBridge::build(
            settings,
            config.im_bridge.clone(),
            config.tencent_im.group_id_template.clone(),
            client,
            pool.clone(),
            metrics,
        )
        .map_err(|error| Error::Config(error.to_string()))?;
        bridge.register_metrics(registry);
        tasks.push((
            "im_bridge_consumer",
            Box::new(move |token| {
                Box::pin(async move {
                    if let Err(error) = bridge.run(token).await {
                        tracing::error!(consumer_group = names::GROUP_IM_BRIDGE, %error, "consumer stopped");
                    }
                })
            }),
        ));
    }
    Ok(ConsumerTasks(tasks))
}
