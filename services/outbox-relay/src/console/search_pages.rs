//! The search side of the console's listings as HTML: each listing's
//! filter form (event id, room, event type, status, time range), its
//! "next page" link carrying the same search and the cursor, the dead
//! letters and audit results, and the room timeline with each group's
//! consumption and the event's lags and trace. Pure functions of their
//! input, written with `maud`, which escapes every value.

use super::audit_search::{AuditForm, AuditPage};
use super::consumption::{Applied, GroupColumn};
use super::html::{age, query_value, room_link, table, utc_ms};
use super::search::{Found, Page, STATUSES, SearchForm};
use super::trace::{TraceUrl, trace_id};
use crate::ops::AuditRecord;
use maud::{Markup, html};

/// Which fields a listing's form shows beside event id, type and time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fields {
    /// A room field (not on a room's own timeline, whose room is the page's).
    pub room: bool,
    /// A status choice (the failing listings are one status each).
    pub status: bool,
}

/// A listing's search form, GET to `path`; `keep` are hidden fields that
/// stay (the timeline's room).
pub fn search_form(path: &str, form: &SearchForm, fields: Fields, keep: &[(&str, &str)]) -> Markup {
    html! {
        form method="get" action=(path) class="search" id="search" {
            @for (name, value) in keep { input type="hidden" name=(*name) value=(*value); }
            input name="event_id" placeholder="event id" value=(form.event_id);
            @if fields.room { input name="room_id" placeholder="room id" value=(form.room_id); }
            input name="event_type" placeholder="event type" value=(form.event_type);
            @if fields.status {
                select name="status" {
                    option value="" { "any status" }
                    @for status in STATUSES {
                        option value=(status) selected[form.status == status] { (status) }
                    }
                }
            }
            input name="from" placeholder="from (UTC 2026-12-03 21:30, or 2h)" value=(form.from);
            input name="to" placeholder="to (UTC, or 10m)" value=(form.to);
            button type="submit" { "Search" }
        }
    }
}

/// The query string of `form` with the cursor `after` (`keep` first).
fn next_query(form: &SearchForm, keep: &[(&str, &str)], after: u64) -> String {
    let mut query = String::new();
    let fields = [
        ("event_id", form.event_id.as_str()),
        ("room_id", form.room_id.as_str()),
        ("event_type", form.event_type.as_str()),
        ("status", form.status.as_str()),
        ("from", form.from.as_str()),
        ("to", form.to.as_str()),
    ];
    for (name, value) in keep.iter().copied().chain(fields) {
        if !value.is_empty() {
            query.push_str(name);
            query.push('=');
            query.push_str(&query_value(value));
            query.push('&');
        }
    }
    query.push_str("after=");
    query.push_str(&after.to_string());
    query
}

/// The page's footer: how many, how far the search went, the next page.
pub fn page_footer(
    path: &str,
    form: &SearchForm,
    keep: &[(&str, &str)],
    page: &Page,
    noun: &str,
) -> Markup {
    html! {
        p id="page-count" { (page.rows.len()) " " (noun) " on this page." }
        @if let Some(last) = page.searched_to {
            p class="muted" id="searched-to" {
                "Searched " (super::search::WINDOW) " rows (up to id " (last)
                ") without filling a page; the next page searches on."
            }
        }
        @if let Some(after) = page.next_after {
            p { a id="next-page" href={ (path) "?" (next_query(form, keep, after)) } { "Next page →" } }
        }
    }
}

/// Dead letters found.
pub fn found_table(id: &str, rows: &[Found]) -> Markup {
    let cells: Vec<Vec<Markup>> = rows
        .iter()
        .map(|found| {
            let row = &found.row;
            vec![
                html! { (row.id) },
                room_link(&row.room_id),
                html! { (row.event_type) },
                html! { (row.event_id) },
                html! { (row.attempts) },
                html! { (row.last_error) },
                html! { (utc_ms(row.created_at_ms)) },
            ]
        })
        .collect();
    let headers = [
        "Id",
        "Room",
        "Type",
        "Event",
        "Attempts",
        "Last error",
        "Committed",
    ];
    table(id, &headers, &cells)
}

