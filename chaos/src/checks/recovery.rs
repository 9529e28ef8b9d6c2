//! After each room-service kill, every room the killed instance held
//! answered again within the bound (`--max-unavailable-ms`, 5 s from
//! `cargo xtask chaos`): room-service notices a crashed holder by its lapsed
//! liveness key (1 s in the chaos stack) and the next call takes the room
//! over. What is measured, and what other faults excuse, is
//! [`crate::outage`]. The rule also fails a run whose kills during the
//! workload hit no room anybody asked about: it would have measured nothing.

use super::{Check, RECOVERY, verdict};
use crate::outage::{KillOutage, RoomOutage, percentile};
use std::time::Duration;

/// Every measured room back within `bound` once other faults' time is excused.
pub(super) fn rooms_recovered(kills: &[KillOutage], bound: Duration) -> Check {
    let bound_ms = u64::try_from(bound.as_millis()).unwrap_or(u64::MAX);
    let mut offenders: Vec<String> = kills
        .iter()
        .flat_map(|kill| {
            kill.rooms
                .iter()
                .filter(|room| !room.recovered || room.counted_ms() > bound_ms)
                .map(move |room| offence(kill, room, bound_ms))
        })
        .collect();
    let during = kills.iter().filter(|kill| kill.during_workload).count();
    let measured: usize = kills.iter().map(|kill| kill.rooms.len()).sum();
    if during > 0 && measured == 0 {
        offenders.push(format!(
            "{during} room-service kills during the workload, none hit a room with calls after it"
        ));
    }
    verdict(RECOVERY, summary(kills, bound_ms), offenders)
}

fn offence(kill: &KillOutage, room: &RoomOutage, bound_ms: u64) -> String {
    let state = if room.recovered {
        "unavailable"
    } else {
        "never answered again after"
    };
    let excused = if room.excused_ms > 0 {
        let by: Vec<&str> = room.excused_by.iter().map(String::as_str).collect();
        format!(
            ", {} excused by {}",
            seconds(room.excused_ms),
            by.join(", ")
        )
    } else {
        String::new()
    };
    format!(
        "kill -9 {} at {}: room {} {state} {}{excused}; bound {}",
        kill.target,
        seconds(kill.at_ms),
        room.room_id,
        seconds(room.unavailable_ms),
        seconds(bound_ms)
    )
}

/// Kills, rooms measured, and the longest and p99 counted unavailability.
fn summary(kills: &[KillOutage], bound_ms: u64) -> String {
    if kills.is_empty() {
        return "no room-service kill in this run".into();
    }
    let mut counted: Vec<u64> = kills
        .iter()
        .flat_map(|kill| kill.rooms.iter().map(RoomOutage::counted_ms))
        .collect();
    let excused = kills
        .iter()
        .flat_map(|kill| &kill.rooms)
        .filter(|room| room.excused_ms > 0)
        .count();
    format!(
        "{} kills, {} rooms measured ({excused} partly excused by other faults): \
         longest {}, p99 {} (bound {})",
        kills.len(),
        counted.len(),
        seconds(counted.iter().copied().max().unwrap_or(0)),
        seconds(percentile(&mut counted, 99)),
        seconds(bound_ms)
    )
}

/// `1.23s`.
pub(crate) fn seconds(ms: u64) -> String {
    format!("{:.2}s", ms as f64 / 1_000.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn room(unavailable_ms: u64, excused_ms: u64, recovered: bool) -> RoomOutage {
        RoomOutage {
            room_id: "r1".into(),
            unavailable_ms,
            excused_ms,
            excused_by: BTreeSet::from(["mysql-restart mariadb".to_string()]),
            recovered,
        }
    }

    fn kill(rooms: Vec<RoomOutage>) -> KillOutage {
        KillOutage {
            at_ms: 12_300,
            target: "room-service-2".into(),
            during_workload: true,
            held: rooms.len(),
            rooms,
        }
    }

    const BOUND: Duration = Duration::from_secs(5);

    #[test]
    fn rooms_back_within_the_bound_pass() {
        let check = rooms_recovered(&[kill(vec![room(1_200, 0, true)])], BOUND);
        assert!(check.passed, "{check:?}");
        assert!(check.summary.contains("longest 1.20s"), "{}", check.summary);
        let excused = rooms_recovered(&[kill(vec![room(9_000, 5_000, true)])], BOUND);
        assert!(excused.passed, "{excused:?}");
        assert!(rooms_recovered(&[], BOUND).passed);
    }

    #[test]
    fn a_room_past_the_bound_or_never_back_fails() {
        let slow = rooms_recovered(&[kill(vec![room(6_100, 0, true)])], BOUND);
        assert!(!slow.passed);
        assert!(
            slow.offenders[0].contains("room r1 unavailable 6.10s"),
            "{slow:?}"
        );
        let gone = rooms_recovered(&[kill(vec![room(100, 0, false)])], BOUND);
        assert!(
            gone.offenders[0].contains("never answered again"),
            "{gone:?}"
        );
    }

    #[test]
    fn kills_that_measured_nothing_fail() {
        let check = rooms_recovered(&[kill(Vec::new())], BOUND);
        assert!(!check.passed);
        let after_workload = KillOutage {
            during_workload: false,
            ..kill(Vec::new())
        };
        assert!(rooms_recovered(&[after_workload], BOUND).passed);
    }
}
