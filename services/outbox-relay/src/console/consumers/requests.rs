//! Replay and retry from the console, carried out by the group's own service:
//!
//! | Path | Action |
//! |---|---|
//! | `POST /console/consumers/replay` | request the replay of one dead letter (`group`, `position`, `event_id`) |
//! | `POST /console/consumers/dry-run` | request a dry run of that replay: the service's checks only, nothing written |
//! | `POST /console/consumers/retry` | request the retry of one event's failed deliveries (`group`, `event_id`) |
//!
//! All are mutations (same origin, CSRF token, not read-only) with an
//! operator and a reason (optional for a dry run, as on the CLI). The console checks the request (a known group, the
//! letter at that position being of that event, a delivery table to retry
//! in) and writes a row of `consumer_operator_requests`; a running instance
//! of the group's service claims it and runs the same code as its
//! `dead-letters replay [--dry-run]` / `deliveries retry` command, audited in
//! `consumer_operator_audit` (consumer-runtime's `host::requests`). The
//! group's page shows the group's latest requests and what came of them.

use super::super::{Console, form, handlers::acting_operator, html::utc, pages::refusal};
use super::view::Group;
use super::{Sources, abandon, position, read};
use crate::access::Client;
use crate::ops::audit::checked_reason;
use axum::{Extension, body::Bytes, extract::State, http::HeaderMap, response::Response};
use consumer_runtime::host::{DeadLetterFilter, RequestAction, UNCLAIMED_AFTER};
use maud::{Markup, html};
use service_kit::db::IdText;
use service_kit::operator::ReasonRule;
use sqlx::MySqlPool;

/// Most requests a group's page shows, newest first.
pub const REQUESTS_SHOWN: u32 = 20;
/// Longest event id accepted (the column's width).
const MAX_EVENT_ID_CHARS: usize = 64;

const INSERT_SQL: &str = "INSERT INTO consumer_operator_requests \
     (consumer_group, action, event_id, dlq_position, operator, reason, requested_at_ms, detail) \
     VALUES (?, ?, ?, ?, ?, ?, ?, '')";
const RECENT_SQL: &str = "SELECT id, action, event_id, dlq_position, operator, reason, \
     requested_at_ms, claimed_by, claimed_at_ms, outcome, detail FROM consumer_operator_requests \
     WHERE consumer_group = ? ORDER BY id DESC LIMIT ?";

/// The form of both requests (fields absent from one are left empty).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
pub(super) struct RequestForm {
    csrf: String,
    operator: String,
    reason: String,
    group: String,
    event_id: String,
    position: String,
}

impl super::super::Posted for RequestForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// One request as the group's page shows it.
#[derive(Debug, sqlx::FromRow)]
pub(super) struct Shown {
    id: u64,
    action: String,
    #[sqlx(try_from = "IdText")]
    event_id: String,
    dlq_position: String,
    operator: String,
    reason: String,
    requested_at_ms: i64,
    #[sqlx(try_from = "IdText")]
    claimed_by: String,
    claimed_at_ms: i64,
    outcome: String,
    detail: String,
}

/// `POST /console/consumers/replay`.
pub(super) async fn replay(
    State(console): State<Console>,
    Extension(client): Extension<Client>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    submit(console, client, headers, body, RequestAction::Replay).await
}

/// `POST /console/consumers/dry-run`: the replay's checks only; the group's
/// service answers whether the letter would be handed to its handler.
pub(super) async fn dry_run(
    State(console): State<Console>,
    Extension(client): Extension<Client>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    submit(console, client, headers, body, RequestAction::DryRunReplay).await
}

/// `POST /console/consumers/retry`.
pub(super) async fn retry(
    State(console): State<Console>,
    Extension(client): Extension<Client>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    submit(console, client, headers, body, RequestAction::Retry).await
}

async fn submit(
    console: Console,
    client: Client,
    headers: HeaderMap,
    body: Bytes,
    action: RequestAction,
) -> Response {
    let (session, parsed) = match console
        .mutation(&headers, client, form::<RequestForm>(&body))
        .await
    {
        Ok(checked) => checked,
        Err(refused) => return *refused,
    };
    let result = async {
        let form = parsed?;
        let operator = acting_operator(&session, &form.operator)?;
        let reason_rule = if action == RequestAction::DryRunReplay {
            ReasonRule::Optional
        } else {
            ReasonRule::Required
        };
        let reason = checked_reason(Some(&form.reason), reason_rule)?;
        let event_id = checked_event_id(&form.event_id)?;
        let sources: &Sources = &console.consumers;
        let source = sources.group(Some(&form.group))?;
        let dlq_position = if action.reads_a_dead_letter() {
            let at = position(Some(&form.position))?;
            let settings = source.reader()?;
            let filter = DeadLetterFilter {
                position: Some(at),
                ..DeadLetterFilter::default()
            };
            let found = read(settings, &filter, 1).await?;
            match found.letters.first() {
                None => {
                    return Err(crate::Error::NotFound(format!(
                        "no dead letter at {}/{} in `{}`",
                        at.0, at.1, settings.dead_letter_topic
                    )));
                }
                Some(letter) if letter.event_id != event_id => {
                    return Err(crate::Error::Refused(format!(
                        "the dead letter at {}/{} is of event `{}`, not `{event_id}`",
                        at.0, at.1, letter.event_id
                    )));
                }
                Some(_) => format!("{}/{}", at.0, at.1),
            }
        } else {
            if source.table.is_none() {
                return Err(crate::Error::Refused(format!(
                    "{} has no delivery table to retry",
                    source.service
                )));
            }
            String::new()
        };
        let id = sqlx::query(INSERT_SQL)
            .bind(&source.group)
            .bind(action.as_str())
            .bind(&event_id)
            .bind(&dlq_position)
            .bind(operator.as_str())
            .bind(&reason)
            .bind(service_kit::time::now_ms())
            .execute(&console.config.pool)
            .await?
            .last_insert_id();
        tracing::info!(
            request = id,
            consumer_group = %source.group,
            action = action.as_str(),
            %event_id,
            operator = operator.as_str(),
            "consumer operator request written"
        );
        Ok(written(
            id,
            action,
            source.service,
            &source.group,
            &event_id,
        ))
    }
    .await;
    console.render(&session, "Consumer request", result)
}

