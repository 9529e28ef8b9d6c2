//! The console's pages as HTML, from the reports the `ops` functions return
//! (the same data the CLI prints): stuck rooms, dead letters (the overview:
//! `overview`; their replay: `replay_pages`), the audit trail and a room's timeline. Pure functions of
//! their input; every value goes through `html::escape`.

use super::html::{age, escape, hidden, query_value, room_link, table, utc};
use crate::ops::timeline::Timeline;
use crate::ops::{AuditRecord, DeadLetter, Intervention, RowView};
use std::fmt::Write as _;

/// The dead-letter filter as the forms carry it (empty = any).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(default)]
pub struct FilterForm {
    /// Room id.
    pub room_id: String,
    /// Event type.
    pub event_type: String,
    /// Window ending now, `2h`-style.
    pub since: String,
    /// Committed before (ms); set by a dry run so the replay is the same set.
    pub until_ms: String,
    /// At most this many; set by a dry run to what it showed.
    pub limit: String,
}

impl FilterForm {
    /// The filter as hidden fields of a form.
    pub fn hidden_fields(&self) -> String {
        [
            ("room_id", &self.room_id),
            ("event_type", &self.event_type),
            ("since", &self.since),
            ("until_ms", &self.until_ms),
            ("limit", &self.limit),
        ]
        .iter()
        .map(|(name, value)| hidden(name, value))
        .collect()
    }

    fn query(&self) -> String {
        format!(
            "room_id={}&event_type={}&since={}",
            query_value(&self.room_id),
            query_value(&self.event_type),
            query_value(&self.since)
        )
    }
}

pub(super) fn dead_letter_table(id: &str, letters: &[DeadLetter]) -> String {
    let rows: Vec<Vec<String>> = letters
        .iter()
        .map(|letter| {
            vec![
                letter.id.to_string(),
                room_link(&letter.room_id),
                escape(&letter.event_type),
                escape(&letter.event_id),
                letter.retry_count.to_string(),
                escape(&letter.last_error),
                utc(letter.created_at_ms),
            ]
        })
        .collect();
    table(
        id,
        &[
            "Id",
            "Room",
            "Type",
            "Event",
            "Attempts",
            "Last error",
            "Committed",
        ],
        &rows,
    )
}

/// A retrying head with its decoded payload, for the stuck rooms page.
#[derive(Debug)]
pub struct StuckHead<'a> {
    /// The row.
    pub row: &'a RowView,
    /// Its payload as JSON.
    pub json: String,
}

