//! The printed report: commands with their events, what each consumer did
//! (with the gift storm: how its gifts reached the room's IM group, and one
//! gift batch shown as it was sent), lag per hop (p50 / max) and the
//! expected-effects verdict.

use crate::checks::{Check, GROUP_ACTIVITY, GROUP_IM, GROUP_NOTICE};
use crate::im_messages::{GIFT_BATCH_DESC, ImMessage};
use crate::observe::{Observed, OutboxRow};
use crate::script::{Step, Storm};
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

/// Rows of the sample gift batch the report prints.
const SAMPLE_ROWS: usize = 3;

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

/// Section 1: the commands; the gift storm as one line.
pub fn commands(out: &mut String, steps: &[Step], storm: &Storm) {
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
    let pairs: Vec<String> = storm
        .pairs
        .iter()
        .map(|(sender, receiver)| format!("{sender} → {receiver}"))
        .collect();
    let _ = writeln!(
        out,
        "  {} gift storm: {} × SendGift star 1×{} ({} in turn), {} in flight: {} accepted in {} ms",
        if storm.refusals.is_empty() {
            "ok "
        } else {
            "!! "
        },
        storm.sent,
        storm.unit_value,
        pairs.join(", "),
        storm.concurrency,
        storm.event_ids.len(),
        storm.elapsed.as_millis()
    );
    for refusal in &storm.refusals {
        let _ = writeln!(out, "         refused: {refusal}");
    }
}

