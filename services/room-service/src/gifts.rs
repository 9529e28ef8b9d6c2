//! The gift half of the write pipeline (docs/design.md#gift-saga): a
//! `debiting` saga row per gift, the wallet debits of a batch in parallel, and compensation —
//! claim the saga (which fails if the room commit landed), refund, record —
//! for every debited gift that does not commit, and for the gifts a previous
//! holder of the room left open (settled when the room is loaded here).

use std::time::Instant;

use futures::future::join_all;
use hyapp_api::room::CommandReply;

use crate::Error;
use crate::batch::{Pending, stored_answer};
use crate::deps::Deps;
use crate::mutation::{AppliedCommand, GiftCharge};
use crate::store::saga::{NewSaga, SagaRow, SagaStart, status};
use crate::wallet::DebitFailure;

/// A gift of the batch (its index in `pending`) and what it costs.
type Charge<'a> = (usize, GiftCharge<'a>);

/// Starts the sagas of the batch's uncharged gifts and debits them, each for
/// the amount room-core applied (`applied[i]` is `pending[i]` accepted); a
/// batch without one returns at once. Returns the commands that leave the
/// batch, with their answers.
pub(crate) async fn charge_gifts(
    deps: &Deps,
    pending: &mut [Pending],
    applied: &[AppliedCommand],
    now_ms: i64,
) -> Vec<(usize, Result<CommandReply, Error>)> {
    let started = Instant::now();
    let charges: Vec<Charge<'_>> = applied
        .iter()
        .enumerate()
        .filter(|(index, _)| !pending[*index].debited)
        .filter_map(|(index, command)| Some((index, command.gift_charge()?)))
        .collect();
    if charges.is_empty() {
        return Vec::new();
    }
    let sagas: Vec<NewSaga> = charges
        .iter()
        .map(|(index, charge)| {
            let request = &pending[*index].job.request;
            NewSaga {
                command_id: request.command_id.clone(),
                room_id: request.room_id.clone(),
                sender_id: charge.sender_id.to_owned(),
                amount: charge.amount,
            }
        })
        .collect();
    let mut removed = match deps.store.start_sagas(&sagas, now_ms).await {
        Ok(starts) => {
            // A saga already there is a retry of a gift begun before: it is
            // answered, not debited again.
            let mut to_debit = Vec::new();
            let mut existing = Vec::new();
            for ((index, charge), start) in charges.iter().copied().zip(starts) {
                match start {
                    SagaStart::Started => to_debit.push((index, charge)),
                    SagaStart::Exists(row) => existing.push((index, row)),
                }
            }
            let mut removed = if existing.is_empty() {
                Vec::new()
            } else {
                answer_existing(deps, pending, existing).await
            };
            removed.extend(debit(deps, pending, to_debit).await);
            removed
        }
        Err(error) => charges
            .iter()
            .map(|(index, _)| (*index, Err(Error::database(&error))))
            .collect(),
    };
    let elapsed = started.elapsed();
    for (entry, command) in pending.iter_mut().zip(applied) {
        if command.gift_charge().is_some() {
            entry.stages.wallet_debit += elapsed;
        }
    }
    removed.sort_by_key(|(index, _)| *index);
    removed
}

/// Answers the gifts whose saga existed already: from the command log when
/// the gift committed, else by the saga's state.
async fn answer_existing(
    deps: &Deps,
    pending: &[Pending],
    existing: Vec<(usize, SagaRow)>,
) -> Vec<(usize, Result<CommandReply, Error>)> {
    let ids: Vec<&str> = existing
        .iter()
        .map(|(_, row)| row.command_id.as_str())
        .collect();
    let stored = deps.store.lookup_commands(&ids).await;
    let mut answers = Vec::with_capacity(existing.len());
    for (index, row) in existing {
        let result = match &stored {
            Err(error) => Err(Error::database(error)),
            Ok(stored) => match stored
                .iter()
                .find(|found| found.command_id == row.command_id)
            {
                Some(found) => stored_answer(&pending[index], found),
                None if row.status == status::COMPENSATED => Err(Error::GiftCompensated {
                    command_id: row.command_id,
                }),
                None if row.status == status::FAILED => Err(Error::GiftRefundFailed {
                    command_id: row.command_id,
                }),
                None => Err(Error::GiftInFlight {
                    command_id: row.command_id,
                }),
            },
        };
        answers.push((index, result));
    }
    answers
}

