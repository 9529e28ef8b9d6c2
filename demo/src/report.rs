//! The printed report: commands with their events, what each consumer did,
//! lag per hop (p50 / max) and the expected-effects verdict.

use crate::checks::{Check, GROUP_ACTIVITY, GROUP_IM, GROUP_NOTICE};
use crate::observe::Observed;
use crate::script::Step;
use std::collections::HashMap;
use std::fmt::Write as _;

/// p50 (nearest rank) and max of `values`, with their count.
pub fn summarize(values: &mut [i64]) -> Option<(i64, i64, usize)> {
    if values.is_empty() {
        return None;
    }
    values.sort_unstable();
    let p50 = values[values.len().div_ceil(2) - 1];
    Some((p50, values[values.len() - 1], values.len()))
}

fn lag_line(out: &mut String, hop: &str, mut values: Vec<i64>, source: &str) {
    let stats = summarize(&mut values).map_or_else(
        || format!("{:>8} {:>8} {:>4}", "-", "-", 0),
        |(p50, max, n)| format!("{:>6}ms {:>6}ms {n:>4}", p50, max),
    );
    let _ = writeln!(out, "  {hop:<40} {stats}   {source}");
}

/// Section 1: the commands.
pub fn commands(out: &mut String, steps: &[Step]) {
    let _ = writeln!(
        out,
        "\n1. Commands (gRPC → room-service; a reply means state + outbox are committed)"
    );
    for step in steps {
        let mark = if step.as_expected() { "ok " } else { "!! " };
        let latency = format!("{:.1}ms", step.latency.as_secs_f64() * 1000.0);
        match &step.outcome {
            Ok(reply) => {
                let events: Vec<&str> =
                    reply.events.iter().map(|e| e.event_type.as_str()).collect();
                let _ = writeln!(
                    out,
                    "  {mark} {:<48} v{:<3} {latency:>7}  {}",
                    step.label,
                    reply.room_version,
                    events.join(", ")
                );
            }
            Err(status) => {
                let _ = writeln!(
                    out,
                    "  {mark} {:<48} {:>12}  refused: {status}",
                    step.label, latency
                );
            }
        }
    }
}

/// Section 3: what each consumer did.
pub fn consumers(out: &mut String, observed: &Observed, sender_board: &str) {
    let _ = writeln!(out, "\n3. What each consumer did");
    let types: HashMap<&str, &str> = observed
        .outbox
        .iter()
        .map(|row| (row.event_id.as_str(), row.event_type.as_str()))
        .collect();
    let mut per_type: Vec<(String, usize)> = Vec::new();
    for message in &observed.room_messages {
        let kind = message
            .event_id
            .as_deref()
            .and_then(|id| types.get(id).copied())
            .unwrap_or(message.kind.as_str())
            .to_string();
        match per_type.iter_mut().find(|(name, _)| *name == kind) {
            Some((_, count)) => *count += 1,
            None => per_type.push((kind, 1)),
        }
    }
    let summary: Vec<String> = per_type
        .iter()
        .map(|(kind, n)| format!("{kind}×{n}"))
        .collect();
    let _ = writeln!(
        out,
        "  im-bridge          {} group message(s) in the room's IM group: {}",
        observed.room_messages.len(),
        summary.join(", ")
    );
    let _ = writeln!(
        out,
        "                     removed from the IM group: {:?}",
        observed.removed_members
    );
    let _ = writeln!(
        out,
        "  activity-consumer  leaderboard rows (activity_gift_leaderboard, today):"
    );
    if observed.leaderboard.is_empty() {
        let _ = writeln!(out, "                     (none)");
    }
    for (activity, user, score) in &observed.leaderboard {
        let marker = if activity == sender_board {
            ""
        } else {
            "  (receivers)"
        };
        let _ = writeln!(
            out,
            "                     {activity:<18} {user:<8} {score:>6}{marker}"
        );
    }
    for (event_id, sender, total, status, _) in &observed.broadcasts {
        let _ = writeln!(
            out,
            "                     big-gift broadcast: {sender} total {total} → {status} (event {event_id})"
        );
    }
    for message in &observed.broadcast_messages {
        let _ = writeln!(
            out,
            "                     global group message: {}",
            message.summary
        );
    }
    let _ = writeln!(
        out,
        "  notice-consumer    {} notice_delivery_events row(s), {} C2C message(s)",
        observed.notices.len(),
        observed.c2c_messages.len()
    );
    for (_, recipient, notice_type, status, _) in &observed.notices {
        let _ = writeln!(
            out,
            "                     notice {notice_type} → {recipient}: {status}"
        );
    }
    for message in &observed.c2c_messages {
        let to = message.to_account.as_deref().unwrap_or("?");
        let _ = writeln!(out, "                     C2C to {to}: {}", message.summary);
    }
}