/// What a room group message is, for the per-type count: a gift batch, or
/// the type of the event it carries.
fn message_kind<'a>(message: &'a ImMessage, types: &HashMap<&str, &'a str>) -> &'a str {
    if message.kind == GIFT_BATCH_DESC {
        return GIFT_BATCH_DESC;
    }
    message
        .event_ids
        .first()
        .and_then(|id| types.get(id.as_str()).copied())
        .unwrap_or(message.kind.as_str())
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
        let kind = message_kind(message, &types).to_string();
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

/// Section 3, the gift storm: how its gifts reached the room's IM group, and
/// the largest gift batch as it was sent, so a reader sees what one is.
pub fn gift_storm(out: &mut String, observed: &Observed, storm: &Storm) {
    let storm_ids: HashSet<&str> = storm.event_ids.iter().map(String::as_str).collect();
    let in_messages = |batched: bool| -> usize {
        observed
            .room_messages
            .iter()
            .filter(|message| (message.kind == GIFT_BATCH_DESC) == batched)
            .flat_map(|message| &message.event_ids)
            .filter(|id| storm_ids.contains(id.as_str()))
            .count()
    };
    let batches = observed
        .room_messages
        .iter()
        .filter(|message| message.kind == GIFT_BATCH_DESC)
        .count();
    let _ = writeln!(
        out,
        "  gift storm         {} accepted gifts: {} sent alone, {} merged into {batches} {GIFT_BATCH_DESC} message(s)",
        storm.event_ids.len(),
        in_messages(false),
        in_messages(true)
    );
    let _ = match observed.room_group_stats {
        Some(stats) => writeln!(
            out,
            "                     fake IM, room group: busiest second {} messages, {} refused by the limit, {} delivered",
            stats.peak_per_second, stats.freq_dropped, stats.delivered
        ),
        None => writeln!(
            out,
            "                     fake IM, room group: counters unreadable"
        ),
    };
    let largest = observed
        .room_messages
        .iter()
        .filter_map(|message| Some((message, message.gift_batch.as_ref()?)))
        .max_by_key(|(_, batch)| batch.rows.len());
    let Some((message, batch)) = largest else {
        let _ = writeln!(out, "                     no gift batch in the room group");
        return;
    };
    let _ = writeln!(
        out,
        "                     the largest batch (msg_seq {}, Desc {GIFT_BATCH_DESC}) carried {} gifts; Data.fields:",
        message.msg_seq,
        batch.rows.len()
    );
    let _ = writeln!(
        out,
        "                       {}",
        serde_json::Value::from(batch.fields.clone())
    );
    let _ = writeln!(out, "                     its first rows (Data.events):");
    for row in batch.rows.iter().take(SAMPLE_ROWS) {
        let _ = writeln!(
            out,
            "                       {}",
            serde_json::Value::from(row.clone())
        );
    }
    if batch.rows.len() > SAMPLE_ROWS {
        let _ = writeln!(
            out,
            "                       … and {} more",
            batch.rows.len() - SAMPLE_ROWS
        );
    }
}

/// Section 4: lag per hop. The IM hops measure the scripted session's
/// events; the storm's gifts, paced and merged on purpose, get a line of
/// their own.
pub fn lags(out: &mut String, observed: &Observed, storm: &Storm) {
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
    consumer_lags(out, observed, &rows);
    im_lags(out, observed, &rows, storm);
    wakeup_lags(out, observed);
}

/// Publish → consumed, per consumer group.
fn consumer_lags(out: &mut String, observed: &Observed, rows: &HashMap<&str, &OutboxRow>) {
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
}

/// Publish → IM and commit → IM of the session's events, and the storm's end to end.
fn im_lags(out: &mut String, observed: &Observed, rows: &HashMap<&str, &OutboxRow>, storm: &Storm) {
    let storm_ids: HashSet<&str> = storm.event_ids.iter().map(String::as_str).collect();
    // Every event a message represents, with the message's receipt time.
    let represented = observed.room_messages.iter().flat_map(|message| {
        message
            .event_ids
            .iter()
            .map(move |id| (id.as_str(), message.received_at_ms))
    });
    let mut storm_end_to_end = Vec::new();
    let mut im_rows: Vec<(i64, i64)> = Vec::new();
    for (id, received_at_ms) in represented {
        let Some(row) = rows.get(id) else {
            continue;
        };
        if storm_ids.contains(id) {
            storm_end_to_end.push(received_at_ms - row.created_at_ms);
        } else if let Some(delivered) = row.delivered_at_ms {
            im_rows.push((
                received_at_ms - delivered,
                received_at_ms - row.created_at_ms,
            ));
        }
    }
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
    lag_line(
        out,
        "storm gift commit → IM (alone or batch)",
        storm_end_to_end,
        "fake IM received_at_ms − created_at_ms",
    );
}

/// The treasure wake-up: due → published, and published → box opened.
fn wakeup_lags(out: &mut String, observed: &Observed) {
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
    use crate::im_messages::{GiftBatch, GroupStats};
    use serde_json::json;

    fn room_message(event_ids: &[&str], batch_rows: Option<usize>) -> ImMessage {
        ImMessage {
            to_account: None,
            received_at_ms: 0,
            msg_seq: 9,
            event_ids: event_ids.iter().map(|id| id.to_string()).collect(),
            gift_batch: batch_rows.map(|rows| GiftBatch {
                fields: vec!["event_id".into(), "sender_id".into()],
                rows: (0..rows)
                    .map(|row| vec![json!(format!("s{row}")), json!("alice")])
                    .collect(),
            }),
            kind: if batch_rows.is_some() {
                GIFT_BATCH_DESC
            } else {
                "RoomGiftSent"
            }
            .into(),
            summary: String::new(),
        }
    }

    #[test]
    fn the_storm_shows_its_largest_batch_and_its_first_rows() {
        let observed = Observed {
            room_messages: vec![
                room_message(&["s0"], None),
                room_message(&["s1", "s2"], Some(2)),
                room_message(&["s3", "s4", "s5", "s6", "s7"], Some(5)),
            ],
            room_group_stats: Some(GroupStats {
                delivered: 3,
                freq_dropped: 0,
                peak_per_second: 3,
            }),
            ..Observed::default()
        };
        let storm = Storm {
            event_ids: (0..8).map(|index| format!("s{index}")).collect(),
            ..Storm::default()
        };
        let mut out = String::new();
        gift_storm(&mut out, &observed, &storm);
        assert!(
            out.contains("8 accepted gifts: 1 sent alone, 7 merged into 2 RoomGiftBatch"),
            "{out}"
        );
        assert!(
            out.contains("busiest second 3 messages, 0 refused"),
            "{out}"
        );
        assert!(
            out.contains("(msg_seq 9, Desc RoomGiftBatch) carried 5 gifts"),
            "{out}"
        );
        assert!(out.contains(r#"["event_id","sender_id"]"#), "{out}");
        assert!(out.contains(r#"["s2","alice"]"#), "{out}");
        assert!(
            !out.contains(r#"["s3","alice"]"#),
            "only the first {SAMPLE_ROWS} rows: {out}"
        );
        assert!(out.contains("… and 2 more"), "{out}");
    }

    #[test]
    fn p50_is_nearest_rank() {
        assert_eq!(summarize(&mut []), None);
        assert_eq!(summarize(&mut [5]), Some((5, 5, 1)));
        assert_eq!(summarize(&mut [9, 1, 5, 7]), Some((5, 9, 4)));
        assert_eq!(summarize(&mut [3, 1, 2]), Some((2, 3, 3)));
    }
}
