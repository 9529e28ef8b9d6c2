//! What may never be lost or left half-done: the wallet's net debit equals
//! the committed gifts and every gift saga reached a terminal, consistent
//! status; and nothing was dead-lettered (neither an outbox row the relay
//! gave up on nor a message a consumer gave up on), since every fault the
//! schedule injects is transient.

use super::effects::gifts;
use super::{Check, DEAD_LETTERS, MONEY, verdict};
use crate::observe::Observation;

pub(super) fn money_conserved(seen: &Observation) -> Check {
    let committed: u64 = gifts(seen).map(|(_, value)| value).sum();
    let net = seen.wallet.debited - seen.wallet.refunded;
    let mut offenders = Vec::new();
    if net != committed as i64 {
        offenders.push(format!(
            "wallet net {net} (debited {} − refunded {}) ≠ committed gifts {committed}",
            seen.wallet.debited, seen.wallet.refunded
        ));
    }
    for (command_id, status, amount) in &seen.sagas {
        if status != "committed" && status != "compensated" {
            offenders.push(format!("saga {command_id} left {status} ({amount})"));
        }
    }
    let saga_committed: u64 = seen
        .sagas
        .iter()
        .filter(|s| s.1 == "committed")
        .map(|s| s.2)
        .sum();
    if saga_committed != committed {
        offenders.push(format!(
            "committed sagas {saga_committed} ≠ committed gifts {committed}"
        ));
    }
    verdict(
        MONEY,
        format!(
            "debited {} − refunded {} = {net}; committed gifts {committed}; {} sagas",
            seen.wallet.debited,
            seen.wallet.refunded,
            seen.sagas.len()
        ),
        offenders,
    )
}

pub(super) fn dead_letters(seen: &Observation) -> Check {
    let mut offenders: Vec<String> = seen
        .outbox
        .iter()
        .filter(|e| e.status == "failed")
        .map(|e| format!("relay dead letter {} ({})", e.event_id, e.event_type))
        .collect();
    for (topic, count) in &seen.dead_letter_topics {
        if *count > 0 {
            offenders.push(format!("{topic}: {count} messages"));
        }
    }
    verdict(
        DEAD_LETTERS,
        format!(
            "{} failed outbox rows, {} dead-letter topics checked",
            seen.outbox.iter().filter(|e| e.status == "failed").count(),
            seen.dead_letter_topics.len()
        ),
        offenders,
    )
}
