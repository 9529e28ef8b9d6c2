//! The commit nudge: room-service PUBLISHes on `hyapp:room_outbox:nudge` after
//! each commit that wrote outbox rows; the relay wakes at once instead of
//! waiting for its poll interval. Best effort by design — if Redis is away the
//! relay still polls, so a lost nudge only costs latency, never an event.
//! The subscriber reaches Redis as `outbox_worker.redis_url` (`rediss://` for
//! TLS, trusting `outbox_worker.redis_tls_ca_file`; `redis-sentinel://` for a
//! primary behind Sentinel, found again after a failover), built by
//! `service_kit::redis` like room-service's own pool, with the same
//! timeouts and reconnects. An idle subscription sends nothing, so it PINGs
//! every [`HEARTBEAT`]: a connection that stalled (open, no bytes) fails
//! that PING within [`COMMAND_TIMEOUT`] and is replaced, instead of
//! silently hearing nothing until TCP gives up.

use fred::prelude::*;
use outbox_schema::names::NUDGE_CHANNEL;
use service_kit::backoff::Backoff;
use std::{sync::Arc, time::Duration};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Wait between attempts to build the subscriber again after it failed
/// (could not connect, or a heartbeat went unanswered): from 100 ms doubling
/// to 5 s, jittered so relays that lost the same Redis do not all reconnect at
/// once. A connection that merely dropped is reopened by the client itself
/// (service_kit::redis::RECONNECT) and resubscribed.
const RECONNECT: Backoff = Backoff::exponential(Duration::from_millis(100), Duration::from_secs(5));

/// Deadline of the subscriber's commands (SUBSCRIBE, the heartbeat PING).
/// Fixed rather than a key: a nudge is only a wake-up, and a Redis that
/// cannot answer a PING in 2 s is better replaced than waited for.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(2);

/// How often an idle subscription PINGs its connection.
pub const HEARTBEAT: Duration = Duration::from_secs(5);

/// Where the nudge subscriber's settings live, for error messages.
const KEYS: service_kit::redis::RedisKeys = service_kit::redis::RedisKeys {
    url: "outbox_worker.redis_url",
    tls_ca_file: "outbox_worker.redis_tls_ca_file",
};

/// The subscriber's client settings, checked; errors name the key.
pub fn client_config(redis_url: &str, tls_ca_file: &str) -> Result<Config, service_kit::Error> {
    service_kit::redis::client_config(KEYS, redis_url, tls_ca_file)
}

/// The start-up check of the subscriber's settings: the transport rule
/// (service_kit::redis::check_transport), then the client settings. The
/// reconnects' [`client_config`] only rebuilds the latter.
pub fn check(worker: &crate::config::OutboxWorkerConfig) -> Result<Config, service_kit::Error> {
    service_kit::redis::check_transport(
        KEYS,
        "outbox_worker.redis_allow_insecure_transport",
        &worker.redis_url,
        worker.redis_allow_insecure_transport,
    )?;
    client_config(&worker.redis_url, &worker.redis_tls_ca_file)
}

/// Subscribes to the nudge channel and wakes `notify` on every message, until
/// `shutdown`. Reconnects with backoff; never returns an error.
pub async fn listen(
    redis_url: String,
    tls_ca_file: String,
    notify: Arc<Notify>,
    shutdown: CancellationToken,
) {
    let mut failures: u32 = 0;
    while !shutdown.is_cancelled() {
        let mut subscribed = false;
        match subscribe_once(
            &redis_url,
            &tls_ca_file,
            &notify,
            &shutdown,
            &mut subscribed,
        )
        .await
        {
            Ok(()) => return,
            Err(error) => {
                // A subscription that worked for a while starts the backoff over.
                failures = if subscribed {
                    1
                } else {
                    failures.saturating_add(1)
                };
                let delay = RECONNECT.delay(failures);
                tracing::warn!(%error, retry_in_ms = delay.as_millis() as u64, "nudge subscriber unavailable, polling only");
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(delay) => {}
                }
            }
        }
    }
}

/// One subscriber client, from connect to shutdown or failure; sets
/// `subscribed` once the channel is subscribed.
async fn subscribe_once(
    redis_url: &str,
    tls_ca_file: &str,
    notify: &Notify,
    shutdown: &CancellationToken,
    subscribed: &mut bool,
) -> Result<(), Error> {
    // Read again on every (re)connect, so a rotated CA file is picked up.
    let config = client_config(redis_url, tls_ca_file)
        .and_then(|config| service_kit::redis::client_builder(config, COMMAND_TIMEOUT))
        .map_err(|error| Error::new(ErrorKind::Config, error.to_string()))?;
    let subscriber = config.build_subscriber_client()?;
    subscriber.init().await?;
    let resubscribe = subscriber.manage_subscriptions();
    let mut messages = subscriber.message_rx();
    let outcome = async {
        subscriber.subscribe(NUDGE_CHANNEL).await?;
        *subscribed = true;
        tracing::info!(channel = NUDGE_CHANNEL, "listening for commit nudges");
        let mut heartbeat = tokio::time::interval(HEARTBEAT);
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                _ = heartbeat.tick() => {
                    let () = subscriber.ping(None).await?;
                }
                message = messages.recv() => match message {
                    Ok(_) => notify.notify_one(),
                    // Lagged: we missed some nudges, which only means "there is work"; keep going.
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => notify.notify_one(),
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                        return Err(Error::new(ErrorKind::IO, "nudge subscription closed"));
                    }
                },
            }
        }
    }
    .await;
    resubscribe.abort();
    let _ = subscriber.quit().await;
    outcome
}
