//! Everything room-service keeps in Redis: the room leases (one owner node per
//! room), the room list by heat, presence expiries, and the relay nudge.
//! Redis holds hot, short-lived state only; MySQL stays the source of truth.
//!
//! Keys (under `redis.key_prefix`, default `hyapp`, so several deployments
//! can share one Redis): `<prefix>:room:lease:{room_id}` (value: `<node id>
//! <advertised gRPC URL>`, PX lease TTL: the address is how another instance
//! forwards a command to the holder; neither part may contain a space),
//! `<prefix>:node:alive:{node_id}` (hash `holder` → the lease value its
//! leases hold, `since` → when its current unbroken run of renewals began,
//! in Redis's clock; PX `redis.liveness_ttl`: see `liveness`),
//! `<prefix>:room:list:heat` (zset room_id → heat),
//! `<prefix>:room:presence` (zset `{room_id}|{user_id}` → expires_at_ms; `|`
//! is outside the id charset, so the member splits unambiguously).
//!
//! Takeover: a lease whose holder's liveness key has lapsed (or names
//! another incarnation of that node) is taken by the next instance that
//! needs the room, provided that instance has itself renewed its own key
//! without a break for at least one liveness TTL. That proviso bounds what
//! a Redis stall can do: a stall longer than the TTL lapses every key at
//! once, every instance's run starts again when Redis answers, and during
//! the following TTL — four renewal periods — nobody may take anything
//! over, while every live holder renews. Redis Cluster is not supported
//! (service_kit::redis refuses `redis-cluster://`): the scripts read the
//! holder's liveness key, which they derive from the lease value (one
//! Redis, or a Sentinel-managed primary, holds both). After a Sentinel
//! failover the promoted replica may lack the last writes (replication is
//! asynchronous): a lost lease is taken again by the next caller, and the
//! version compare-and-set in MySQL fences the instance that held it.

use std::time::Duration;

use fred::prelude::*;

use crate::Error;
use crate::config::RedisConfig;

mod projection;
mod scripts;

use scripts::{
    ACQUIRE_LEASE, DROP_LIVENESS, LEASE_HOLDER, RELEASE_LEASE, RENEW_LEASE, RENEW_LIVENESS,
};

/// Redis key names under one prefix.
#[derive(Debug, Clone)]
struct Keys {
    room_list: String,
    presence: String,
    lease_prefix: String,
    alive_prefix: String,
}

impl Keys {
    fn new(prefix: &str) -> Self {
        Self {
            room_list: format!("{prefix}:room:list:heat"),
            presence: format!("{prefix}:room:presence"),
            lease_prefix: format!("{prefix}:room:lease:"),
            alive_prefix: format!("{prefix}:node:alive:"),
        }
    }

    fn alive(&self, node_id: &str) -> String {
        format!("{}{node_id}", self.alive_prefix)
    }

    fn lease(&self, room_id: &str) -> String {
        format!("{}{room_id}", self.lease_prefix)
    }
}

/// The presence zset member of a user in a room.
pub fn presence_member(room_id: &str, user_id: &str) -> String {
    format!("{room_id}|{user_id}")
}

/// Splits a presence member back into (room_id, user_id).
pub fn split_presence_member(member: &str) -> Option<(&str, &str)> {
    member.split_once('|')
}

/// Redis side effects of one committed batch, written in one pipeline.
#[derive(Debug, Default, Clone)]
pub struct Projection {
    /// (room_id, heat) to upsert into the room list.
    pub room_heat: Option<(String, u64)>,
    /// Room to drop from the list (closed).
    pub remove_room: Option<String>,
    /// Presence entries to set: (member, expires_at_ms).
    pub presence_set: Vec<(String, i64)>,
    /// Presence entries to drop.
    pub presence_remove: Vec<String>,
    /// Outbox shard to nudge the relay for.
    pub nudge_shard: Option<u16>,
}

impl Projection {
    /// True when there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.room_heat.is_none()
            && self.remove_room.is_none()
            && self.presence_set.is_empty()
            && self.presence_remove.is_empty()
            && self.nudge_shard.is_none()
    }
}

/// Who holds a room's lease, as its value says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseHolder {
    /// The holder's node id.
    pub node_id: String,
    /// The holder's advertised gRPC URL (absent in a value without one).
    pub address: Option<String>,
    /// When the holder's liveness key lapses unless renewed; `None` for a
    /// holder already gone (its next caller takes the room over). With
    /// takeover off, every holder is live and this is `Some(ZERO)`.
    pub lapses_in: Option<Duration>,
}