/// An event id as a request may name it: 1 to 64 printable characters.
fn checked_event_id(text: &str) -> Result<String, crate::Error> {
    let text = text.trim();
    if text.is_empty() {
        return Err(crate::Error::InvalidInput("event_id: required".into()));
    }
    let chars = text.chars().count();
    if chars > MAX_EVENT_ID_CHARS {
        return Err(crate::Error::InvalidInput(format!(
            "event_id has {chars} characters, more than {MAX_EVENT_ID_CHARS}"
        )));
    }
    if let Some((at, bad)) = text.chars().enumerate().find(|(_, c)| c.is_control()) {
        return Err(crate::Error::InvalidInput(format!(
            "event_id has the unprintable character {:?} at position {at}",
            bad
        )));
    }
    Ok(text.to_owned())
}

/// The page after a request was written.
fn written(id: u64, action: RequestAction, service: &str, group: &str, event_id: &str) -> Markup {
    html! {
        p class="ok" id="request-written" {
            "Request #" (id) " written: " (action.label()) " of event " code { (event_id) }
            ". " (service) " (group " (group) ") carries it out; its state is on the group's page."
        }
        p { a id="to-group" href=(super::view::group_href(group)) { "Back to " (group) } }
    }
}

/// How a page names a request's action (a value no build wrote, as it is).
fn label(action: &str) -> &str {
    RequestAction::parse(action).map_or(action, |known| known.label())
}

/// The group's latest requests, newest first.
pub(super) async fn recent(pool: &MySqlPool, group: &str) -> Result<Vec<Shown>, crate::Error> {
    Ok(sqlx::query_as(RECENT_SQL)
        .bind(group)
        .bind(REQUESTS_SHOWN)
        .fetch_all(pool)
        .await?)
}

/// The requests table of a group's page (or why it cannot be read); with
/// the group's `form` (the session's CSRF token and named operator), a
/// request that has run past the stall bound gets the form that marks it
/// abandoned.
pub(super) fn table(requests: &Result<Vec<Shown>, crate::Error>, group: &Group<'_>) -> Markup {
    let requests = match requests {
        Ok(requests) => requests,
        Err(error) => return refusal(&error.to_string()),
    };
    let now = service_kit::time::now_ms();
    let rows: Vec<Vec<Markup>> = requests
        .iter()
        .map(|request| {
            let state = match request.outcome.as_str() {
                "" if request.claimed_by.is_empty() => pending(request, group.service, now),
                "" => html! {
                    "running on " (request.claimed_by) " since " (utc(request.claimed_at_ms))
                    @if let (Some((csrf, operator)), true) =
                        (group.form, abandon::stalled(request.claimed_at_ms, now))
                    {
                        (abandon::abandon_form(csrf, operator, group.group, request.id))
                    }
                },
                outcome => html! { (outcome) ": " (request.detail) },
            };
            vec![
                html! { (request.id) },
                html! { (label(&request.action)) },
                html! { (request.event_id) },
                html! { (request.dlq_position) },
                html! { (request.operator) },
                html! { (request.reason) },
                html! { (utc(request.requested_at_ms)) },
                html! { span class=(format!("request-state {}", state_class(&request.outcome))) { (state) } },
            ]
        })
        .collect();
    html! {
        p class="muted" {
            "The latest " (rows.len()) " requests of this group from the console, newest first."
        }
        (super::super::html::table(
            "consumer-requests",
            &["#", "action", "event id", "dead-letter position", "requested by", "reason",
              "requested (UTC)", "state"],
            &rows,
        ))
    }
}

/// A request no instance has claimed; past `UNCLAIMED_AFTER`, why that may be.
fn pending(request: &Shown, service: &str, now: i64) -> Markup {
    let waited_ms = now.saturating_sub(request.requested_at_ms);
    let bound_ms = i64::try_from(UNCLAIMED_AFTER.as_millis()).unwrap_or(i64::MAX);
    html! {
        "pending"
        @if waited_ms > bound_ms {
            span class="unclaimed" {
                " for " (waited_ms / 1000) " s: no instance of " (service) " has claimed it. \
                 Is one running? (An IM bridge hosted inside room-service does not carry out \
                 console requests; run the command shown instead.)"
            }
        }
    }
}

fn state_class(outcome: &str) -> &'static str {
    match outcome {
        "" => "pending",
        "done" => "done",
        "refused" => "refused",
        _ => "failed",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_id_is_one_to_64_printable_characters() {
        assert_eq!(checked_event_id(" e-1 ").unwrap(), "e-1");
        for (bad, expected) in [
            ("", "required"),
            (&"x".repeat(65), "65 characters"),
            ("a\nb", "unprintable"),
        ] {
            let error = checked_event_id(bad).unwrap_err().to_string();
            assert!(error.contains(expected), "{bad:?}: {error}");
        }
    }
}
