//! One writer per room. Every room-service instance accepts every command
//! and forwards it to the instance holding the room's Redis lease; the lease
//! moves (an instance crashed, restarted or lost Redis), and what keeps a
//! stale owner from committing is the version compare-and-set on `rooms`.
//! Had two instances ever served one room at once and both committed, the
//! command log would show it: the room's versions would repeat or skip
//! (`room_command_log` is never truncated — snapshots are pruned, the log is
//! not — so they must run 1..n). Had a compare-and-set conflict been answered
//! as a success, a client would hold a reply whose version is not the one
//! its command was logged at; so every acknowledged reply, and every stored
//! reply, must carry its log row's version.
//!
//! Which instance executed each acknowledged command (`x-room-served-by`)
//! is summarised too; that the run forwarded commands and moved leases at
//! all is [`super::scale_out`]'s rule.

use super::{Check, ONE_WRITER, verdict};
use crate::ledger::{CommandRecord, Outcome};
use crate::observe::Observation;
use std::collections::BTreeMap;

/// Log versions 1..n per room; each acknowledged and each stored reply at its
/// command's logged version.
pub(super) fn one_writer_per_room(commands: &[CommandRecord], seen: &Observation) -> Check {
    let mut offenders = Vec::new();
    let mut versions: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for (command_id, entry) in &seen.log {
        versions
            .entry(entry.room_id.as_str())
            .or_default()
            .push(entry.version);
        if entry.reply_version != entry.version {
            offenders.push(format!(
                "{command_id}: logged at version {} of room {}, its stored reply says {}",
                entry.version, entry.room_id, entry.reply_version
            ));
        }
    }
    for (room, logged) in &mut versions {
        if let Some(problem) = not_one_to_n(logged) {
            offenders.push(format!("room {room} command log versions: {problem}"));
        }
    }
    let mut acked = 0;
    for command in commands.iter().filter(|c| c.outcome == Outcome::Acked) {
        acked += 1;
        // A command missing from the log is the acknowledged rule's finding.
        let Some(entry) = seen.log.get(&command.command_id) else {
            continue;
        };
        if command.reply_version != entry.version {
            offenders.push(format!(
                "{} answered with version {} (served by {:?}) but logged at version {} of room {}",
                command.command_id,
                command.reply_version,
                command.served_by,
                entry.version,
                entry.room_id
            ));
        }
    }
    verdict(
        ONE_WRITER,
        format!(
            "{} rooms, {} log rows; {acked} acknowledged replies; {}",
            versions.len(),
            seen.log.len(),
            scale_out_summary(commands)
        ),
        offenders,
    )
}

/// Describes how `versions` differs from exactly 1, 2, …, n (sorts them).
fn not_one_to_n(versions: &mut [u64]) -> Option<String> {
    versions.sort_unstable();
    let (index, version) = (1..)
        .zip(versions.iter().copied())
        .find(|(expected, version)| version != expected)?;
    let problem = if version < index {
        format!("version {version} repeated")
    } else {
        format!("version {index} missing")
    };
    Some(format!(
        "{} rows from {} to {}: {problem}",
        versions.len(),
        versions.first().copied().unwrap_or_default(),
        versions.last().copied().unwrap_or_default(),
    ))
}

/// How the acknowledged commands spread over the instances (the scale-out
/// rule asserts these figures).
fn scale_out_summary(commands: &[CommandRecord]) -> String {
    let spread = super::scale_out::spread(commands);
    format!(
        "{} forwarded, {} rooms executed by more than one instance",
        spread.forwarded, spread.moved
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_must_run_from_one_without_gaps_or_repeats() {
        assert_eq!(not_one_to_n(&mut [3, 1, 2]), None);
        assert_eq!(not_one_to_n(&mut []), None);
        let repeated = not_one_to_n(&mut [1, 2, 2, 3]).unwrap();
        assert!(repeated.contains("version 2 repeated"), "{repeated}");
        let gap = not_one_to_n(&mut [1, 2, 4]).unwrap();
        assert!(gap.contains("version 3 missing"), "{gap}");
        assert!(
            not_one_to_n(&mut [2, 3]).is_some(),
            "a log must start at version 1"
        );
    }
}
