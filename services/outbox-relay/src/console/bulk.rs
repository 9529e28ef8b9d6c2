//! Bulk retry-now and skip of the stuck rooms an operator ticks, with one
//! reason: checked like every console mutation (`Console::mutation`: same
//! origin, the session's CSRF token, not read-only), then each room is the
//! same audited `ops` call the single-room forms and the CLI make — one
//! audit row per room, one result per room (a room a relay moved on
//! meanwhile is refused alone, the others still act).

use super::{Console, form, handlers::acting_operator, html::room_link, optional};
use crate::access::Client;
use crate::ops::{self, Intervention, Target};
use axum::{Extension, body::Bytes, extract::State, http::HeaderMap, response::Response};
use maud::{Markup, html};

/// Rooms one bulk action takes at most.
pub const MAX_ROOMS: usize = 100;

/// The bulk form: the ticked rooms (repeated `room_id`), one reason.
#[derive(Debug, Default, PartialEq, Eq)]
struct BulkForm {
    csrf: String,
    operator: String,
    reason: String,
    rooms: Vec<String>,
}

impl super::Posted for BulkForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// The form's fields, `room_id` repeated; or a precise refusal.
fn bulk_form(body: &Bytes) -> Result<BulkForm, crate::Error> {
    let pairs: Vec<(String, String)> = form(body)?;
    let mut parsed = BulkForm::default();
    for (name, value) in pairs {
        match name.as_str() {
            "csrf" => parsed.csrf = value,
            "operator" => parsed.operator = value,
            "reason" => parsed.reason = value,
            "room_id" if !parsed.rooms.contains(&value) => parsed.rooms.push(value),
            _ => {}
        }
    }
    Ok(parsed)
}

/// The rooms of a bulk action, checked: at least one, at most [`MAX_ROOMS`].
fn checked_rooms(rooms: &[String]) -> Result<Vec<Target>, crate::Error> {
    if rooms.is_empty() {
        return Err(crate::Error::InvalidInput(
            "tick at least one room (room_id)".into(),
        ));
    }
    if rooms.len() > MAX_ROOMS {
        return Err(crate::Error::InvalidInput(format!(
            "{} rooms ticked, more than {MAX_ROOMS} in one action",
            rooms.len()
        )));
    }
    rooms
        .iter()
        .map(|room| Target::from_parts(Some(room), None))
        .collect()
}

async fn bulk(
    console: Console,
    client: Client,
    headers: HeaderMap,
    body: Bytes,
    skip: bool,
) -> Response {
    let (session, parsed) = match console.mutation(&headers, client, bulk_form(&body)).await {
        Ok(checked) => checked,
        Err(refused) => return *refused,
    };
    let title = if skip {
        "Skip rooms"
    } else {
        "Retry rooms now"
    };
    let pool = &console.config.pool;
    let result = async {
        let form = parsed?;
        let operator = acting_operator(&session, &form.operator)?;
        let reason = optional(&form.reason).ok_or_else(|| {
            crate::Error::InvalidInput("reason is required for a bulk action".into())
        })?;
        let targets = checked_rooms(&form.rooms)?;
        let mut outcomes = Vec::with_capacity(targets.len());
        for (room, target) in form.rooms.iter().zip(&targets) {
            let done = if skip {
                ops::skip(pool, target, &operator, Some(&reason)).await
            } else {
                ops::retry_now(pool, target, &operator, Some(&reason)).await
            };
            outcomes.push((room.clone(), done));
        }
        Ok(outcome_list(&outcomes))
    }
    .await;
    console.render(&session, title, result)
}

/// One line per room: what was done (and its audit row), or why not.
fn outcome_list(outcomes: &[(String, Result<Intervention, crate::Error>)]) -> Markup {
    let done = outcomes
        .iter()
        .filter(|(_, outcome)| outcome.is_ok())
        .count();
    html! {
        p id="bulk-count" class=(if done == outcomes.len() { "ok" } else { "err" }) {
            (done) " of " (outcomes.len()) " rooms done."
        }
        ul id="bulk-results" {
            @for (room, outcome) in outcomes {
                li data-room=(room) {
                    (room_link(room)) ": "
                    @match outcome {
                        Ok(done) => span class="ok" {
                            (done.action) " of event " (done.before.event_id) ": " (done.before.status)
                            " → " (done.after.status) " (audit #" (done.audit_id) ")"
                        },
                        Err(error) => span class="err" { (error.to_string()) },
                    }
                }
            }
        }
        p { a href="/console/stuck" { "Back to stuck rooms" } }
    }
}

pub(super) async fn retry_now(
    State(console): State<Console>,
    Extension(client): Extension<Client>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    bulk(console, client, headers, body, false).await
}

pub(super) async fn skip(
    State(console): State<Console>,
    Extension(client): Extension<Client>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    bulk(console, client, headers, body, true).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_form_takes_each_ticked_room_once() {
        let body = Bytes::from_static(b"csrf=t&room_id=a&reason=r&room_id=b&room_id=a&operator=o");
        let form = bulk_form(&body).unwrap();
        assert_eq!(form.rooms, ["a", "b"]);
        assert_eq!((form.csrf.as_str(), form.reason.as_str()), ("t", "r"));
        let none = checked_rooms(&[]).unwrap_err().to_string();
        assert!(none.contains("tick at least one room"), "{none}");
        let many: Vec<String> = (0..=MAX_ROOMS).map(|n| format!("r{n}")).collect();
        let error = checked_rooms(&many).unwrap_err().to_string();
        assert!(error.contains("101 rooms ticked, more than 100"), "{error}");
        let bad = checked_rooms(&["a b".to_owned()]).unwrap_err().to_string();
        assert!(bad.contains("room_id"), "{bad}");
    }
}
