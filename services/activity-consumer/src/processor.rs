//! The one idempotent code path of the activity service, used by the Kafka
//! consumer and the `activity.v1` gRPC entry alike: for `RoomGiftSent` facts,
//! in ONE transaction, claim the event ids in `consumer_dedup` and apply the
//! effects of the new ones — daily (UTC) leaderboard scores per activity,
//! per-room contribution totals, and a big-gift broadcast row. Other events
//! are acknowledged without touching MySQL. Upserts are aggregated per key
//! and issued in key order, so a batch costs a handful of statements and
//! concurrent batches lock rows in the same order.

use crate::{
    broadcast::{BroadcastRow, Broadcaster},
    config::{ActivityConfig, RankBy},
};
use consumer_runtime::{BatchError, Delivery, Handler, HandlerError, Outcome, dedup};
use outbox_schema::pb::{self, room_outbox_event::Payload};
use service_kit::db::statement::BoundedPool;
use sqlx::{Connection, MySqlConnection, QueryBuilder};
use std::collections::BTreeMap;

/// Applies room facts to the activity tables.
#[derive(Debug)]
pub struct ActivityProcessor {
    db: BoundedPool,
    consumer_group: String,
    config: ActivityConfig,
    broadcaster: Broadcaster,
}

/// `(activity_id, day, user_id)` → score to add.
type LeaderboardDelta = BTreeMap<(String, i32, String), u64>;
/// `room_id` → (value, gifts) to add.
type ContributionDelta = BTreeMap<String, (u64, u64)>;

impl ActivityProcessor {
    /// A processor dedup'ing in `consumer_group` (the gRPC entry shares it,
    /// so an event delivered both ways is applied once).
    pub fn new(
        db: impl Into<BoundedPool>,
        consumer_group: String,
        config: ActivityConfig,
        broadcaster: Broadcaster,
    ) -> Self {
        Self {
            db: db.into(),
            consumer_group,
            config,
            broadcaster,
        }
    }

    /// The broadcaster, for its sweeper.
    pub fn broadcaster(&self) -> &Broadcaster {
        &self.broadcaster
    }

    /// Applies `events` in order; one outcome per event.
    pub async fn apply(
        &self,
        events: &[&pb::RoomOutboxEvent],
    ) -> Result<Vec<Outcome>, HandlerError> {
        // Before any I/O: a malformed event can never be applied, so it is a
        // permanent failure (a batch falls back to one by one and only the
        // bad message is dead-lettered).
        for event in events {
            crate::validate::check_event(event).map_err(HandlerError::Permanent)?;
        }
        let outcomes = vec![Outcome::Ignored; events.len()];
        let gifts: Vec<(usize, &pb::RoomOutboxEvent, &pb::RoomGiftSent)> = events
            .iter()
            .enumerate()
            .filter_map(|(index, event)| match &event.payload {
                Some(Payload::RoomGiftSent(gift)) => Some((index, *event, gift)),
                _ => None,
            })
            .collect();
        if gifts.is_empty() {
            return Ok(outcomes);
        }
        // Claim and effects in one transaction, bounded by
        // `mysql.statement_timeout`: a stalled database fails the batch
        // (retried, then redelivered) instead of holding it.
        let (outcomes, broadcasts) = self
            .db
            .run(|connection, _| Box::pin(self.apply_gifts(connection, gifts, outcomes)))
            .await?;
        // The effect is durable; the broadcast is the row's business now.
        self.broadcaster.deliver_all(&broadcasts).await;
        Ok(outcomes)
    }

    /// The dedup claim of `gifts` and the effects of the fresh ones, in one
    /// transaction on `connection`; the outcomes and the broadcasts to send
    /// once it committed.
    async fn apply_gifts(
        &self,
        connection: &mut MySqlConnection,
        gifts: Vec<(usize, &pb::RoomOutboxEvent, &pb::RoomGiftSent)>,
        mut outcomes: Vec<Outcome>,
    ) -> Result<(Vec<Outcome>, Vec<BroadcastRow>), HandlerError> {
        let now_ms = service_kit::time::now_ms();
        let ids: Vec<&str> = gifts
            .iter()
            .map(|(_, event, _)| event.event_id.as_str())
            .collect();
        let mut tx = connection.begin().await?;
        let mut fresh =
            dedup::claim_many_in_tx(&mut tx, &self.consumer_group, &ids, now_ms).await?;
        let mut leaderboard = LeaderboardDelta::new();
        let mut contribution = ContributionDelta::new();
        let mut broadcasts = Vec::new();
        for (index, event, gift) in gifts {
            // `remove`: a repeat of the id later in the batch is a duplicate.
            if !fresh.remove(&event.event_id) {
                outcomes[index] = Outcome::Duplicate;
                continue;
            }
            outcomes[index] = Outcome::Applied;
            self.collect(
                event,
                gift,
                &mut leaderboard,
                &mut contribution,
                &mut broadcasts,
            );
        }
        upsert_leaderboard(&mut tx, &leaderboard, now_ms).await?;
        upsert_contribution(&mut tx, &contribution, now_ms).await?;
        insert_broadcasts(
            &mut tx,
            &broadcasts,
            now_ms,
            now_ms + self.broadcaster.lease_ms(),
        )
        .await?;
        tx.commit().await?;
        Ok((outcomes, broadcasts))
    }

