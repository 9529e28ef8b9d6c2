//! The gift half of the write pipeline (docs/design.md#gift-saga): a
//! `debiting` saga row per gift, the wallet debits of a batch in parallel, and compensation —
//! claim the saga (which fails if the room commit landed), refund, record —
//! for every debited gift that does not commit.

use std::time::Instant;

use futures::future::join_all;
use hyapp_api::room::CommandReply;

use crate::Error;
use crate::batch::{Pending, stored_answer};
use crate::deps::Deps;
use crate::store::saga::{NewSaga, SagaStart, status};
use crate::wallet::DebitFailure;

/// Starts the sagas of the batch's uncharged gifts and debits them. Returns
/// the commands that leave the batch, with their answers.
pub(crate) async fn charge_gifts(
    deps: &Deps,
    pending: &mut [Pending],
    now_ms: i64,
) -> Vec<(usize, Result<CommandReply, Error>)> {
    let started = Instant::now();
    let indexes: Vec<usize> = (0..pending.len())
        .filter(|index| pending[*index].is_gift() && !pending[*index].debited)
        .collect();
    let sagas: Vec<NewSaga> = indexes
        .iter()
        .filter_map(|index| {
            let request = &pending[*index].job.request;
            let (sender_id, amount) = request.gift_charge()?;
            Some(NewSaga {
                command_id: request.command_id.clone(),
                room_id: request.room_id.clone(),
                sender_id: sender_id.to_owned(),
                amount,
            })
        })
        .collect();
    let mut removed = Vec::new();
    let starts = match deps.store.start_sagas(&sagas, now_ms).await {
        Ok(starts) => starts,
        Err(error) => {
            return indexes
                .into_iter()
                .map(|index| (index, Err(Error::database(&error))))
                .collect();
        }
    };
    let mut to_debit = Vec::new();
    let mut existing = Vec::new();
    for (index, start) in indexes.iter().copied().zip(starts) {
        match start {
            SagaStart::Started => to_debit.push(index),
            SagaStart::Exists(row) => existing.push((index, row)),
        }
    }
    if !existing.is_empty() {
        let ids: Vec<&str> = existing
            .iter()
            .map(|(_, row)| row.command_id.as_str())
            .collect();
        let stored = deps.store.lookup_commands(&ids).await;
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
            removed.push((index, result));
        }
    }
    let debits = to_debit.iter().map(|index| {
        let request = &pending[*index].job.request;
        let (sender_id, amount) = request.gift_charge().unwrap_or_default();
        let reason = match &request.command {
            room_core::Command::SendGift { gift_id, .. } => {
                format!("gift {gift_id} in room {}", request.room_id)
            }
            _ => String::new(),
        };
        deps.wallet
            .debit(&request.command_id, sender_id, amount, reason)
    });
    let results = join_all(debits).await;
    for (index, result) in to_debit.into_iter().zip(results) {
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
    let elapsed = started.elapsed();
    for entry in pending.iter_mut().filter(|entry| entry.is_gift()) {
        entry.stages.wallet_debit += elapsed;
    }
    removed.sort_by_key(|(index, _)| *index);
    removed
}

/// Compensates a gift whose room commit did not (or may not) happen: claims
/// the saga (which fails if the commit landed after all), refunds, records it.
/// Failures are left to the recovery sweep.
pub async fn compensate(deps: &Deps, command_id: &str, why: &str) {
    let now_ms = service_kit::time::now_ms();
    match deps
        .store
        .claim_compensation(command_id, now_ms, None)
        .await
    {
        Ok(true) => {}
        Ok(false) => return,
        Err(error) => {
            tracing::warn!(command_id, %error, "saga claim failed, left to the sweep");
            return;
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
        }
        Err(error) => tracing::warn!(command_id, %error, "refund failed, left to the sweep"),
    }
}
