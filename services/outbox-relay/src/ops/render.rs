//! The CLI's human-readable output: each operator report as aligned text
//! tables, times in UTC and waits as durations. Scripts use `--json`, which
//! prints the same reports serialised; this module is only for eyes.

use super::audit::AuditRecord;
use super::dead_letters::DeadLetter;
use super::intervene::Intervention;
use super::leases::LeaseReport;
use super::purge::PurgeReport;
use super::room::{RoomView, RowView};
use super::status::StatusReport;
use std::fmt::Write as _;

/// A report the CLI can print for people.
pub trait Render {
    /// The report as text, ending in a newline.
    fn render(&self) -> String;
}

/// Columns padded to their widest cell; a header and a rule above the rows.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    if rows.is_empty() {
        return "(none)\n".to_owned();
    }
    let mut widths: Vec<usize> = headers
        .iter()
        .map(|header| header.chars().count())
        .collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, cells: &mut dyn Iterator<Item = &str>| {
        let text: Vec<String> = cells
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        out.push_str(text.join("  ").trim_end());
        out.push('\n');
    };
    line(&mut out, &mut headers.iter().copied());
    let rule: Vec<String> = widths.iter().map(|width| "-".repeat(*width)).collect();
    line(&mut out, &mut rule.iter().map(String::as_str));
    for row in rows {
        line(&mut out, &mut row.iter().map(String::as_str));
    }
    out
}

/// The proleptic Gregorian `(year, month, day)` of `days` since 1970-01-01
/// (Howard Hinnant's `civil_from_days`): no date crate for one formula.
pub fn civil_date(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

/// `ms` since the Unix epoch as `YYYY-MM-DD HH:MM:SS.mmmZ` (proleptic
/// Gregorian, UTC); 0 prints as `-`.
pub fn utc(ms: i64) -> String {
    if ms == 0 {
        return "-".to_owned();
    }
    let of_day = ms.rem_euclid(86_400_000);
    let (year, month, day) = civil_date(ms.div_euclid(86_400_000));
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}.{:03}Z",
        of_day / 3_600_000,
        of_day / 60_000 % 60,
        of_day / 1_000 % 60,
        of_day % 1_000
    )
}

/// A wait as `1h2m`, `3m4s`, `5s`, `120ms`.
pub fn duration(ms: i64) -> String {
    let ms = ms.max(0);
    match ms {
        0..1_000 => format!("{ms}ms"),
        1_000..60_000 => format!("{}s", ms / 1_000),
        60_000..3_600_000 => format!("{}m{}s", ms / 60_000, ms / 1_000 % 60),
        _ => format!("{}h{}m", ms / 3_600_000, ms / 60_000 % 60),
    }
}

fn row_cells(row: &RowView) -> Vec<String> {
    vec![
        row.id.to_string(),
        row.event_id.clone(),
        row.room_id.clone(),
        row.room_event_seq.to_string(),
        row.event_type.clone(),
        row.status.clone(),
        row.attempts.to_string(),
        if row.due_in_ms > 0 {
            duration(row.due_in_ms)
        } else {
            "due".into()
        },
        row.last_error.clone(),
    ]
}

const ROW_HEADERS: [&str; 9] = [
    "ID",
    "EVENT_ID",
    "ROOM",
    "SEQ",
    "TYPE",
    "STATUS",
    "ATTEMPTS",
    "DUE IN",
    "LAST ERROR",
];

impl Render for StatusReport {
    fn render(&self) -> String {
        let mut out = table(
            &["OPEN", "RETRYABLE", "FAILED", "OLDEST OPEN AGE"],
            &[vec![
                self.open.to_string(),
                self.retryable.to_string(),
                self.failed.to_string(),
                duration(self.oldest_pending_age_ms),
            ]],
        );
        out.push_str("\nRetrying rows (each holds its room back), oldest first:\n");
        let rows: Vec<_> = self.retrying.iter().map(row_cells).collect();
        out.push_str(&table(&ROW_HEADERS, &rows));
        out
    }
}

