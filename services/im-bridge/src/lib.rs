//! The `im-bridge` service: the IM bridge engine (`im_bridge_engine`:
//! room events from `hyapp_room_outbox`, group `hyapp-room-im-bridge`, into
//! the rooms' Tencent IM groups) run by the consumer host, with its config
//! file.

pub mod config;

use config::Config;
use consumer_runtime::host::{self, ConsumerService};
use im_bridge_engine::{bridge_handler, handler::ImBridgeHandler};
use outbox_schema::pb;
use std::sync::Arc;

/// Errors of the IM bridge (the consumer services' one error type).
pub use consumer_runtime::host::Error;

/// The standalone im-bridge service.
pub type App = host::Host<Service>;

/// The im-bridge as a consumer service: the engine's [`ImBridgeHandler`] over `room_im`.
#[derive(Debug)]
pub struct Service;

impl ConsumerService for Service {
    type Config = Config;
    type Message = pb::RoomOutboxEvent;
    type Handler = ImBridgeHandler;
    const ABOUT: &str = "Consumes room events and drives Tencent IM groups";

    async fn build(
        config: &Config,
        host: &mut host::Builder,
    ) -> Result<Arc<ImBridgeHandler>, Error> {
        let im = config.tencent_im.client().map_err(Error::config)?;
        let handler = bridge_handler(
            config.im_bridge.clone(),
            config.tencent_im.group_id_template.clone(),
            im,
            host.bounded_pool().clone(),
            host.consumer_group(),
        )?;
        handler.register_metrics(host.registry());
        Ok(Arc::new(handler))
    }
}
