//! That the run exercised scale-out at all: with several room-service
//! instances, some acknowledged commands must have been forwarded (executed
//! by another instance than the one called, per `x-room-served-by`), and,
//! when the run had a fault that moves leases (a room-service kill or
//! graceful restart, a Redis restart), some room must have been executed by
//! more than one instance. Without them the one-writer rule would pass
//! without ever having been tested. A run with one room-service instance can
//! neither forward nor move a lease to another instance, so nothing is
//! required of it, and the verdict says so.

use super::{Check, SCALE_OUT, verdict};
use crate::ledger::{CommandRecord, FaultRecord, Outcome};
use std::collections::{BTreeMap, BTreeSet};

/// How the acknowledged commands spread over the instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Spread {
    /// Executed by another instance than the one called.
    pub forwarded: usize,
    /// Rooms executed by more than one instance over the run.
    pub moved: usize,
}

/// Counts forwarded commands and rooms whose lease moved.
pub(crate) fn spread(commands: &[CommandRecord]) -> Spread {
    let acked = || {
        commands
            .iter()
            .filter(|c| c.outcome == Outcome::Acked && !c.served_by.is_empty())
    };
    let forwarded = acked()
        .filter(|c| c.sent_to.last() != Some(&c.served_by))
        .count();
    let mut servers: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for command in acked() {
        servers
            .entry(command.room_id.as_str())
            .or_default()
            .insert(command.served_by.as_str());
    }
    let moved = servers.values().filter(|served| served.len() > 1).count();
    Spread { forwarded, moved }
}

/// Faults after which a room's lease is held by another instance.
fn moves_leases(fault: &FaultRecord) -> bool {
    match fault.kind.as_str() {
        "kill" | "graceful-restart" => fault.target.starts_with("room-service"),
        "redis-restart" => true,
        _ => false,
    }
}

/// Forwarding happened, and leases moved when a fault should have moved them.
pub(super) fn exercised(
    commands: &[CommandRecord],
    faults: &[FaultRecord],
    room_services: usize,
) -> Check {
    let Spread { forwarded, moved } = spread(commands);
    let figures =
        format!("{forwarded} forwarded, {moved} rooms executed by more than one instance");
    if room_services <= 1 {
        let summary = format!("{figures}; one room-service instance: not required");
        return verdict(SCALE_OUT, summary, Vec::new());
    }
    let lease_faults = faults.iter().filter(|f| moves_leases(f)).count();
    let mut offenders = Vec::new();
    if forwarded == 0 {
        offenders.push(format!(
            "no acknowledged command was forwarded across {room_services} instances"
        ));
    }
    if moved == 0 && lease_faults > 0 {
        offenders.push(format!(
            "no room was executed by more than one instance after {lease_faults} \
             room-service kills/restarts and Redis restarts"
        ));
    }
    let leases = if lease_faults == 0 {
        "; no fault moves a lease, moves not required"
    } else {
        ""
    };
    verdict(SCALE_OUT, format!("{figures}{leases}"), offenders)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acked(id: &str, room: &str, sent_to: &str, served_by: &str) -> CommandRecord {
        CommandRecord {
            command_id: id.into(),
            room_id: room.into(),
            kind: "join".into(),
            outcome: Outcome::Acked,
            detail: String::new(),
            attempts: 1,
            gift_value: 0,
            event_ids: vec![],
            sent_to: vec![sent_to.into()],
            served_by: served_by.into(),
            reply_version: 1,
            started_ms: 1,
            answered_ms: 2,
            retry_info_waits: 0,
        }
    }

    fn kill() -> Vec<FaultRecord> {
        vec![FaultRecord {
            at_ms: 0,
            kind: "kill".into(),
            target: "room-service-2".into(),
            started_ms: 1,
            ended_ms: 2,
            detail: String::new(),
        }]
    }

    #[test]
    fn forwarding_and_moved_leases_are_required_of_a_scaled_out_run() {
        let good = [
            acked("c1", "r1", "room-service", "room-service-2"),
            acked("c2", "r1", "room-service", "room-service"),
        ];
        assert_eq!(
            spread(&good),
            Spread {
                forwarded: 1,
                moved: 1
            }
        );
        assert!(exercised(&good, &kill(), 3).passed);
        let local = [acked("c1", "r1", "room-service", "room-service")];
        let check = exercised(&local, &kill(), 3);
        assert!(!check.passed);
        assert_eq!(check.offenders.len(), 2, "{:?}", check.offenders);
        let unmoved = [acked("c1", "r1", "room-service", "room-service-2")];
        assert!(!exercised(&unmoved, &kill(), 3).passed);
        let quiet = exercised(&unmoved, &[], 3);
        assert!(quiet.passed && quiet.summary.contains("not required"));
    }

    #[test]
    fn one_instance_is_not_held_to_it() {
        let local = [acked("c1", "r1", "room-service", "room-service")];
        let check = exercised(&local, &kill(), 1);
        assert!(check.passed && check.summary.contains("not required"));
    }
}