    fn collect(
        &self,
        event: &pb::RoomOutboxEvent,
        gift: &pb::RoomGiftSent,
        leaderboard: &mut LeaderboardDelta,
        contribution: &mut ContributionDelta,
        broadcasts: &mut Vec<BroadcastRow>,
    ) {
        let day = utc_day(event.occurred_at_ms);
        for rule in &self.config.activities {
            if !rule.counts(&gift.gift_id, event.occurred_at_ms) {
                continue;
            }
            let user = match rule.rank_by {
                RankBy::Sender => &gift.sender_id,
                RankBy::Receiver => &gift.receiver_id,
            };
            let score = leaderboard
                .entry((rule.id.clone(), day, user.clone()))
                .or_default();
            *score = score.saturating_add(gift.total_value);
        }
        let room = contribution.entry(event.room_id.clone()).or_default();
        room.0 = room.0.saturating_add(gift.total_value);
        room.1 = room.1.saturating_add(u64::from(gift.count.max(1)));
        let threshold = self.config.big_gift_threshold;
        if threshold > 0 && gift.total_value >= threshold {
            broadcasts.push(BroadcastRow {
                event_id: event.event_id.clone(),
                room_id: event.room_id.clone(),
                sender_id: gift.sender_id.clone(),
                receiver_id: gift.receiver_id.clone(),
                gift_id: gift.gift_id.clone(),
                total_value: gift.total_value,
                attempts: 0,
            });
        }
    }
}

async fn upsert_leaderboard(
    tx: &mut sqlx::MySqlConnection,
    delta: &LeaderboardDelta,
    now_ms: i64,
) -> Result<(), sqlx::Error> {
    if delta.is_empty() {
        return Ok(());
    }
    let mut query = QueryBuilder::new(
        "INSERT INTO activity_gift_leaderboard (activity_id, day, user_id, score, updated_at_ms) ",
    );
    query.push_values(delta, |mut row, ((activity, day, user), score)| {
        row.push_bind(activity)
            .push_bind(day)
            .push_bind(user)
            .push_bind(score)
            .push_bind(now_ms);
    });
    query.push(
        " ON DUPLICATE KEY UPDATE score = score + VALUES(score), updated_at_ms = VALUES(updated_at_ms)",
    );
    query.build().execute(&mut *tx).await.map(drop)
}

async fn upsert_contribution(
    tx: &mut sqlx::MySqlConnection,
    delta: &ContributionDelta,
    now_ms: i64,
) -> Result<(), sqlx::Error> {
    if delta.is_empty() {
        return Ok(());
    }
    let mut query = QueryBuilder::new(
        "INSERT INTO activity_room_contribution (room_id, total_value, gift_count, updated_at_ms) ",
    );
    query.push_values(delta, |mut row, (room, (value, count))| {
        row.push_bind(room)
            .push_bind(value)
            .push_bind(count)
            .push_bind(now_ms);
    });
    query.push(
        " ON DUPLICATE KEY UPDATE total_value = total_value + VALUES(total_value), \
         gift_count = gift_count + VALUES(gift_count), updated_at_ms = VALUES(updated_at_ms)",
    );
    query.build().execute(&mut *tx).await.map(drop)
}

async fn insert_broadcasts(
    tx: &mut sqlx::MySqlConnection,
    rows: &[BroadcastRow],
    now_ms: i64,
    lease_until_ms: i64,
) -> Result<(), sqlx::Error> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut query = QueryBuilder::new(
        "INSERT IGNORE INTO activity_broadcasts (event_id, room_id, sender_id, receiver_id, \
         gift_id, total_value, status, created_at_ms, next_attempt_at_ms) ",
    );
    query.push_values(rows, |mut row, broadcast| {
        row.push_bind(&broadcast.event_id)
            .push_bind(&broadcast.room_id)
            .push_bind(&broadcast.sender_id)
            .push_bind(&broadcast.receiver_id)
            .push_bind(&broadcast.gift_id)
            .push_bind(broadcast.total_value)
            .push_bind("pending")
            .push_bind(now_ms)
            .push_bind(lease_until_ms);
    });
    query.build().execute(&mut *tx).await.map(drop)
}

/// The UTC calendar day of `ms` as `yyyymmdd` (days-from-civil inverse,
/// H. Hinnant), so leaderboards reset at 00:00 UTC like the room's daily reset.
pub fn utc_day(ms: i64) -> i32 {
    let days = ms.div_euclid(86_400_000);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    i32::try_from(year * 10_000 + month * 100 + day).unwrap_or(0)
}

impl Handler<pb::RoomOutboxEvent> for ActivityProcessor {
    async fn handle(
        &self,
        delivery: &Delivery<pb::RoomOutboxEvent>,
    ) -> Result<Outcome, HandlerError> {
        let outcomes = self.apply(&[&*delivery.message]).await?;
        Ok(outcomes.first().copied().unwrap_or(Outcome::Ignored))
    }

    /// One transaction for the batch; a failure rolls it all back, so the
    /// runtime retries the messages one by one.
    async fn handle_batch(
        &self,
        batch: &[Delivery<pb::RoomOutboxEvent>],
    ) -> Result<Vec<Outcome>, BatchError> {
        let events: Vec<&pb::RoomOutboxEvent> = batch.iter().map(|d| &*d.message).collect();
        Ok(self.apply(&events).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_days() {
        assert_eq!(utc_day(0), 19_700_101);
        assert_eq!(utc_day(86_400_000 - 1), 19_700_101);
        assert_eq!(utc_day(86_400_000), 19_700_102);
        // 2026-11-30T23:59:59.999Z and the next millisecond.
        assert_eq!(utc_day(1_796_083_199_999), 20_261_130);
        assert_eq!(utc_day(1_796_083_200_000), 20_261_201);
        assert_eq!(utc_day(951_782_400_000), 20_000_229, "leap day 2000");
    }
}