/// The stuck rooms page's body: each retrying head with its actions.
/// `operator` is the session's named operator: then the forms ask no name.
pub fn stuck(
    heads: &[StuckHead<'_>],
    csrf: &str,
    read_only: bool,
    operator: Option<&str>,
) -> String {
    let mut out = String::from(
        "<p>Rooms whose head is <code>retryable</code>: nothing of the room is published before it. \
         A failed head is a dead letter and no longer holds its room: see Dead letters.</p>",
    );
    if heads.is_empty() {
        out.push_str("<p id=\"no-stuck\" class=\"ok\">No room is stuck.</p>");
    }
    for head in heads {
        let row = head.row;
        let _ = write!(
            out,
            "<section class=\"stuck\" data-room=\"{room_attr}\"><h2>Room {room}</h2>",
            room_attr = escape(&row.room_id),
            room = room_link(&row.room_id)
        );
        out.push_str(&table(
            "head",
            &[
                "Event",
                "Type",
                "Seq",
                "Attempts",
                "Next retry",
                "Last error",
                "Committed",
            ],
            &[vec![
                escape(&row.event_id),
                escape(&row.event_type),
                row.room_event_seq.to_string(),
                row.attempts.to_string(),
                format!("{} (in {})", utc(row.next_retry_at_ms), age(row.due_in_ms)),
                format!("<span class=\"err\">{}</span>", escape(&row.last_error)),
                utc(row.created_at_ms),
            ]],
        ));
        let _ = write!(out, "<pre class=\"payload\">{}</pre>", escape(&head.json));
        if read_only {
            out.push_str("<p class=\"muted\">Read-only session: no actions.</p>");
        } else {
            out.push_str(&action_form(
                "/console/stuck/retry-now",
                "Retry now",
                &row.room_id,
                (csrf, operator),
                false,
            ));
            out.push_str(&action_form(
                "/console/stuck/skip",
                "Skip",
                &row.room_id,
                (csrf, operator),
                true,
            ));
        }
        out.push_str("</section>");
    }
    out
}

/// A retry-now or skip form; `(csrf, operator)` as [`stuck`] takes them.
fn action_form(
    action: &str,
    label: &str,
    room_id: &str,
    (csrf, operator): (&str, Option<&str>),
    reason_required: bool,
) -> String {
    let who = match operator {
        Some(name) => format!("<span class=\"muted\">as {}</span>", escape(name)),
        None => "<input name=\"operator\" placeholder=\"operator\" required \
                 pattern=\"[A-Za-z0-9_.:@-]{1,64}\">"
            .to_owned(),
    };
    format!(
        "<form class=\"inline\" method=\"post\" action=\"{action}\">{csrf}{room}{who}\
         <input name=\"reason\" placeholder=\"reason{optional}\" maxlength=\"512\"{required}>\
         <button type=\"submit\">{label}</button></form>",
        action = escape(action),
        csrf = hidden("csrf", csrf),
        room = hidden("room_id", room_id),
        optional = if reason_required { "" } else { " (optional)" },
        required = if reason_required { " required" } else { "" },
        label = escape(label),
    )
}

/// The result of retry-now or skip.
pub fn intervened(done: &Intervention) -> String {
    format!(
        "<p class=\"ok\" id=\"result\">{action} by {operator} on event {event} of room {room}: \
         {before} → {after} (audit #{audit}).</p><p>Reason: {reason}</p>\
         <p><a href=\"/console/stuck\">Back to stuck rooms</a></p>",
        action = escape(done.action),
        operator = escape(&done.operator),
        event = escape(&done.before.event_id),
        room = room_link(&done.before.room_id),
        before = escape(&done.before.status),
        after = escape(&done.after.status),
        audit = done.audit_id,
        reason = escape(&done.reason),
    )
}

/// An operation's refusal, for any page.
pub fn refusal(message: &str) -> String {
    format!("<p class=\"err\" id=\"error\">{}</p>", escape(message))
}

/// The dead letters page: the filter form, the list and the dry-run button.
pub fn dead_letters(filter: &FilterForm, letters: &[DeadLetter]) -> String {
    let mut out = format!(
        "<form method=\"get\" action=\"/console/dead-letters\">\
         <input name=\"room_id\" placeholder=\"room id\" value=\"{}\">\
         <input name=\"event_type\" placeholder=\"event type\" value=\"{}\">\
         <input name=\"since\" placeholder=\"since (2h)\" value=\"{}\">\
         <button type=\"submit\">Filter</button></form>",
        escape(&filter.room_id),
        escape(&filter.event_type),
        escape(&filter.since)
    );
    let _ = write!(out, "<p>{} dead letters.</p>", letters.len());
    out.push_str(&dead_letter_table("dead-letters", letters));
    let _ = write!(
        out,
        "<p><a id=\"dry-run\" href=\"/console/dead-letters/dry-run?{}\">Dry run: what a replay would change</a></p>",
        escape(&filter.query())
    );
    out
}

/// The audit page.
pub fn audit(records: &[AuditRecord]) -> String {
    let rows: Vec<Vec<String>> = records
        .iter()
        .map(|record| {
            vec![
                record.id.to_string(),
                utc(record.at_ms),
                escape(&record.operator),
                escape(&record.action),
                if record.room_id.is_empty() {
                    String::new()
                } else {
                    room_link(&record.room_id)
                },
                escape(&record.event_id),
                record.row_count.to_string(),
                escape(&record.reason),
                escape(&record.detail),
            ]
        })
        .collect();
    table(
        "audit",
        &[
            "Id", "At", "Operator", "Action", "Room", "Event", "Rows", "Reason", "Detail",
        ],
        &rows,
    )
}

/// The room timeline page: the room form, then its events.
pub fn timeline(room_id: &str, timeline: Option<&Timeline>) -> String {
    let mut out = format!(
        "<form method=\"get\" action=\"/console/rooms\"><input name=\"room_id\" id=\"room-id\" \
         placeholder=\"room id\" value=\"{}\" required><button type=\"submit\">Show</button></form>",
        escape(room_id)
    );
    let Some(timeline) = timeline else {
        return out;
    };
    let mut headers = vec![
        "Seq",
        "Type",
        "Event",
        "Status",
        "Attempts",
        "Last error",
        "Committed",
        "Delivered",
    ];
    headers.extend(timeline.groups.iter().map(String::as_str));
    let rows: Vec<Vec<String>> = timeline
        .events
        .iter()
        .map(|event| {
            let row = &event.row;
            let mut cells = vec![
                row.room_event_seq.to_string(),
                escape(&row.event_type),
                escape(&row.event_id),
                format!("<span class=\"status-{0}\">{0}</span>", escape(&row.status)),
                row.attempts.to_string(),
                escape(&row.last_error),
                utc(row.created_at_ms),
                utc(event.delivered_at_ms),
            ];
            cells.extend(event.consumed.iter().map(|(_, at)| {
                at.map_or_else(|| "<span class=\"muted\">not yet</span>".into(), utc)
            }));
            cells
        })
        .collect();
    let _ = write!(
        out,
        "<p>Room {}: {} events (the latest closed ones and every open one, up to 100 each).</p>",
        escape(&timeline.room_id),
        timeline.events.len()
    );
    out.push_str(&table("timeline", &headers, &rows));
    out
}