impl Render for RoomView {
    fn render(&self) -> String {
        let mut out = format!("Room {} (shard {})\n\nHead:\n", self.room_id, self.shard);
        match &self.head {
            Some(head) => {
                for (name, value) in [
                    ("event_id", head.event_id.clone()),
                    ("type", head.event_type.clone()),
                    ("room seq", head.room_event_seq.to_string()),
                    ("status", head.status.clone()),
                    ("attempts", head.attempts.to_string()),
                    (
                        "next retry",
                        format!(
                            "{} (in {})",
                            utc(head.next_retry_at_ms),
                            duration(head.due_in_ms)
                        ),
                    ),
                    (
                        "claimed by",
                        format!("{} until {}", head.claimed_by, utc(head.lock_until_ms)),
                    ),
                    ("last error", head.last_error.clone()),
                    ("committed", utc(head.created_at_ms)),
                    ("payload", head.payload.clone()),
                ] {
                    let _ = writeln!(out, "  {name:<11} {value}");
                }
            }
            None => out.push_str("  (none: every chain row is delivered or dead-lettered)\n"),
        }
        let _ = writeln!(out, "\nQueued behind the head: {}", self.queued_behind);
        let rows: Vec<_> = self.queued.iter().map(row_cells).collect();
        out.push_str(&table(&ROW_HEADERS, &rows));
        out.push_str("\nOpen wake-ups (outside the chain):\n");
        let rows: Vec<_> = self.wakeups.iter().map(row_cells).collect();
        out.push_str(&table(&ROW_HEADERS, &rows));
        out
    }
}

impl Render for Vec<DeadLetter> {
    fn render(&self) -> String {
        let rows: Vec<_> = self
            .iter()
            .map(|letter| {
                vec![
                    letter.id.to_string(),
                    letter.event_id.clone(),
                    letter.room_id.clone(),
                    letter.event_type.clone(),
                    letter.retry_count.to_string(),
                    utc(letter.created_at_ms),
                    letter.last_error.clone(),
                ]
            })
            .collect();
        table(
            &[
                "ID",
                "EVENT_ID",
                "ROOM",
                "TYPE",
                "ATTEMPTS",
                "COMMITTED",
                "LAST ERROR",
            ],
            &rows,
        )
    }
}

impl Render for LeaseReport {
    fn render(&self) -> String {
        let rows: Vec<_> = self
            .instances
            .iter()
            .map(|instance| {
                vec![
                    instance.instance_id.clone(),
                    instance.live_shards.to_string(),
                    duration(instance.heartbeat_age_ms),
                    utc(instance.started_at_ms),
                ]
            })
            .collect();
        let mut out = table(
            &["INSTANCE", "LIVE SHARDS", "HEARTBEAT AGO", "STARTED"],
            &rows,
        );
        let _ = writeln!(
            out,
            "\nShards without a live lease: {:?}\n",
            self.uncovered_shards
        );
        let rows: Vec<_> = self
            .shards
            .iter()
            .map(|lease| {
                vec![
                    lease.shard.to_string(),
                    lease.owner.clone(),
                    lease.epoch.to_string(),
                    utc(lease.lease_until_ms),
                    if lease.live { "live" } else { "expired" }.to_owned(),
                ]
            })
            .collect();
        out.push_str(&table(
            &["SHARD", "OWNER", "EPOCH", "LEASE UNTIL", "STATE"],
            &rows,
        ));
        out
    }
}

impl Render for Vec<AuditRecord> {
    fn render(&self) -> String {
        let rows: Vec<_> = self
            .iter()
            .map(|record| {
                vec![
                    utc(record.at_ms),
                    record.operator.clone(),
                    record.action.clone(),
                    record.room_id.clone(),
                    record.event_id.clone(),
                    record.row_count.to_string(),
                    record.reason.clone(),
                ]
            })
            .collect();
        table(
            &[
                "AT", "OPERATOR", "ACTION", "ROOM", "EVENT_ID", "ROWS", "REASON",
            ],
            &rows,
        )
    }
}

impl Render for Intervention {
    fn render(&self) -> String {
        let mut out = format!(
            "{} by {} (audit #{}): {}\n\n",
            self.action, self.operator, self.audit_id, self.reason
        );
        out.push_str(&table(
            &ROW_HEADERS,
            &[row_cells(&self.before), row_cells(&self.after)],
        ));
        out
    }
}

impl Render for PurgeReport {
    fn render(&self) -> String {
        format!(
            "deleted {} delivered rows older than {} ({} expired audit rows); audit #{}\n",
            self.deleted,
            duration(self.retention_ms),
            self.audit_rows_deleted,
            self.audit_id
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_waits_read_naturally() {
        assert_eq!(utc(0), "-");
        assert_eq!(utc(1), "1970-01-01 00:00:00.001Z");
        assert_eq!(utc(951_782_400_000), "2000-02-29 00:00:00.000Z");
        assert_eq!(utc(1_798_761_599_999), "2026-12-31 23:59:59.999Z");
        assert_eq!(duration(999), "999ms");
        assert_eq!(duration(300_000), "5m0s");
        assert_eq!(duration(7_260_000), "2h1m");
    }

    #[test]
    fn tables_align_columns() {
        let text = table(&["A", "BB"], &[vec!["xxx".into(), "y".into()]]);
        assert_eq!(text, "A    BB\n---  --\nxxx  y\n");
        assert_eq!(table(&["A"], &[]), "(none)\n");
    }
}
