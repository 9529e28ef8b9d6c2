//! How every service builds its Redis client: one URL and an optional CA
//! file give the connection settings ([`client_config`]), and
//! [`client_builder`] adds the timeouts and reconnect policy every client
//! runs with. Written once so room-service's pool and the relay's nudge
//! subscriber check, trust, time out and fail over alike.
//!
//! The URL is one server (`redis://` plain, `rediss://` TLS) or a primary
//! with replicas behind Sentinel, in fred's form:
//! `redis-sentinel://[user:password@]sentinel1:26379[/db]?sentinelServiceName=<name>&node=sentinel2:26379&…`
//! (`rediss-sentinel://` for TLS to the sentinels and the primary;
//! `sentinelUsername`/`sentinelPassword` when the sentinels have their own
//! AUTH; the userinfo is the data nodes'). The client asks the sentinels for
//! the primary and asks again whenever its connection drops, so a failover
//! costs the commands under way, not the client. Redis Cluster is refused
//! (`url.rs` says why).
//!
//! With TLS and no CA file the server's certificate is checked against the
//! system's roots (managed Redis offerings use public CAs); with a CA file,
//! against that file only. The host name is always checked — behind
//! Sentinel that is the address the sentinels announce for the primary.
//! Errors name the config key, and everything is checked when the settings
//! are built, so a service refuses a bad value at start-up.
//!
//! [`check_transport`], which every service runs at start-up beside
//! [`client_config`], refuses a Redis that is not on this machine unless it
//! is reached over TLS with a password (AUTH or an ACL user), or the
//! service's `allow_insecure_transport` key says otherwise (development
//! stacks only): the network to Redis is not trusted, and the leases and
//! the commit nudge live there.

mod tls;
mod url;

use crate::Error;
use crate::backoff::Backoff;
use fred::types::Builder;
use fred::types::config::{Config, ReconnectPolicy};
use std::time::Duration;

/// Where a service's Redis settings live in its config, for error messages
/// (`redis.url` / `redis.tls_ca_file`, `outbox_worker.redis_url` / …).
#[derive(Debug, Clone, Copy)]
pub struct RedisKeys {
    /// Key of the URL.
    pub url: &'static str,
    /// Key of the CA file.
    pub tls_ca_file: &'static str,
}

/// Wait between a client's attempts to reconnect after its connection
/// dropped: from 100 ms doubling to 1 s (fred adds up to 100 ms of jitter),
/// forever. Short, because behind Sentinel a reconnect is how the client
/// finds the promoted primary, and every second of it is a second rooms
/// cannot be served.
pub const RECONNECT: Backoff =
    Backoff::exponential(Duration::from_millis(100), Duration::from_secs(1));

/// The least time a connection gets to open (TCP, TLS, AUTH, the sentinel's
/// answer) and to answer before it is dropped as unresponsive, whatever the
/// command timeout: below it a busy network would look like a dead one.
const CONNECTION_FLOOR: Duration = Duration::from_millis(500);

/// Refuses `url` when a host it dials is not this machine and it is either
/// plain (`redis://`, `redis-sentinel://`) or carries no password, unless
/// `allow_insecure` (the value of the key `allow_key`, named in the
/// message). Behind Sentinel every sentinel (the URL's host and each
/// `node=`) counts, and the password is the data nodes' (the userinfo).
/// Never prints a password.
pub fn check_transport(
    keys: RedisKeys,
    allow_key: &str,
    url: &str,
    allow_insecure: bool,
) -> Result<(), Error> {
    let Ok(parsed) = url::parse(url) else {
        return Ok(()); // client_config refuses it, with the reason
    };
    let remote = parsed
        .hosts
        .iter()
        .find(|host| !crate::config::is_loopback_host(host));
    let Some(host) = remote.filter(|_| !allow_insecure) else {
        return Ok(());
    };
    let missing = match (parsed.tls, parsed.has_password) {
        (true, true) => return Ok(()),
        (false, _) if parsed.sentinel => "is not TLS (use rediss-sentinel://)",
        (false, _) => "is not TLS (use rediss://)",
        (true, false) => "carries no password (rediss://user:password@host, from a Secret)",
    };
    Err(Error::Config(format!(
        "{} `{}` {missing} and its host `{host}` is not this machine; or set {allow_key}: \
         true (development stacks only)",
        keys.url,
        crate::secret::redact_url(url)
    )))
}

