//! The console's pages as HTML, from the reports the `ops` functions return
//! (the same data the CLI prints): stuck rooms and dead letters (the
//! overview: `overview`; their replay: `replay_pages`; searching them, the
//! audit trail and a room's timeline: `search_pages`). Pure functions of
//! their input, written with `maud`, which escapes every value.

use super::html::{age, hidden, query_value, room_link, table, utc};
use super::search::{Page, SearchForm};
use super::search_pages::{Fields, found_table, page_footer, search_form};
use crate::ops::{DeadLetter, Intervention, RowView};
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

/// The stuck rooms page's body: each retrying head with its actions, and
/// the bulk form acting on the ticked ones with one reason.
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
        @if !heads.is_empty() && !read_only { (bulk_form(csrf, operator)) }
        @for head in heads { (stuck_head(head, csrf, read_only, operator)) }
    }
}

/// The bulk form: the rooms' checkboxes belong to it (`form="bulk"`).
fn bulk_form(csrf: &str, operator: Option<&str>) -> Markup {
    html! {
        form id="bulk" class="bulk" method="post" action="/console/stuck/bulk-retry-now" {
            (hidden("csrf", csrf))
            "Ticked rooms: "
            (operator_field(operator))
            input name="reason" id="bulk-reason" placeholder="reason (one for all)" maxlength="512" required;
            button type="submit" id="bulk-retry-now" formaction="/console/stuck/bulk-retry-now" { "Retry all now" }
            button type="submit" id="bulk-skip" formaction="/console/stuck/bulk-skip" { "Skip all" }
        }
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
            h2 {
                @if !read_only {
                    input type="checkbox" form="bulk" name="room_id" value=(row.room_id)
                        class="tick" aria-label={ "tick room " (row.room_id) };
                    " "
                }
                "Room " (room_link(&row.room_id))
            }
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

/// The dead letters page: the search form, a page of them, the next page
/// and the dry-run link (for the room, type and `since` window searched).
pub fn dead_letters(form: &SearchForm, page: &Page) -> Markup {
    let fields = Fields {
        room: true,
        status: false,
    };
    let dry_run = FilterForm {
        room_id: form.room_id.clone(),
        event_type: form.event_type.clone(),
        since: form.from.clone(),
        ..FilterForm::default()
    };
    html! {
        (search_form("/console/dead-letters", form, fields, &[]))
        (found_table("dead-letters", &page.rows))
        (page_footer("/console/dead-letters", form, &[], page, "dead letters"))
        p {
            a id="dry-run" href={ "/console/dead-letters/dry-run?" (dry_run.query()) } {
                "Dry run: what a replay would change"
            }
            span class="muted" { " (of every dead letter of the room, type and from-window searched)" }
        }
    }
}

/// The room timeline's room form.
pub fn room_form(room_id: &str) -> Markup {
    html! {
        form method="get" action="/console/rooms" {
            input name="room_id" id="room-id" placeholder="room id" value=(room_id) required;
            button type="submit" { "Show" }
        }
    }
}
