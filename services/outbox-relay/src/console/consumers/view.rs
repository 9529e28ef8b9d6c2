//! The consumer pages as HTML: pure functions of what was read, written with
//! `maud`, which escapes every value (room ids, payloads, reasons and
//! headers are hostile input). Each dead letter and failed delivery carries
//! the exact consumer CLI command that replays or retries it, quoted for a
//! POSIX shell, and (unless the session is read-only) a form that asks the
//! group's service to do it (`super::requests`).

use super::super::html::{hidden, query_value, room_link, table, utc};
use super::super::pages::{operator_field, refusal};
use consumer_runtime::host::{DeadLetter, DeadLettersFound, FailedRow};
use maud::{Markup, html};

/// One group's counts on the overview.
#[derive(Debug)]
pub(super) struct GroupCounts<'a> {
    pub service: &'static str,
    pub group: &'a str,
    pub topic: String,
    pub letters: Result<u64, crate::Error>,
    pub table: Option<&'static str>,
    pub failed: Option<Result<i64, crate::Error>>,
}

/// A group, as its page names it.
#[derive(Debug)]
pub(super) struct Group<'a> {
    pub service: &'static str,
    pub group: &'a str,
    pub topic: String,
    pub table: Option<&'static str>,
    /// The session's CSRF token and named operator, for the request forms;
    /// None for a read-only session, which may not request anything.
    pub form: Option<(&'a str, Option<&'a str>)>,
}

pub(super) fn group_href(group: &str) -> String {
    format!("/console/consumers/group?group={}", query_value(group))
}