/// The fred client config for `url`, trusting `tls_ca_file` when it is not
/// empty. Refuses a scheme other than `redis://`, `rediss://`,
/// `redis-sentinel://` and `rediss-sentinel://` (Redis Cluster with its
/// reason), a query parameter the scheme does not read, a Sentinel URL
/// without `sentinelServiceName`, a CA file with a plain URL (it would be
/// silently unused), and a CA file that cannot be read or holds no
/// certificate.
pub fn client_config(keys: RedisKeys, url: &str, tls_ca_file: &str) -> Result<Config, Error> {
    let refused = |reason: &dyn std::fmt::Display| {
        Error::Config(format!(
            "{} `{}` {reason}",
            keys.url,
            crate::secret::redact_url(url)
        ))
    };
    let parsed = url::parse(url).map_err(|reason| refused(&reason))?;
    if !tls_ca_file.is_empty() && !parsed.tls {
        return Err(Error::Config(format!(
            "{} is set but {} `{}` is not TLS; use rediss:// or rediss-sentinel://",
            keys.tls_ca_file,
            keys.url,
            crate::secret::redact_url(url)
        )));
    }
    let mut config = Config::from_url(url).map_err(|error| refused(&format!(": {error}")))?;
    if parsed.tls {
        let roots = if tls_ca_file.is_empty() {
            tls::system_roots().map_err(|error| refused(&format!(": {error}")))?
        } else {
            tls::read_roots(tls_ca_file).map_err(|error| {
                Error::Config(format!("{} `{tls_ca_file}`: {error}", keys.tls_ca_file))
            })?
        };
        config.tls = Some(
            tls::config(roots).map_err(|error| Error::Config(format!("{}: {error}", keys.url)))?,
        );
    }
    Ok(config)
}

/// The builder of a client over `config` (from [`client_config`]) with the
/// bounds every service's client runs with, so a Redis that stops
/// answering — crashed, partitioned, or stalled with the connection open
/// and no bytes coming — turns into errors the callers handle rather than
/// hung tasks:
/// - each command fails after `command_timeout` (fred's default is to wait
///   forever);
/// - opening a connection (TCP, TLS, AUTH, and behind Sentinel the
///   sentinel's answer and the primary's ROLE) and the client's own
///   commands fail after `command_timeout`, but no less than 500 ms;
/// - a connection with a command unanswered for that long is closed as
///   unresponsive and opened again, which behind Sentinel asks for the
///   primary anew;
/// - reconnects follow [`RECONNECT`], forever.
///
/// Refuses a zero `command_timeout`, which fred reads as "no deadline".
pub fn client_builder(config: Config, command_timeout: Duration) -> Result<Builder, Error> {
    if command_timeout.is_zero() {
        return Err(Error::Config(
            "the Redis command timeout must be positive (0 would wait forever)".into(),
        ));
    }
    let connection = command_timeout.max(CONNECTION_FLOOR);
    let mut builder = Builder::from_config(config);
    builder
        .with_performance_config(|performance| {
            performance.default_command_timeout = command_timeout;
        })
        .with_connection_config(|settings| {
            settings.connection_timeout = connection;
            settings.internal_command_timeout = connection;
            settings.unresponsive.max_timeout = Some(connection);
            settings.unresponsive.interval = connection / 4;
        })
        .set_policy(ReconnectPolicy::new_exponential(
            0,
            millis(RECONNECT.initial()),
            millis(RECONNECT.max()),
            2,
        ));
    Ok(builder)
}

fn millis(duration: Duration) -> u32 {
    u32::try_from(duration.as_millis()).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests;