impl LeaseHolder {
    /// Parses a lease value: `<node id> <url>`, or a bare node id; live
    /// for `lapses_in` (see the field).
    pub fn parse(value: &str, lapses_in: Option<Duration>) -> Self {
        let (node_id, address) = match value.split_once(' ') {
            Some((node_id, address)) if !address.is_empty() => {
                (node_id.to_owned(), Some(address.to_owned()))
            }
            _ => (value.trim_end().to_owned(), None),
        };
        Self {
            node_id,
            address,
            lapses_in,
        }
    }

    /// Whether the holder's liveness key is held.
    pub fn is_live(&self) -> bool {
        self.lapses_in.is_some()
    }

    /// The refusal a command for `room_id` gets on a node that is not the
    /// holder: forwardable to a live holder's address; a retry is worth it
    /// once the holder's key would have lapsed.
    pub fn owned_elsewhere(self, room_id: &str) -> Error {
        Error::OwnedElsewhere {
            room_id: room_id.to_owned(),
            owner: self.node_id,
            address: self.address,
            retry_after: self.lapses_in.filter(|wait| !wait.is_zero()),
        }
    }
}

/// What [`Redis::acquire_lease`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquired {
    /// The lease was free or ours already.
    Held,
    /// Taken over from this holder, whose liveness key had lapsed.
    TookOver(LeaseHolder),
}

/// `{owner, outcome, wait_ms}` of the lease script.
fn lease_answer(answer: &[Value]) -> Result<(String, i64, i64), Error> {
    match answer {
        [owner, outcome, wait] => match (owner.as_string(), outcome.as_i64(), wait.as_i64()) {
            (Some(owner), Some(outcome), Some(wait)) => Ok((owner, outcome, wait)),
            _ => Err(Error::Internal(format!("lease script answered {answer:?}"))),
        },
        _ => Err(Error::Internal(format!("lease script answered {answer:?}"))),
    }
}

/// The Redis client pool with room-service's operations.
#[derive(Clone)]
pub struct Redis {
    pool: Pool,
    node_id: String,
    /// `<node id> <advertise url>`: what our leases hold.
    lease_value: String,
    lease_ttl_ms: i64,
    /// `redis.liveness_ttl` in ms; 0 turns takeover off.
    liveness_ttl_ms: i64,
    keys: Keys,
}

impl std::fmt::Debug for Redis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redis")
            .field("node_id", &self.node_id)
            .finish_non_exhaustive()
    }
}

impl Redis {
    /// Connects the pool. Commands time out after `command_timeout`, so an
    /// outage or a stalled connection fails requests quickly; the pool
    /// reconnects by itself (behind Sentinel, to the primary the sentinels
    /// name then). Leases
    /// taken through it name `node_id` and `advertise_url`.
    pub async fn connect(
        config: &RedisConfig,
        node_id: &str,
        advertise_url: &str,
    ) -> Result<Self, Error> {
        let redis_config = config.client_config()?;
        // The command timeout, connection bounds and reconnects every
        // service's client shares (service_kit::redis::client_builder).
        let pool =
            service_kit::redis::client_builder(redis_config, config.command_timeout.as_std())
                .map_err(|error| Error::Config(format!("redis.command_timeout: {error}")))?
                .build_pool(config.pool_size)
                .map_err(|error| Error::Config(format!("redis: {error}")))?;
        pool.init().await.map_err(|error| Error::redis(&error))?;
        Ok(Self {
            pool,
            node_id: node_id.to_owned(),
            lease_value: format!("{node_id} {advertise_url}"),
            lease_ttl_ms: config.lease_ttl.as_millis(),
            liveness_ttl_ms: config.liveness_ttl.as_millis(),
            keys: Keys::new(&config.key_prefix),
        })
    }

    /// This node's id (the lease value).
    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    /// Lease validity in milliseconds.
    pub fn lease_ttl_ms(&self) -> i64 {
        self.lease_ttl_ms
    }

    /// Whether a lapsed holder's rooms may be taken over (`redis.liveness_ttl` > 0).
    fn takeover_on(&self) -> bool {
        self.liveness_ttl_ms > 0
    }

    /// Acquires (or refreshes our own) lease of a room, taking it over from
    /// a holder whose liveness key lapsed; errors name the owner.
    pub async fn acquire_lease(&self, room_id: &str) -> Result<Acquired, Error> {
        let our_key = if self.takeover_on() {
            self.keys.alive(&self.node_id)
        } else {
            String::new()
        };
        let answer: Vec<Value> = self
            .pool
            .eval(
                ACQUIRE_LEASE.as_str(),
                self.keys.lease(room_id),
                vec![
                    self.lease_value.clone(),
                    self.lease_ttl_ms.to_string(),
                    self.keys.alive_prefix.clone(),
                    our_key,
                    self.liveness_ttl_ms.to_string(),
                ],
            )
            .await
            .map_err(|error| Error::redis(&error))?;
        let (owner, outcome, wait_ms) = lease_answer(&answer)?;
        let wait = Duration::from_millis(wait_ms.max(0).unsigned_abs());
        match outcome {
            0 => Ok(Acquired::Held),
            1 => Err(LeaseHolder::parse(&owner, Some(wait)).owned_elsewhere(room_id)),
            2 => Err(Error::OwnedElsewhere {
                room_id: room_id.to_owned(),
                owner: LeaseHolder::parse(&owner, None).node_id,
                // Gone: nothing to forward to; a retry after our grace takes it over.
                address: None,
                retry_after: Some(wait),
            }),
            3 => Ok(Acquired::TookOver(LeaseHolder::parse(&owner, None))),
            other => Err(Error::Internal(format!(
                "lease script answered outcome {other}"
            ))),
        }
    }