/// A room's timeline page: each event, its lags, its trace and, per group,
/// applied (time and lag), pending or not consumed by design.
pub fn timeline_table(
    rows: &[Found],
    columns: &[GroupColumn],
    applied: &[Vec<Applied>],
    trace_url: Option<&TraceUrl>,
) -> Markup {
    let mut headers = vec![
        "Seq",
        "Type",
        "Event",
        "Status",
        "Attempts",
        "Last error",
        "Committed",
        "Commit → publish",
        "Trace",
    ];
    headers.extend(columns.iter().map(|column| column.name.as_str()));
    let cells: Vec<Vec<Markup>> = rows
        .iter()
        .zip(applied)
        .map(|(found, groups)| {
            let row = &found.row;
            let mut cells = vec![
                html! { (row.room_event_seq) },
                html! { (row.event_type) },
                html! { (row.event_id) },
                html! { span class={ "status-" (row.status) } { (row.status) } },
                html! { (row.attempts) },
                html! { (row.last_error) },
                html! { (utc_ms(row.created_at_ms)) },
                html! {
                    @if found.delivered_at_ms > 0 {
                        (age(found.delivered_at_ms - row.created_at_ms))
                        br; span class="muted" { (utc_ms(found.delivered_at_ms)) }
                    } @else { span class="muted" { "not published" } }
                },
                trace_cell(&found.traceparent, trace_url),
            ];
            cells.extend(groups.iter().map(applied_cell));
            cells
        })
        .collect();
    table("timeline", &headers, &cells)
}

fn trace_cell(traceparent: &str, trace_url: Option<&TraceUrl>) -> Markup {
    match (trace_id(traceparent), trace_url) {
        (Some(id), Some(url)) => {
            html! { a class="trace" href=(url.link(id)) rel="noreferrer" { "trace" } }
        }
        (Some(id), None) => html! { code class="trace-id" { (id) } },
        (None, _) => html! { span class="muted" { "—" } },
    }
}

fn applied_cell(applied: &Applied) -> Markup {
    match applied {
        Applied::At {
            at_ms,
            from_commit_ms,
            from_publish_ms,
        } => html! {
            span class="applied" { "applied " (utc_ms(*at_ms)) }
            br;
            span class="lag" {
                (age(*from_commit_ms)) " after commit"
                @if let Some(lag) = from_publish_ms { ", " (age(*lag)) " after publish" }
            }
        },
        Applied::Pending => html! { span class="pending" { "pending" } },
        Applied::NotByDesign => html! { span class="muted by-design" { "not consumed by design" } },
    }
}

/// The audit page: its filter form, the rows, the next page.
pub fn audit(form: &AuditForm, page: &AuditPage) -> Markup {
    html! {
        form method="get" action="/console/audit" class="search" id="search" {
            select name="action" {
                option value="" { "any action" }
                @for action in crate::ops::audit::ACTIONS {
                    option value=(action) selected[form.action == action] { (action) }
                }
            }
            input name="room_id" placeholder="room id" value=(form.room_id);
            input name="operator" placeholder="operator" value=(form.operator);
            input name="event_id" placeholder="event id" value=(form.event_id);
            input name="from" placeholder="from (UTC 2026-12-03 21:30, or 2h)" value=(if form.from.is_empty() { &form.since } else { &form.from });
            input name="to" placeholder="to (UTC, or 10m)" value=(form.to);
            button type="submit" { "Filter" }
        }
        (audit_table(&page.records))
        p id="page-count" { (page.records.len()) " audit rows on this page." }
        @if page.window_ended {
            p class="muted" id="searched-to" {
                "Searched " (super::search::WINDOW) " rows without filling a page; the next page searches on."
            }
        }
        @if let Some(before) = &page.next_before {
            p { a id="next-page" href={ "/console/audit?" (audit_query(form, before)) } { "Next page →" } }
        }
    }
}

fn audit_query(form: &AuditForm, before: &str) -> String {
    let from = if form.from.is_empty() {
        &form.since
    } else {
        &form.from
    };
    let fields = [
        ("action", form.action.as_str()),
        ("room_id", form.room_id.as_str()),
        ("operator", form.operator.as_str()),
        ("event_id", form.event_id.as_str()),
        ("from", from.as_str()),
        ("to", form.to.as_str()),
        ("before", before),
    ];
    fields
        .iter()
        .filter(|(_, value)| !value.is_empty())
        .map(|(name, value)| format!("{name}={}", query_value(value)))
        .collect::<Vec<_>>()
        .join("&")
}

fn audit_table(records: &[AuditRecord]) -> Markup {
    let rows: Vec<Vec<Markup>> = records
        .iter()
        .map(|record| {
            vec![
                html! { (record.id) },
                html! { (utc_ms(record.at_ms)) },
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
    let headers = [
        "Id", "At", "Operator", "Action", "Room", "Event", "Rows", "Reason", "Detail",
    ];
    table("audit", &headers, &rows)
}