/// `/console/consumers`: every group with its counts and a link to its page.
pub(super) fn overview(rows: &[GroupCounts<'_>]) -> Markup {
    let cells: Vec<Vec<Markup>> = rows
        .iter()
        .map(|row| {
            vec![
                html! { a href=(group_href(row.group)) { (row.group) } },
                html! { (row.service) },
                html! { (row.topic) },
                match &row.letters {
                    Ok(count) => html! { span class="dead-letter-count" { (count) } },
                    Err(error) => refusal(&error.to_string()),
                },
                match (&row.table, &row.failed) {
                    (Some(table), Some(Ok(count))) => {
                        html! { span class="failed-count" { (count) } " in " (table) }
                    }
                    (_, Some(Err(error))) => refusal(&error.to_string()),
                    _ => html! { span class="muted" { "no delivery table" } },
                },
            ]
        })
        .collect();
    html! {
        p class="muted" {
            "Each consumer group's own dead letters (its " code { "<group>.dlq" } " topic, \
             read without touching the group's offsets) and its delivery table's failed rows. \
             Replays and retries run in the consumer service: each row shows the command."
        }
        (table(
            "consumer-groups",
            &["group", "service", "dead-letter topic", "dead letters", "failed deliveries"],
            &cells,
        ))
    }
}

/// A group's page: its dead letters (or why they cannot be read) and its
/// failed deliveries.
pub(super) fn group(
    group: &Group<'_>,
    letters: Result<DeadLettersFound, crate::Error>,
    failed: Option<&[FailedRow]>,
    requests: Markup,
) -> Markup {
    html! {
        p id="group" { "Group " strong { (group.group) } ", run by " code { (group.service) } "." }
        h2 { "Requests" }
        (requests)
        h2 { "Dead letters in " code { (group.topic) } }
        @match &letters {
            Ok(found) => {
                p class="muted" id="dead-letter-summary" {
                    (found.matched) " dead letters"
                    @if found.matched > found.letters.len() {
                        "; the first " (found.letters.len()) " are shown (use "
                        code { (group.service) " dead-letters list" } " for the rest)"
                    }
                    "."
                }
                (letter_table(group, &found.letters))
            }
            Err(error) => (refusal(&error.to_string())),
        }
        h2 { "Failed deliveries" }
        @match (group.table, failed) {
            (Some(table_name), Some(rows)) => {
                p class="muted" {
                    "The oldest " (rows.len()) " failed rows of " code { (table_name) } "."
                }
                (failed_table(group, rows))
            }
            _ => p class="muted" id="no-delivery-table" {
                (group.service) " has no delivery table."
            },
        }
        p { a href="/console/consumers" { "Back to the consumer groups" } }
    }
}

fn letter_table(group: &Group<'_>, letters: &[DeadLetter]) -> Markup {
    let rows: Vec<Vec<Markup>> = letters
        .iter()
        .map(|letter| {
            let position = format!("{}/{}", letter.dlq_partition, letter.dlq_offset);
            let href = format!(
                "/console/consumers/dead-letter?group={}&position={}",
                query_value(group.group),
                query_value(&position)
            );
            vec![
                html! { (letter.event_id) },
                room_link(&letter.room_id),
                html! { (letter.event_type) },
                html! { (letter.reason) },
                html! { (letter.attempts) },
                html! { (utc(letter.dead_lettered_at_ms)) },
                html! { (letter.source) },
                html! { a href=(href) class="inspect" { "inspect " (position) } },
                html! { code class="cli" { (replay_command(group.service, &letter.event_id)) } },
                request_form(group, "replay", &letter.event_id, Some(&position)),
            ]
        })
        .collect();
    table(
        "consumer-dead-letters",
        &[
            "event id",
            "room",
            "type",
            "reason",
            "attempts",
            "dead-lettered (UTC)",
            "source position",
            "dead-letter position",
            "replay with",
            "or ask the service",
        ],
        &rows,
    )
}

fn failed_table(group: &Group<'_>, rows: &[FailedRow]) -> Markup {
    let cells: Vec<Vec<Markup>> = rows
        .iter()
        .map(|row| {
            vec![
                html! { (row.event_id) },
                room_link(&row.room_id),
                html! { (row.target) },
                html! { (row.attempts) },
                html! { (row.last_error) },
                html! { (utc(row.created_at_ms)) },
                html! { code class="cli" { (retry_command(group.service, &row.event_id)) } },
                request_form(group, "retry", &row.event_id, None),
            ]
        })
        .collect();
    table(
        "failed-deliveries",
        &[
            "event id",
            "room",
            "for",
            "attempts",
            "last error",
            "created (UTC)",
            "retry with",
            "or ask the service",
        ],
        &cells,
    )
}

/// The form that asks the group's service to replay a dead letter (at
/// `position`) or retry an event's failed deliveries; none without an event id.
fn request_form(group: &Group<'_>, action: &str, event_id: &str, position: Option<&str>) -> Markup {
    let Some((csrf, operator)) = group.form else {
        return html! { span class="muted" { "read-only" } };
    };
    if event_id.is_empty() {
        return html! { span class="muted" { "no event id" } };
    }
    let button = if action == "replay" {
        "Replay"
    } else {
        "Retry"
    };
    html! {
        form method="post" action=(format!("/console/consumers/{action}")) class=(format!("{action}-request")) {
            (hidden("csrf", csrf))
            (hidden("group", group.group))
            (hidden("event_id", event_id))
            @if let Some(position) = position { (hidden("position", position)) }
            (operator_field(operator))
            input name="reason" placeholder="reason (required)" required maxlength="512";
            button type="submit" class=(action) { (button) }
            @if action == "replay" {
                // The same form, checked only: no reason needed.
                button type="submit" class="dry-run" formaction="/console/consumers/dry-run"
                    formnovalidate { "Dry run" }
            }
        }
    }
}

/// One dead letter in full: what it is, its headers and decoded payload.
pub(super) fn letter(
    service: &str,
    group: &str,
    letter: &DeadLetter,
    decoded: Option<&str>,
) -> Markup {
    let facts: Vec<Vec<Markup>> = [
        ("event id", html! { (letter.event_id) }),
        ("room", room_link(&letter.room_id)),
        ("type", html! { (letter.event_type) }),
        ("reason", html! { (letter.reason) }),
        ("attempts", html! { (letter.attempts) }),
        (
            "dead-lettered (UTC)",
            html! { (utc(letter.dead_lettered_at_ms)) },
        ),
        ("occurred (UTC)", html! { (utc(letter.occurred_at_ms)) }),
        ("source position", html! { (letter.source) }),
        (
            "dead-letter position",
            html! { (letter.dlq_partition) "/" (letter.dlq_offset) },
        ),
        ("group", html! { (group) }),
    ]
    .into_iter()
    .map(|(name, value)| vec![html! { (name) }, value])
    .collect();
    let headers: Vec<Vec<Markup>> = letter
        .headers
        .iter()
        .map(|(key, value)| vec![html! { (key) }, html! { (value) }])
        .collect();
    html! {
        (table("dead-letter", &["field", "value"], &facts))
        p { "Replay with: " code class="cli" id="replay-command" { (replay_command(service, &letter.event_id)) } }
        h2 { "Headers" }
        (table("dead-letter-headers", &["header", "value"], &headers))
        h2 { "Payload" }
        @match (decoded, letter.original_bytes) {
            (Some(text), _) => pre id="payload" { (text) },
            (None, Some(bytes)) => p class="muted" id="payload" {
                "Headers only: the original (" (bytes) " bytes) was too large to copy."
            },
            (None, None) => p class="muted" id="payload" { "No payload." },
        }
        p { a href=(group_href(group)) { "Back to " (group) } }
    }
}

/// The command that replays a dead letter of `event_id` in `service`.
pub(super) fn replay_command(service: &str, event_id: &str) -> String {
    if event_id.is_empty() {
        return format!(
            "{service} dead-letters replay --all --dry-run   # no event id: find it by time, then --since"
        );
    }
    format!(
        "{service} dead-letters replay --event-id {} --operator \"$USER\" --reason \"why it is safe to replay\"",
        shell_quote(event_id)
    )
}

/// The command that retries the failed deliveries of `event_id` in `service`.
pub(super) fn retry_command(service: &str, event_id: &str) -> String {
    format!(
        "{service} deliveries retry --event-id {} --operator \"$USER\" --reason \"why it will go through now\"",
        shell_quote(event_id)
    )
}

/// `text` as one POSIX shell word: as is when it holds only safe
/// characters, else single-quoted (a `'` inside closed, escaped, reopened).
fn shell_quote(text: &str) -> String {
    let safe = !text.is_empty()
        && text
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || b"-_.:/@+=".contains(&byte));
    if safe {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_quote_what_a_shell_would_read() {
        assert_eq!(
            retry_command("notice-consumer", "evt-1"),
            "notice-consumer deliveries retry --event-id evt-1 --operator \"$USER\" \
             --reason \"why it will go through now\""
        );
        assert!(
            replay_command("activity-consumer", "a'b; rm -rf /")
                .contains("--event-id 'a'\\''b; rm -rf /' --operator")
        );
        assert!(replay_command("im-bridge", "").contains("--all --dry-run"));
    }
}