    /// Who holds the room's lease now, if not us, and whether that holder
    /// is live — without taking it (`None`: nobody, or we do).
    pub async fn lease_holder(&self, room_id: &str) -> Result<Option<LeaseHolder>, Error> {
        let takeover = if self.takeover_on() { "1" } else { "" };
        let answer: Vec<Value> = self
            .pool
            .eval(
                LEASE_HOLDER.as_str(),
                self.keys.lease(room_id),
                vec![
                    self.lease_value.clone(),
                    takeover.to_owned(),
                    self.keys.alive_prefix.clone(),
                ],
            )
            .await
            .map_err(|error| Error::redis(&error))?;
        let Some(owner) = answer.first().and_then(|owner| owner.as_string()) else {
            return Ok(None);
        };
        let lapses_in = answer.get(1).and_then(Value::as_i64).unwrap_or(-1);
        let lapses_in = match lapses_in {
            -2 => Some(Duration::ZERO),
            ms if ms >= 0 => Some(Duration::from_millis(ms.unsigned_abs())),
            _ => None,
        };
        Ok(Some(LeaseHolder::parse(&owner, lapses_in)))
    }

    /// Renews this instance's liveness key for `ttl`; `Ok(false)` when it
    /// had lapsed (a new run of renewals starts).
    pub async fn renew_liveness(&self, ttl: Duration) -> Result<bool, Error> {
        let continued: i64 = self
            .pool
            .eval(
                RENEW_LIVENESS.as_str(),
                self.keys.alive(&self.node_id),
                vec![
                    self.lease_value.clone(),
                    ttl.as_millis().to_string(),
                    self.keys.alive_prefix.clone(),
                ],
            )
            .await
            .map_err(|error| Error::redis(&error))?;
        Ok(continued == 1)
    }

    /// Deletes this instance's liveness key (graceful stop).
    pub async fn drop_liveness(&self) -> Result<(), Error> {
        let _: i64 = self
            .pool
            .eval(
                DROP_LIVENESS,
                self.keys.alive(&self.node_id),
                vec![self.lease_value.clone()],
            )
            .await
            .map_err(|error| Error::redis(&error))?;
        Ok(())
    }

    /// Extends our lease; `Ok(false)` when it is no longer ours.
    pub async fn renew_lease(&self, room_id: &str) -> Result<bool, Error> {
        let renewed: i64 = self
            .pool
            .eval(
                RENEW_LEASE,
                self.keys.lease(room_id),
                vec![self.lease_value.clone(), self.lease_ttl_ms.to_string()],
            )
            .await
            .map_err(|error| Error::redis(&error))?;
        Ok(renewed == 1)
    }

    /// Gives up our lease (idle eviction, shutdown).
    pub async fn release_lease(&self, room_id: &str) -> Result<(), Error> {
        let _: i64 = self
            .pool
            .eval(
                RELEASE_LEASE,
                self.keys.lease(room_id),
                vec![self.lease_value.clone()],
            )
            .await
            .map_err(|error| Error::redis(&error))?;
        Ok(())
    }

    /// Closes the connections.
    pub async fn close(&self) {
        if let Err(error) = self.pool.quit().await {
            tracing::debug!(%error, "redis quit failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_values_name_node_and_address() {
        assert_eq!(
            LeaseHolder::parse("node-b http://10.0.0.2:7101", None),
            LeaseHolder {
                node_id: "node-b".into(),
                address: Some("http://10.0.0.2:7101".into()),
                lapses_in: None,
            }
        );
        // A value without an address (written by an older release) names the
        // node, and the command is refused instead of forwarded.
        assert_eq!(
            LeaseHolder::parse("node-b", Some(Duration::from_millis(700))),
            LeaseHolder {
                node_id: "node-b".into(),
                address: None,
                lapses_in: Some(Duration::from_millis(700)),
            }
        );
    }

    #[test]
    fn presence_members_round_trip() {
        let member = presence_member("room-1:a", "user.2");
        assert_eq!(split_presence_member(&member), Some(("room-1:a", "user.2")));
    }
}
