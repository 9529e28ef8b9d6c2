//! The room list, presence and nudge side of [`Redis`]: a committed batch's
//! projections in one pipeline, presence heartbeats and expiries, and the
//! hottest rooms.

use fred::prelude::*;

use super::{Projection, Redis, presence_member, scripts::REMOVE_EXPIRED_PRESENCE};
use crate::Error;

impl Redis {
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
}
