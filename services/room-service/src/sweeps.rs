//! The periodic sweeps the background workers run: the presence stale
//! worker's sweep (expired users leave through a normal LeaveRoom command)
//! and the gift-saga recovery sweep (sagas stuck between debit and
//! commit/refund are refunded, within a budget of refund attempts after which
//! they end `failed`).
//!
//! They are a module of their own, above the room API (`service`) they drive
//! and below `app`, which schedules them in the worker slot (`workers`):
//! callers, tests included, call them here directly with the [`Rooms`].

use crate::Error;
use crate::redis::split_presence_member;
use crate::service::Rooms;
use crate::store::saga::{EXHAUSTED_NOTE, SagaRow};
use crate::validate::{MAX_ROOM_ID_LEN, MAX_USER_ID_LEN, check_id};

/// Most presence entries handled per sweep.
const PRESENCE_BATCH: i64 = 200;

/// Pages of expired presence entries looked at per sweep: entries of rooms
/// owned by other nodes stay in the shared zset, so a node pages past them
/// instead of being starved by them.
const MAX_PRESENCE_PAGES: usize = 10;

/// One presence sweep: every expired user leaves through a normal LeaveRoom
/// command. Entries of rooms owned by another node are left to that node;
/// entries whose ids the API would refuse are removed without a command.
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
            let Some((room_id, user_id)) = valid_presence_member(&member) else {
                // Redis is an input like any other: a member that names no
                // possible room or user (written by something else) becomes
                // no command, no lease and no actor; it is only removed.
                tracing::warn!(member = %member.escape_debug().take(160).collect::<String>(), "presence entry with invalid ids removed");
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

/// The (room_id, user_id) of a presence member when both are ids the API
/// would accept.
fn valid_presence_member(member: &str) -> Option<(&str, &str)> {
    let (room_id, user_id) = split_presence_member(member)?;
    let valid = check_id("room_id", room_id, MAX_ROOM_ID_LEN).is_ok()
        && check_id("user_id", user_id, MAX_USER_ID_LEN).is_ok();
    valid.then_some((room_id, user_id))
}

/// Most sagas repaired per sweep.
const SAGA_BATCH: u32 = 100;

/// One saga recovery sweep: every saga stuck between debit and commit/refund
/// for longer than `stuck_after_ms` (a crash, or a refund that failed) is
/// claimed, refunded and marked compensated. The claim excludes a late commit
/// of a live pipeline. Each claim counts one refund attempt; a saga whose
/// refund still fails after `max_refund_attempts` attempts (the pipeline's
/// own included) becomes `failed`, is counted in `room_gift_sagas_failed_total`
/// and is never picked again (docs/design.md#gift-saga). The wait between two
/// attempts is `stuck_after_ms` after the failure, rounded up to the next sweep.
/// Returns how many were refunded.
pub async fn sweep_sagas(
    rooms: &Rooms,
    stuck_after_ms: i64,
    max_refund_attempts: u32,
) -> Result<usize, Error> {
    let deps = &rooms.deps;
    let now_ms = service_kit::time::now_ms();
    let stale_before = now_ms.saturating_sub(stuck_after_ms);
    let stuck = deps
        .store
        .stuck_sagas(stale_before, SAGA_BATCH)
        .await
        .map_err(|error| Error::database(&error))?;
    let budget = SagaBudget {
        now_ms,
        stale_before,
        max_refund_attempts,
    };
    let mut repaired = 0;
    for saga in stuck {
        if sweep_saga(rooms, &saga, budget).await? {
            repaired += 1;
        }
    }
    // After this sweep's own failures, so the gauge includes them.
    let failed_open = deps
        .store
        .count_failed_sagas()
        .await
        .map_err(|error| Error::database(&error))?;
    deps.metrics.sagas_failed_open.set(failed_open);
    // What this sweep could not settle (its refunds failed, or more than a
    // batch was stuck), counted by age since creation so a saga whose refund
    // just failed stays in: the alert waits for this to stay nonzero.
    let unsettled = deps
        .store
        .count_unsettled_sagas(stale_before)
        .await
        .map_err(|error| Error::database(&error))?;
    deps.metrics.sagas_unsettled.set(unsettled);
    Ok(repaired)
}

/// When one sweep runs and what it may spend on a saga.
#[derive(Debug, Clone, Copy)]
struct SagaBudget {
    now_ms: i64,
    stale_before: i64,
    max_refund_attempts: u32,
}

/// Recovers one stuck saga: fails it if its budget is already spent, else
/// claims it and makes one refund attempt. Returns whether it was refunded.
async fn sweep_saga(rooms: &Rooms, saga: &SagaRow, budget: SagaBudget) -> Result<bool, Error> {
    let deps = &rooms.deps;
    if saga.refund_attempts >= budget.max_refund_attempts {
        // Spent before this sweep: the last attempt failed in the pipeline
        // (which cannot fail a saga) or a crash followed its claim.
        let failed = deps
            .store
            .fail_saga(
                &saga.command_id,
                budget.now_ms,
                budget.max_refund_attempts,
                Some(budget.stale_before),
                None,
            )
            .await
            .map_err(|error| Error::database(&error))?;
        if failed {
            saga_failed(rooms, saga, saga.refund_attempts, EXHAUSTED_NOTE);
        }
        return Ok(false);
    }
    let claimed = deps
        .store
        .claim_compensation(&saga.command_id, budget.now_ms, Some(budget.stale_before))
        .await
        .map_err(|error| Error::database(&error))?;
    if !claimed {
        return Ok(false);
    }
    let attempt = saga.refund_attempts + 1;
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
            Ok(true)
        }
        Err(error) => {
            let error = error.to_string();
            let now_ms = service_kit::time::now_ms();
            let failed = deps
                .store
                .fail_saga(
                    &saga.command_id,
                    now_ms,
                    budget.max_refund_attempts,
                    None,
                    Some(&error),
                )
                .await
                .map_err(|error| Error::database(&error))?;
            if failed {
                saga_failed(rooms, saga, attempt, &error);
            } else {
                deps.store
                    .record_refund_failure(&saga.command_id, now_ms, &error)
                    .await
                    .map_err(|error| Error::database(&error))?;
                tracing::warn!(command_id = %saga.command_id, attempt, %error, "saga refund failed, retrying next sweep");
            }
            Ok(false)
        }
    }
}

/// Counts and reports a saga that just became `failed`: the sender was
/// debited and not refunded, so an operator must refund by hand.
fn saga_failed(rooms: &Rooms, saga: &SagaRow, refund_attempts: u32, error: &str) {
    rooms.deps.metrics.sagas_failed.inc();
    tracing::error!(
        command_id = %saga.command_id,
        room_id = %saga.room_id,
        sender_id = %saga.sender_id,
        amount = saga.amount,
        refund_attempts,
        error,
        "gift saga failed, refund by hand"
    );
}
