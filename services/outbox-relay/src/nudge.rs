//! The commit nudge: room-service PUBLISHes on `hyapp:room_outbox:nudge` after
//! each commit that wrote outbox rows; the relay wakes at once instead of
//! waiting for its poll interval. Best effort by design — if Redis is away the
//! relay still polls, so a lost nudge only costs latency, never an event.

use fred::prelude::*;
use outbox_schema::names::NUDGE_CHANNEL;
use std::{sync::Arc, time::Duration};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Subscribes to the nudge channel and wakes `notify` on every message, until
/// `shutdown`. Reconnects with backoff; never returns an error.
pub async fn listen(redis_url: String, notify: Arc<Notify>, shutdown: CancellationToken) {
    let mut delay = Duration::from_millis(100);
    while !shutdown.is_cancelled() {
        match subscribe_once(&redis_url, &notify, &shutdown).await {
            Ok(()) => return,
            Err(error) => {
                tracing::warn!(%error, retry_in_ms = delay.as_millis() as u64, "nudge subscriber unavailable, polling only");
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(delay) => {}
                }
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        }
    }
}

async fn subscribe_once(
    redis_url: &str,
    notify: &Notify,
    shutdown: &CancellationToken,
) -> Result<(), Error> {
    let config = Config::from_url(redis_url)?;
    let subscriber = Builder::from_config(config)
        .set_policy(ReconnectPolicy::new_exponential(0, 100, 5_000, 2))
        .build_subscriber_client()?;
    subscriber.init().await?;
    let resubscribe = subscriber.manage_subscriptions();
    let mut messages = subscriber.message_rx();
    subscriber.subscribe(NUDGE_CHANNEL).await?;
    tracing::info!(channel = NUDGE_CHANNEL, "listening for commit nudges");
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            message = messages.recv() => match message {
                Ok(_) => notify.notify_one(),
                // Lagged: we missed some nudges, which only means "there is work"; keep going.
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => notify.notify_one(),
                Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
            },
        }
    }
    resubscribe.abort();
    let _ = subscriber.quit().await;
    if shutdown.is_cancelled() {
        Ok(())
    } else {
        Err(Error::new(ErrorKind::IO, "nudge subscription closed"))
    }
}
