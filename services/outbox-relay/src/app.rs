//! The standalone relay process: config → MySQL pool → publishers → relay +
//! admin HTTP, and the shutdown order (not ready → stop claiming → finish the
//! in-flight batch → give leases back → close MySQL). The relay itself is
//! `relay_engine`'s, built by [`relay_engine::build_relay_with`].
//!
//! Ready means able to publish at once: in `mq`/`dual` mode `/readyz` answers
//! 200 only once the producer is connected and has the topics' metadata
//! ([`warm_up`]), retried until the broker answers.

use crate::access::{Access, Credentials, hosts::AllowedHosts, operators::Operators};
use crate::admin_port::{AdminPort, Routes};
use crate::console::{
    ConsoleConfig,
    history::{History, LagSources},
};
use crate::{Error, config::RelayServiceConfig, metrics::ConsoleMetrics};
use outbox_schema::groups;
use prometheus_client::registry::Registry;
use relay_engine::{Relay, RelaySettings, build_relay_with, metrics::RelayMetrics};
use service_kit::{
    admin_http,
    backoff::{Backoff, Strategy},
    low_priority::Nice,
    mq::MqConfig,
};
use sqlx::MySqlPool;
use std::{net::SocketAddr, sync::Arc, time::Duration};
use tokio_util::sync::CancellationToken;

/// The relay process, built and bound, ready to run.
#[derive(Debug)]
pub struct App {
    relay: Relay,
    pool: MySqlPool,
    readiness: Arc<admin_http::Readiness>,
    admin: AdminPort,
    history: History,
    metrics: RelayMetrics,
    lag_sources: LagSources,
}

impl App {
    /// Validates the config, connects MySQL, creates the publishers and binds the admin port.
    pub async fn build(config: RelayServiceConfig) -> Result<Self, Error> {
        // Refuse a bad config before touching MySQL, so the message is about the config.
        crate::admin::check_tokens(
            &config.admin_token,
            &config.admin_read_token,
            &config.http_listen,
        )?;
        if RelaySettings::from_config(&config.outbox_worker, &config.rocketmq)?.uses_direct() {
            relay_engine::direct::check_config(&config.direct)?;
        }
        let admin = AdminSettings::check(&config)?;
        let statement_timeout = config
            .mysql
            .statement_timeout()
            .map_err(|error| Error::Config(error.to_string()))?;
        let pool = config.mysql.connect().await?;
        let mut registry = Registry::default();
        let metrics = RelayMetrics::register(&mut registry);
        let throttle = Arc::new(crate::access::throttle::LoginThrottle::new(
            ConsoleMetrics::register(&mut registry),
        ));
        let relay = build_relay_with(
            service_kit::db::statement::BoundedPool::new(pool.clone(), statement_timeout),
            &config.outbox_worker,
            &config.rocketmq,
            &config.direct,
            metrics.clone(),
            &mut registry,
        )?;
        let history = History::default();
        let lag_sources = lag_sources(&config.rocketmq)?;
        let readiness = Arc::new(admin_http::Readiness::default());
        let retention_ms =
            i64::try_from(relay.settings().retention.as_millis()).unwrap_or(i64::MAX);
        let admin = admin
            .into_port(
                &config,
                admin_http::router(readiness.clone(), Arc::new(registry)),
                throttle,
                (history.clone(), !lag_sources.groups.is_empty()),
                retention_ms,
            )
            .await?;
        Ok(Self {
            relay,
            pool,
            readiness,
            admin,
            history,
            metrics,
            lag_sources,
        })
    }

    /// Address of the admin HTTP server.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.admin.listener.local_addr().ok()
    }

    /// Runs until `shutdown`, then drains in order.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), Error> {
        let http_shutdown = CancellationToken::new();
        let http = self.admin.spawn(http_shutdown.clone())?;
        let sampler = tokio::spawn(self.history.clone().run(
            self.metrics.clone(),
            self.lag_sources.clone(),
            http_shutdown.clone(),
        ));
        let warming = shutdown.child_token();
        let warm = tokio::spawn(warm_up(
            self.relay.clone(),
            self.readiness.clone(),
            warming.clone(),
        ));
        let relay_result = self.relay.run(shutdown.clone()).await;
        warming.cancel();
        let _ = warm.await;
        self.readiness.set_draining();
        http_shutdown.cancel();
        http.wait().await;
        let _ = sampler.await;
        self.pool.close().await;
        Ok(relay_result?)
    }
}

/// The admin port's settings, checked before MySQL is touched so that a
/// bad one is refused with a message about the config.
struct AdminSettings {
    nice: Nice,
    tls: Option<Arc<rustls::ServerConfig>>,
    access: Access,
    replay_max_age_ms: i64,
    trace_url: Option<crate::console::trace::TraceUrl>,
}

impl AdminSettings {
    fn check(config: &RelayServiceConfig) -> Result<Self, Error> {
        let nice = Nice::new("admin_cpu_nice", config.admin_cpu_nice)?;
        if config.admin_max_connections == 0 {
            return Err(Error::Config(
                "admin_max_connections must be at least 1 (the admin port's own MySQL pool)".into(),
            ));
        }
        let tls = crate::admin_tls::load(&config.admin_tls)?;
        let mut access = admin_access(config)?;
        access.secure_cookies = tls.is_some();
        Ok(Self {
            nice,
            tls,
            access,
            replay_max_age_ms: config.ops.replay_max_age_ms()?,
            trace_url: crate::console::trace::TraceUrl::parse(&config.console.trace_url)?,
        })
    }

