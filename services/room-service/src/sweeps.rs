//! The periodic sweeps the background workers run: the presence stale
//! worker's sweep (expired users leave through a normal LeaveRoom command)
//! and the gift-saga recovery sweep (sagas stuck between debit and
//! commit/refund are refunded).
//!
//! They are a module of their own, above the room API (`service`) they drive
//! and below `app`, which schedules them in the worker slot (`workers`):
//! callers, tests included, call them here directly with the [`Rooms`].

use crate::Error;
use crate::redis::split_presence_member;
use crate::service::Rooms;

/// Most presence entries handled per sweep.
const PRESENCE_BATCH: i64 = 200;

/// Pages of expired presence entries looked at per sweep: entries of rooms
/// owned by other nodes stay in the shared zset, so a node pages past them
/// instead of being starved by them.
const MAX_PRESENCE_PAGES: usize = 10;

/// One presence sweep: every expired user leaves through a normal LeaveRoom
/// command. Entries of rooms owned by another node are left to that node.
/// Returns how many users left.
pub async fn sweep_presence(rooms: &Rooms) -> Result<usize, Error> {
    let now_ms = service_kit::time::now_ms();
    let redis = &rooms.deps.redis;
    let mut removed = 0;
    let mut offset = 0;
    for _ in 0..MAX_PRESENCE_PAGES {
        let expired = redis
            .expired_presence(now_ms, offset, PRESENCE_BATCH)
            .await?;
        let full_page = expired.len() as i64 == PRESENCE_BATCH;
        let mut kept = 0;
        for (member, expires_at_ms) in expired {
            let Some((room_id, user_id)) = split_presence_member(&member) else {
                redis.remove_expired_presence(&member, now_ms).await?;
                continue;
            };
            match rooms.expire_presence(room_id, user_id, expires_at_ms).await {
                Ok(_) => {
                    rooms.deps.metrics.presence_expired.inc();
                    removed += 1;
                }
                // Gone already (left, kicked, closed): only the entry remains.
                Err(Error::Rejected(_) | Error::InvalidArgument(_)) => {}
                Err(Error::OwnedElsewhere { .. }) => {
                    kept += 1;
                    continue;
                }
                Err(error) => {
                    tracing::warn!(room_id, user_id, %error, "presence expiry failed");
                    kept += 1;
                    continue;
                }
            }
            redis.remove_expired_presence(&member, now_ms).await?;
        }
        if !full_page {
            break;
        }
        // Removed entries left the range; the kept ones are skipped next page.
        offset += kept;
    }
    Ok(removed)
}

/// Most sagas repaired per sweep.
const SAGA_BATCH: u32 = 100;

/// One saga recovery sweep: every saga stuck between debit and commit/refund
/// for longer than `stuck_after_ms` (a crash) is claimed, refunded and marked
/// compensated. The claim excludes a late commit of a live pipeline.
/// Returns how many were refunded.
pub async fn sweep_sagas(rooms: &Rooms, stuck_after_ms: i64) -> Result<usize, Error> {
    let deps = &rooms.deps;
    let now_ms = service_kit::time::now_ms();
    let stale_before = now_ms.saturating_sub(stuck_after_ms);
    let stuck = deps
        .store
        .stuck_sagas(stale_before, SAGA_BATCH)
        .await
        .map_err(|error| Error::database(&error))?;
    let mut repaired = 0;
    for saga in stuck {
        let claimed = deps
            .store
            .claim_compensation(&saga.command_id, now_ms, Some(stale_before))
            .await
            .map_err(|error| Error::database(&error))?;
        if !claimed {
            continue;
        }
        match deps.wallet.refund(&saga.command_id, "saga recovery").await {
            Ok(refunded) => {
                deps.metrics.sagas_compensated.inc();
                deps.store
                    .mark_compensated(
                        &saga.command_id,
                        service_kit::time::now_ms(),
                        &format!("recovered ({refunded:?})"),
                    )
                    .await
                    .map_err(|error| Error::database(&error))?;
                tracing::info!(command_id = %saga.command_id, room_id = %saga.room_id, ?refunded, "gift saga compensated");
                repaired += 1;
            }
            Err(error) => {
                tracing::warn!(command_id = %saga.command_id, %error, "saga refund failed, retrying next sweep");
            }
        }
    }
    Ok(repaired)
}