/// Debits the gifts in parallel, each under its command id for its applied
/// amount; marks the debited ones and returns those that leave the batch.
async fn debit(
    deps: &Deps,
    pending: &mut [Pending],
    to_debit: Vec<Charge<'_>>,
) -> Vec<(usize, Result<CommandReply, Error>)> {
    let debits = to_debit.iter().map(|(index, charge)| {
        let request = &pending[*index].job.request;
        let reason = format!("gift {} in room {}", charge.gift_id, request.room_id);
        deps.wallet
            .debit(&request.command_id, charge.sender_id, charge.amount, reason)
    });
    let results = join_all(debits).await;
    let mut removed = Vec::new();
    for ((index, _), result) in to_debit.into_iter().zip(results) {
        let command_id = pending[index].job.request.command_id.clone();
        match result {
            Ok(()) => pending[index].debited = true,
            Err(DebitFailure::Refused(error)) => {
                // Nothing happened anywhere, so nothing stays written.
                if let Err(db_error) = deps.store.delete_saga(&command_id).await {
                    tracing::warn!(command_id, error = %db_error, "saga cleanup failed");
                }
                removed.push((index, Err(error)));
            }
            Err(DebitFailure::Unknown(error)) => {
                compensate(deps, &command_id, &error.to_string()).await;
                removed.push((index, Err(error)));
            }
        }
    }
    removed
}

/// Most orphaned gifts settled at one room load: more than one holder's
/// batch ever leaves open; the rest are left to the recovery sweep.
const MAX_ORPHANS_SETTLED: u32 = 256;

/// Settles the gifts of `room_id` that an earlier holder left between debit
/// and commit (it died, or lost the room, mid-batch): each is claimed —
/// which fails if that holder's commit landed after all — and refunded
/// under the debit's own idempotency key, so the wallet says whether the
/// debit ever happened. Called while this instance holds the room's lease
/// and before it runs a batch, so no live pipeline of its own has a gift of
/// the room in flight. Failures are left to the recovery sweep.
pub async fn settle_orphaned_gifts(deps: &Deps, room_id: &str) {
    let orphans = match deps
        .store
        .unsettled_sagas_of_room(
            room_id,
            deps.settings.max_refund_attempts,
            MAX_ORPHANS_SETTLED,
        )
        .await
    {
        Ok(orphans) => orphans,
        Err(error) => {
            tracing::warn!(room_id, %error, "orphaned gifts not listed; left to the saga sweep");
            return;
        }
    };
    if orphans.is_empty() {
        return;
    }
    let started = Instant::now();
    let refunded = join_all(orphans.iter().map(|saga| {
        compensate(
            deps,
            &saga.command_id,
            "the room's previous holder left it unsettled",
        )
    }))
    .await;
    let settled = refunded.into_iter().filter(|refunded| *refunded).count();
    deps.metrics.orphaned_gifts_settled.inc_by(settled as u64);
    tracing::info!(
        room_id,
        found = orphans.len(),
        settled,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "gifts left open by the previous holder settled"
    );
}

/// Compensates a gift whose room commit did not (or may not) happen: claims
/// the saga (which fails if the commit landed after all), refunds, records it.
/// Failures are left to the recovery sweep. Returns whether this call refunded it.
pub async fn compensate(deps: &Deps, command_id: &str, why: &str) -> bool {
    let now_ms = service_kit::time::now_ms();
    match deps
        .store
        .claim_compensation(command_id, now_ms, None)
        .await
    {
        Ok(true) => {}
        Ok(false) => return false,
        Err(error) => {
            tracing::warn!(command_id, %error, "saga claim failed, left to the sweep");
            return false;
        }
    }
    match deps.wallet.refund(command_id, why).await {
        Ok(refunded) => {
            deps.metrics.sagas_compensated.inc();
            let note = format!("{why} ({refunded:?})");
            if let Err(error) = deps
                .store
                .mark_compensated(command_id, service_kit::time::now_ms(), &note)
                .await
            {
                tracing::warn!(command_id, %error, "saga completion failed, left to the sweep");
            }
            true
        }
        Err(error) => {
            tracing::warn!(command_id, %error, "refund failed, left to the sweep");
            false
        }
    }
}