    /// The port bound, with its routes — `probes` (health, readiness,
    /// metrics), `/admin/*` and the console — over the pool its thread
    /// creates; `(history, broker_lag)` feed the console's charts.
    async fn into_port(
        self,
        config: &RelayServiceConfig,
        probes: axum::Router,
        throttle: Arc<crate::access::throttle::LoginThrottle>,
        (history, broker_lag): (History, bool),
        retention_ms: i64,
    ) -> Result<AdminPort, Error> {
        let groups = timeline_groups(&config.rocketmq);
        let consumers = crate::console::consumers::Sources::from_mq(&config.rocketmq, &groups)?;
        let (admin_token, read_token) =
            (config.admin_token.clone(), config.admin_read_token.clone());
        let Self {
            nice,
            tls,
            mut access,
            replay_max_age_ms,
            trace_url,
        } = self;
        access.throttle = throttle;
        let routes: Routes = Box::new(move |pool: MySqlPool| {
            let console = crate::console::router_with_consumers(
                ConsoleConfig {
                    pool: pool.clone(),
                    admin_token,
                    read_token,
                    history,
                    broker_lag,
                    groups,
                    trace_url,
                },
                access.clone(),
                replay_max_age_ms,
                consumers,
            );
            probes.merge(
                crate::admin::router_with(pool, access, retention_ms, replay_max_age_ms)
                    .merge(console),
            )
        });
        let (mysql, connections) = (config.mysql.clone(), config.admin_max_connections);
        Ok(AdminPort {
            listener: admin_http::bind(&config.http_listen).await?,
            tls,
            nice,
            pool: Box::new(move || mysql.lazy_pool(connections)),
            routes,
        })
    }
}

/// The gate of the console and `/admin/*` from the config, checked: the
/// allowed hosts and the named operators (the throttle's metrics are
/// registered by the caller).
fn admin_access(config: &RelayServiceConfig) -> Result<Access, Error> {
    let operators = Operators::load(&config.admin_operators_file)?;
    if !operators.is_empty() && config.admin_token.is_empty() {
        return Err(Error::Config(
            "admin_operators_file is set but admin_token is empty; the console and /admin \
             are off without admin_token"
                .into(),
        ));
    }
    Ok(Access {
        hosts: AllowedHosts::from_config(&config.admin_allowed_hosts, &config.http_listen)?,
        credentials: Credentials {
            admin: config.admin_token.clone(),
            read_only: config.admin_read_token.clone(),
            operators,
        },
        ..Access::default()
    })
}

/// The consumer groups whose lag the console reads, each on its topic: the
/// three groups of the room events topic and room-service's wake-up group.
/// None when the relay has no broker (direct mode without `rocketmq`).
fn lag_sources(mq: &MqConfig) -> Result<LagSources, Error> {
    if !mq.enabled {
        return Ok(LagSources::default());
    }
    let client_properties = mq
        .client_properties()?
        .into_iter()
        .map(|(key, value)| (key.to_owned(), value))
        .collect();
    let events = mq.topic(&mq.room_outbox.topic);
    let mut groups: Vec<(String, String)> = timeline_groups(mq)
        .into_iter()
        .map(|group| (group, events.clone()))
        .collect();
    groups.push((
        mq.treasure_open.consumer_group.clone(),
        mq.topic(&mq.treasure_open.topic),
    ));
    Ok(LagSources {
        client_properties,
        groups,
    })
}

/// The consumer groups of the room events topic, which record what they
/// applied in `consumer_dedup`: outbox-schema's list, with im-bridge's group
/// as this deployment configures it.
fn timeline_groups(mq: &MqConfig) -> Vec<String> {
    groups::CONSUMERS
        .iter()
        .map(|consumer| {
            if *consumer == groups::IM_BRIDGE {
                mq.room_outbox.tencent_im_consumer_group.clone()
            } else {
                consumer.group.to_owned()
            }
        })
        .collect()
}

/// First wait between warm-up attempts; doubles up to [`WARM_UP_MAX_WAIT`].
const WARM_UP_FIRST_WAIT: Duration = Duration::from_millis(100);
const WARM_UP_MAX_WAIT: Duration = Duration::from_secs(5);

/// Marks the relay ready once its producer (if any) is connected and has the
/// metadata of both topics, trying again until it does or `stop`.
async fn warm_up(relay: Relay, readiness: Arc<admin_http::Readiness>, stop: CancellationToken) {
    let backoff = Backoff::new(Strategy::Exponential, WARM_UP_FIRST_WAIT, WARM_UP_MAX_WAIT);
    let mut failures = 0;
    loop {
        let attempt = tokio::select! {
            _ = stop.cancelled() => return,
            attempt = relay.warm_up() => attempt,
        };
        let Err(error) = attempt else { break };
        failures += 1;
        tracing::warn!(%error, "producer not connected yet; not ready");
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(backoff.delay(failures)) => {}
        }
    }
    if !stop.is_cancelled() {
        readiness.set_ready();
    }
}
