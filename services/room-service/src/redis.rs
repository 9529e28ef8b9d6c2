//! Everything room-service keeps in Redis: the room leases (one owner node per
//! room), the room list by heat, presence expiries, and the relay nudge.
//! Redis holds hot, short-lived state only; MySQL stays the source of truth.
//!
//! Keys (under `redis.key_prefix`, default `hyapp`, so several deployments
//! can share one Redis): `<prefix>:room:lease:{room_id}` (value: `<node id>
//! <advertised gRPC URL>`, PX lease TTL: the address is how another instance
//! forwards a command to the holder; neither part may contain a space), `<prefix>:room:list:heat` (zset room_id → heat),
//! `<prefix>:room:presence` (zset `{room_id}|{user_id}` → expires_at_ms; `|`
//! is outside the id charset, so the member splits unambiguously).

use std::time::Duration;

use fred::prelude::*;

use crate::Error;
use crate::config::RedisConfig;

/// Redis key names under one prefix.
#[derive(Debug, Clone)]
struct Keys {
    room_list: String,
    presence: String,
    lease_prefix: String,
}

impl Keys {
    fn new(prefix: &str) -> Self {
        Self {
            room_list: format!("{prefix}:room:list:heat"),
            presence: format!("{prefix}:room:presence"),
            lease_prefix: format!("{prefix}:room:lease:"),
        }
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

/// Takes the lease if free or already ours (refreshing it); returns the owner.
const ACQUIRE_LEASE: &str = r"
local owner = redis.call('GET', KEYS[1])
if not owner then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return ARGV[1]
end
if owner == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return owner
";

/// Extends the lease only while we still own it.
const RENEW_LEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
";

/// Deletes the lease only while we still own it.
const RELEASE_LEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
";

/// Removes a presence entry only if it is still expired (a heartbeat may have refreshed it).
const REMOVE_EXPIRED_PRESENCE: &str = r"
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) <= tonumber(ARGV[2]) then
  return redis.call('ZREM', KEYS[1], ARGV[1])
end
return 0
";

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
}

impl LeaseHolder {
    /// Parses a lease value: `<node id> <url>`, or a bare node id.
    pub fn parse(value: &str) -> Self {
        match value.split_once(' ') {
            Some((node_id, address)) if !address.is_empty() => Self {
                node_id: node_id.to_owned(),
                address: Some(address.to_owned()),
            },
            _ => Self {
                node_id: value.trim_end().to_owned(),
                address: None,
            },
        }
    }