/// Section 4: lag per hop.
pub fn lags(out: &mut String, observed: &Observed) {
    let _ = writeln!(
        out,
        "\n4. Lag per hop{:<27} {:>8} {:>8} {:>4}",
        "", "p50", "max", "n"
    );
    let rows: HashMap<&str, _> = observed
        .outbox
        .iter()
        .map(|row| (row.event_id.as_str(), row))
        .collect();
    let publish: Vec<i64> = observed
        .outbox
        .iter()
        .filter(|row| row.lane == 0)
        .filter_map(|row| row.delivered_at_ms.map(|at| at - row.created_at_ms))
        .collect();
    lag_line(
        out,
        "commit → publish (outbox-relay)",
        publish,
        "room_outbox delivered_at_ms − created_at_ms",
    );
    for (group, label) in [
        (GROUP_IM, "publish → consumed (im-bridge)"),
        (GROUP_ACTIVITY, "publish → consumed (activity-consumer)"),
        (GROUP_NOTICE, "publish → consumed (notice-consumer)"),
    ] {
        let values = observed
            .dedup
            .iter()
            .filter(|(g, _, _)| g == group)
            .filter_map(|(_, event_id, processed)| {
                rows.get(event_id.as_str())
                    .and_then(|row| row.delivered_at_ms)
                    .map(|delivered| processed - delivered)
            })
            .collect();
        lag_line(
            out,
            label,
            values,
            "consumer_dedup processed_at_ms − delivered_at_ms",
        );
    }
    let im_rows: Vec<(i64, i64)> = observed
        .room_messages
        .iter()
        .filter_map(|message| {
            let row = rows.get(message.event_id.as_deref()?)?;
            let delivered = row.delivered_at_ms?;
            Some((
                message.received_at_ms - delivered,
                message.received_at_ms - row.created_at_ms,
            ))
        })
        .collect();
    lag_line(
        out,
        "publish → IM group message (fake IM)",
        im_rows.iter().map(|(hop, _)| *hop).collect(),
        "fake IM received_at_ms − delivered_at_ms",
    );
    lag_line(
        out,
        "commit → IM group message (end to end)",
        im_rows.iter().map(|(_, total)| *total).collect(),
        "fake IM received_at_ms − created_at_ms",
    );
    let wakeups: Vec<i64> = observed
        .outbox
        .iter()
        .filter(|row| row.lane == 1)
        .filter_map(|row| row.delivered_at_ms.map(|at| at - row.next_retry_at_ms))
        .collect();
    lag_line(
        out,
        "wake-up due → published (treasure)",
        wakeups,
        "delivered_at_ms − open_at_ms",
    );
    let opened_at = observed
        .outbox
        .iter()
        .find(|row| row.event_type == "RoomTreasureOpened")
        .map(|row| row.created_at_ms);
    let opens: Vec<i64> = observed
        .outbox
        .iter()
        .filter(|row| row.lane == 1)
        .filter_map(|row| Some(opened_at? - row.delivered_at_ms?))
        .collect();
    lag_line(
        out,
        "wake-up published → box opened",
        opens,
        "RoomTreasureOpened created_at_ms − wake-up delivered_at_ms",
    );
}

/// Section 5 and the verdict line.
pub fn verdict(out: &mut String, checks: &[Check], unavailable: &[String], notes: &[String]) {
    let _ = writeln!(out, "\n5. Expected effects");
    for check in checks {
        let mark = if check.ok { "[ok]     " } else { "[MISSING]" };
        let _ = writeln!(out, "  {mark} {}", check.name);
        let _ = writeln!(out, "            {}", check.detail);
    }
    for service in unavailable {
        let _ = writeln!(out, "  note: service not running: {service}");
    }
    for note in notes {
        let _ = writeln!(out, "  note: could not read {note}");
    }
    let missing = checks.iter().filter(|check| !check.ok).count();
    if missing == 0 {
        let _ = writeln!(
            out,
            "\nRESULT: all {} expected effects observed",
            checks.len()
        );
    } else {
        let _ = writeln!(
            out,
            "\nRESULT: {missing} of {} expected effects MISSING (see the service logs)",
            checks.len()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p50_is_nearest_rank() {
        assert_eq!(summarize(&mut []), None);
        assert_eq!(summarize(&mut [5]), Some((5, 5, 1)));
        assert_eq!(summarize(&mut [9, 1, 5, 7]), Some((5, 9, 4)));
        assert_eq!(summarize(&mut [3, 1, 2]), Some((2, 3, 3)));
    }
}
