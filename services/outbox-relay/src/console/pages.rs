//! The console's pages as HTML, from the reports the `ops` functions return
//! (the same data the CLI prints): stuck rooms, dead letters (the overview:
//! `overview`; their replay: `replay_pages`), the audit trail and a room's timeline. Pure functions of
//! their input, written with `maud`, which escapes every value.

use super::html::{age, hidden, query_value, room_link, table, utc};
use crate::ops::timeline::Timeline;
use crate::ops::{AuditRecord, DeadLetter, Intervention, RowView};
use maud::{Markup, html};

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
    pub fn hidden_fields(&self) -> Markup {
        let fields = [
            ("room_id", &self.room_id),
            ("event_type", &self.event_type),
            ("since", &self.since),
            ("until_ms", &self.until_ms),
            ("limit", &self.limit),
        ];
        html! { @for (name, value) in fields { (hidden(name, value)) } }
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

/// A table of dead letters; `id` names it.
pub(super) fn dead_letter_table(id: &str, letters: &[DeadLetter]) -> Markup {
    let rows: Vec<Vec<Markup>> = letters
        .iter()
        .map(|letter| {
            vec![
                html! { (letter.id) },
                room_link(&letter.room_id),
                html! { (letter.event_type) },
                html! { (letter.event_id) },
                html! { (letter.retry_count) },
                html! { (letter.last_error) },
                html! { (utc(letter.created_at_ms)) },
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
) -> Markup {
    html! {
        p {
            "Rooms whose head is " code { "retryable" } ": nothing of the room is published before it. \
             A failed head is a dead letter and no longer holds its room: see Dead letters."
        }
        @if heads.is_empty() { p id="no-stuck" class="ok" { "No room is stuck." } }
        @for head in heads { (stuck_head(head, csrf, read_only, operator)) }
    }
}

/// One stuck room: its head, decoded payload and the actions on it.
fn stuck_head(head: &StuckHead<'_>, csrf: &str, read_only: bool, operator: Option<&str>) -> Markup {
    let row = head.row;
    let cells = vec![
        html! { (row.event_id) },
        html! { (row.event_type) },
        html! { (row.room_event_seq) },
        html! { (row.attempts) },
        html! { (utc(row.next_retry_at_ms)) " (in " (age(row.due_in_ms)) ")" },
        html! { span class="err" { (row.last_error) } },
        html! { (utc(row.created_at_ms)) },
    ];
    let headers = [
        "Event",
        "Type",
        "Seq",
        "Attempts",
        "Next retry",
        "Last error",
        "Committed",
    ];
    html! {
        section class="stuck" data-room=(row.room_id) {
            h2 { "Room " (room_link(&row.room_id)) }
            (table("head", &headers, &[cells]))
            pre class="payload" { (head.json) }
            @if read_only {
                p class="muted" { "Read-only session: no actions." }
            } @else {
                (action_form("/console/stuck/retry-now", "Retry now", &row.room_id, (csrf, operator), false))
                (action_form("/console/stuck/skip", "Skip", &row.room_id, (csrf, operator), true))
            }
        }
    }
}

/// Who acts: the session's operator, or a field asking for the name.
pub(super) fn operator_field(operator: Option<&str>) -> Markup {
    html! {
        @match operator {
            Some(name) => span class="muted" { "as " (name) },
            None => input name="operator" placeholder="operator" required
                pattern="[A-Za-z0-9_.:@-]{1,64}";,
        }
    }
}

/// A retry-now or skip form; `(csrf, operator)` as [`stuck`] takes them.
fn action_form(
    action: &str,
    label: &str,
    room_id: &str,
    (csrf, operator): (&str, Option<&str>),
    reason_required: bool,
) -> Markup {
    let placeholder = if reason_required {
        "reason"
    } else {
        "reason (optional)"
    };
    html! {
        form class="inline" method="post" action=(action) {
            (hidden("csrf", csrf))
            (hidden("room_id", room_id))
            (operator_field(operator))
            input name="reason" placeholder=(placeholder) maxlength="512" required[reason_required];
            button type="submit" { (label) }
        }
    }
}

/// The result of retry-now or skip.
pub fn intervened(done: &Intervention) -> Markup {
    html! {
        p class="ok" id="result" {
            (done.action) " by " (done.operator) " on event " (done.before.event_id)
            " of room " (room_link(&done.before.room_id)) ": "
            (done.before.status) " → " (done.after.status) " (audit #" (done.audit_id) ")."
        }
        p { "Reason: " (done.reason) }
        p { a href="/console/stuck" { "Back to stuck rooms" } }
    }
}

/// An operation's refusal, for any page.
pub fn refusal(message: &str) -> Markup {
    html! { p class="err" id="error" { (message) } }
}

/// The dead letters page: the filter form, the list and the dry-run button.
pub fn dead_letters(filter: &FilterForm, letters: &[DeadLetter]) -> Markup {
    html! {
        form method="get" action="/console/dead-letters" {
            input name="room_id" placeholder="room id" value=(filter.room_id);
            input name="event_type" placeholder="event type" value=(filter.event_type);
            input name="since" placeholder="since (2h)" value=(filter.since);
            button type="submit" { "Filter" }
        }
        p { (letters.len()) " dead letters." }
        (dead_letter_table("dead-letters", letters))
        p {
            a id="dry-run" href={ "/console/dead-letters/dry-run?" (filter.query()) } {
                "Dry run: what a replay would change"
            }
        }
    }
}

/// The audit page.
pub fn audit(records: &[AuditRecord]) -> Markup {
    let rows: Vec<Vec<Markup>> = records
        .iter()
        .map(|record| {
            vec![
                html! { (record.id) },
                html! { (utc(record.at_ms)) },
                html! { (record.operator) },
                html! { (record.action) },
                html! { @if !record.room_id.is_empty() { (room_link(&record.room_id)) } },
                html! { (record.event_id) },
                html! { (record.row_count) },
                html! { (record.reason) },
                html! { (record.detail) },
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
pub fn timeline(room_id: &str, timeline: Option<&Timeline>) -> Markup {
    html! {
        form method="get" action="/console/rooms" {
            input name="room_id" id="room-id" placeholder="room id" value=(room_id) required;
            button type="submit" { "Show" }
        }
        @if let Some(timeline) = timeline { (timeline_events(timeline)) }
    }
}

/// A room's events with their consumption per group.
fn timeline_events(timeline: &Timeline) -> Markup {
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
    let rows: Vec<Vec<Markup>> = timeline
        .events
        .iter()
        .map(|event| {
            let row = &event.row;
            let mut cells = vec![
                html! { (row.room_event_seq) },
                html! { (row.event_type) },
                html! { (row.event_id) },
                html! { span class={ "status-" (row.status) } { (row.status) } },
                html! { (row.attempts) },
                html! { (row.last_error) },
                html! { (utc(row.created_at_ms)) },
                html! { (utc(event.delivered_at_ms)) },
            ];
            cells.extend(event.consumed.iter().map(|(_, at)| match at {
                Some(at) => html! { (utc(*at)) },
                None => html! { span class="muted" { "not yet" } },
            }));
            cells
        })
        .collect();
    html! {
        p {
            "Room " (timeline.room_id) ": " (timeline.events.len())
            " events (the latest closed ones and every open one, up to 100 each)."
        }
        (table("timeline", &headers, &rows))
    }
}