    /// The refusal a command for `room_id` gets on a node that is not the holder.
    pub fn owned_elsewhere(self, room_id: &str) -> Error {
        Error::OwnedElsewhere {
            room_id: room_id.to_owned(),
            owner: self.node_id,
            address: self.address,
        }
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
    /// outage fails requests quickly; the pool reconnects by itself. Leases
    /// taken through it name `node_id` and `advertise_url`.
    pub async fn connect(
        config: &RedisConfig,
        node_id: &str,
        advertise_url: &str,
    ) -> Result<Self, Error> {
        let redis_config = config.client_config()?;
        let timeout = config.command_timeout.as_std();
        let pool = Builder::from_config(redis_config)
            .with_performance_config(|performance| {
                performance.default_command_timeout = timeout;
            })
            .with_connection_config(|connection| {
                connection.connection_timeout = timeout.max(Duration::from_millis(500));
                connection.internal_command_timeout = timeout.max(Duration::from_millis(500));
            })
            .set_policy(ReconnectPolicy::new_constant(0, 250))
            .build_pool(config.pool_size)
            .map_err(|error| Error::Config(format!("redis: {error}")))?;
        pool.init().await.map_err(|error| Error::redis(&error))?;
        Ok(Self {
            pool,
            node_id: node_id.to_owned(),
            lease_value: format!("{node_id} {advertise_url}"),
            lease_ttl_ms: config.lease_ttl.as_millis(),
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

    /// Acquires (or refreshes our own) lease of a room; errors name the owner.
    pub async fn acquire_lease(&self, room_id: &str) -> Result<(), Error> {
        let owner: String = self
            .pool
            .eval(
                ACQUIRE_LEASE,
                self.keys.lease(room_id),
                vec![self.lease_value.clone(), self.lease_ttl_ms.to_string()],
            )
            .await
            .map_err(|error| Error::redis(&error))?;
        if owner == self.lease_value {
            Ok(())
        } else {
            Err(LeaseHolder::parse(&owner).owned_elsewhere(room_id))
        }
    }

    /// Who holds the room's lease now, without taking it (`None`: nobody).
    pub async fn lease_holder(&self, room_id: &str) -> Result<Option<LeaseHolder>, Error> {
        let value: Option<String> = self
            .pool
            .get(self.keys.lease(room_id))
            .await
            .map_err(|error| Error::redis(&error))?;
        Ok(value
            .filter(|value| *value != self.lease_value)
            .map(|value| LeaseHolder::parse(&value)))
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

    /// Writes a batch's projections and nudge in one pipelined round trip.
    pub async fn project(&self, projection: &Projection) -> Result<(), Error> {
        if projection.is_empty() {
            return Ok(());
        }
        let pipeline = self.pool.next().pipeline();
        let queued: Result<(), fred::error::Error> = async {
            if let Some((room_id, heat)) = &projection.room_heat {
                let () = pipeline
                    .zadd(
                        self.keys.room_list.as_str(),
                        None,
                        None,
                        false,
                        false,
                        (*heat as f64, room_id.as_str()),
                    )
                    .await?;
            }
            if let Some(room_id) = &projection.remove_room {
                let () = pipeline
                    .zrem(self.keys.room_list.as_str(), room_id.as_str())
                    .await?;
            }
            if !projection.presence_set.is_empty() {
                let values: Vec<(f64, &str)> = projection
                    .presence_set
                    .iter()
                    .map(|(member, expires)| (*expires as f64, member.as_str()))
                    .collect();
                let () = pipeline
                    .zadd(
                        self.keys.presence.as_str(),
                        None,
                        None,
                        false,
                        false,
                        values,
                    )
                    .await?;
            }
            if !projection.presence_remove.is_empty() {
                let () = pipeline
                    .zrem(
                        self.keys.presence.as_str(),
                        projection.presence_remove.clone(),
                    )
                    .await?;
            }
            if let Some(shard) = projection.nudge_shard {
                let () = pipeline
                    .publish(outbox_schema::names::NUDGE_CHANNEL, shard.to_string())
                    .await?;
            }
            Ok(())
        }
        .await;
        queued.map_err(|error| Error::redis(&error))?;
        let _: Vec<Value> = pipeline.all().await.map_err(|error| Error::redis(&error))?;
        Ok(())
    }

    /// Sets a user's presence expiry (heartbeat).
    pub async fn touch_presence(
        &self,
        room_id: &str,
        user_id: &str,
        expires_at_ms: i64,
    ) -> Result<(), Error> {
        let _: Value = self
            .pool
            .zadd(
                self.keys.presence.as_str(),
                None,
                None,
                false,
                false,
                (expires_at_ms as f64, presence_member(room_id, user_id)),
            )
            .await
            .map_err(|error| Error::redis(&error))?;
        Ok(())
    }

    /// Up to `limit` presence entries expired at `now_ms`: (member, expires_at_ms).
    pub async fn expired_presence(
        &self,
        now_ms: i64,
        offset: i64,
        limit: i64,
    ) -> Result<Vec<(String, i64)>, Error> {
        let entries: Vec<(String, f64)> = self
            .pool
            .zrangebyscore(
                self.keys.presence.as_str(),
                "-inf",
                now_ms as f64,
                true,
                Some((offset, limit)),
            )
            .await
            .map_err(|error| Error::redis(&error))?;
        Ok(entries
            .into_iter()
            .map(|(member, score)| (member, score as i64))
            .collect())
    }

    /// Drops a presence entry if it is still expired at `now_ms`.
    pub async fn remove_expired_presence(&self, member: &str, now_ms: i64) -> Result<(), Error> {
        let _: i64 = self
            .pool
            .eval(
                REMOVE_EXPIRED_PRESENCE,
                self.keys.presence.as_str(),
                vec![member.to_owned(), now_ms.to_string()],
            )
            .await
            .map_err(|error| Error::redis(&error))?;
        Ok(())
    }

    /// The hottest rooms: (room_id, heat), hottest first.
    pub async fn top_rooms(&self, limit: i64) -> Result<Vec<(String, u64)>, Error> {
        let entries: Vec<(String, f64)> = self
            .pool
            .zrevrange(self.keys.room_list.as_str(), 0, limit - 1, true)
            .await
            .map_err(|error| Error::redis(&error))?;
        Ok(entries
            .into_iter()
            .map(|(room_id, heat)| (room_id, heat.max(0.0) as u64))
            .collect())
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
            LeaseHolder::parse("node-b http://10.0.0.2:7101"),
            LeaseHolder {
                node_id: "node-b".into(),
                address: Some("http://10.0.0.2:7101".into()),
            }
        );
        // A value without an address (written by an older release) names the
        // node, and the command is refused instead of forwarded.
        assert_eq!(
            LeaseHolder::parse("node-b"),
            LeaseHolder {
                node_id: "node-b".into(),
                address: None,
            }
        );
    }

    #[test]
    fn presence_members_round_trip() {
        let member = presence_member("room-1:a", "user.2");
        assert_eq!(split_presence_member(&member), Some(("room-1:a", "user.2")));
    }
}
