//! The report's section on room-service kills: per kill, the rooms the
//! killed instance held, how many were asked about afterwards, and their
//! longest and p99 unavailability (raw, and counted once other faults'
//! time is excused, as [`crate::outage`] measures it).

use crate::outage::{KillOutage, RoomOutage, percentile};
use std::fmt::Write;

/// The section, empty when the run killed no room-service instance.
pub(super) fn section(kills: &[KillOutage]) -> String {
    if kills.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "\nRoom-service kills: rooms unavailable (raw / counted after other faults)\n",
    );
    for kill in kills {
        let _ = writeln!(out, "  {}", line(kill));
    }
    let counted: Vec<u64> = kills
        .iter()
        .flat_map(|kill| kill.rooms.iter().map(RoomOutage::counted_ms))
        .collect();
    let _ = writeln!(
        out,
        "  all kills: {} rooms, counted {}",
        counted.len(),
        figures(counted)
    );
    out
}

fn line(kill: &KillOutage) -> String {
    let head = format!(
        "[{:>6.1}s] kill -9 {:<15} held {:>3}, asked after {:>3}",
        kill.at_ms as f64 / 1_000.0,
        kill.target,
        kill.held,
        kill.rooms.len()
    );
    if kill.rooms.is_empty() {
        let why = if kill.during_workload {
            "nothing measured"
        } else {
            "after the workload"
        };
        return format!("{head}  ({why})");
    }
    let raw = figures(kill.rooms.iter().map(|room| room.unavailable_ms).collect());
    let counted = figures(kill.rooms.iter().map(RoomOutage::counted_ms).collect());
    let unrecovered = kill.rooms.iter().filter(|room| !room.recovered).count();
    let mut text = format!("{head}  raw {raw}  counted {counted}");
    if unrecovered > 0 {
        let _ = write!(text, "  {unrecovered} never back");
    }
    let excusing: std::collections::BTreeSet<&str> = kill
        .rooms
        .iter()
        .flat_map(|room| room.excused_by.iter().map(String::as_str))
        .collect();
    if !excusing.is_empty() {
        let names: Vec<&str> = excusing.into_iter().collect();
        let _ = write!(text, "  overlapped by {}", names.join(", "));
    }
    text
}

/// `longest X, p99 Y` of `values` (ms).
fn figures(mut values: Vec<u64>) -> String {
    let longest = values.iter().copied().max().unwrap_or(0);
    let p99 = percentile(&mut values, 99);
    format!(
        "longest {}, p99 {}",
        crate::checks::seconds(longest),
        crate::checks::seconds(p99)
    )
}
