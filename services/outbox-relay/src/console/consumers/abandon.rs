//! `POST /console/consumers/abandon` (`group`, `id`, operator, reason): marks
//! a consumer request `abandoned` when the instance that claimed it has run
//! it for longer than `consumer_runtime::host::STALLED_AFTER` — its instance
//! died mid-run. It is never run again by itself (its replay may have
//! applied); the mark tells the operator to check the group's effects and,
//! if nothing applied, ask again. A mutation like every other (same origin,
//! CSRF token, not read-only); the request row keeps who abandoned it and
//! why in its detail.

use super::super::{Console, form, handlers::acting_operator, html::utc, pages::operator_field};
use super::Sources;
use crate::access::Client;
use crate::ops::audit::checked_reason;
use axum::{Extension, body::Bytes, extract::State, http::HeaderMap, response::Response};
use maud::{Markup, html};
use service_kit::db::IdText;
use service_kit::operator::ReasonRule;

/// Marks the request abandoned only while it is still running, in this
/// group, claimed before the stall bound.
const ABANDON_SQL: &str = "UPDATE consumer_operator_requests \
     SET outcome = 'abandoned', detail = ?, finished_at_ms = ? \
     WHERE id = ? AND consumer_group = ? AND outcome = '' AND claimed_by <> '' \
     AND claimed_at_ms < ?";
/// What the request is, to say why it was not marked.
const STATE_SQL: &str = "SELECT claimed_by, claimed_at_ms, outcome FROM consumer_operator_requests \
     WHERE id = ? AND consumer_group = ?";

/// The abandon form.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
pub(super) struct AbandonForm {
    csrf: String,
    operator: String,
    reason: String,
    group: String,
    id: String,
}

impl super::super::Posted for AbandonForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// The stall bound in ms.
fn stalled_after_ms() -> i64 {
    i64::try_from(consumer_runtime::host::STALLED_AFTER.as_millis()).unwrap_or(i64::MAX)
}

/// Whether a request claimed at `claimed_at_ms` has run past the bound.
pub(super) fn stalled(claimed_at_ms: i64, now_ms: i64) -> bool {
    claimed_at_ms > 0 && now_ms.saturating_sub(claimed_at_ms) > stalled_after_ms()
}

/// `POST /console/consumers/abandon`.
pub(super) async fn abandon(
    State(console): State<Console>,
    Extension(client): Extension<Client>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (session, parsed) = match console
        .mutation(&headers, client, form::<AbandonForm>(&body))
        .await
    {
        Ok(checked) => checked,
        Err(refused) => return *refused,
    };
    let result = async {
        let form = parsed?;
        let operator = acting_operator(&session, &form.operator)?;
        let reason = checked_reason(Some(&form.reason), ReasonRule::Required)?;
        let sources: &Sources = &console.consumers;
        let source = sources.group(Some(&form.group))?;
        let id: u64 = form.id.trim().parse().map_err(|_| {
            crate::Error::InvalidInput(format!(
                "id `{}` is not a request number",
                form.id.escape_debug()
            ))
        })?;
        let now = service_kit::time::now_ms();
        let detail = format!(
            "abandoned by {}: {reason}; its instance never finished it, and it may have \
             applied: check the group's effects before asking again",
            operator.as_str()
        );
        let marked = sqlx::query(ABANDON_SQL)
            .bind(&detail)
            .bind(now)
            .bind(id)
            .bind(&source.group)
            .bind(now.saturating_sub(stalled_after_ms()))
            .execute(&console.config.pool)
            .await?
            .rows_affected();
        if marked == 0 {
            return Err(why_not(&console.config.pool, id, &source.group, now).await);
        }
        tracing::warn!(
            request = id,
            consumer_group = %source.group,
            operator = operator.as_str(),
            "consumer operator request marked abandoned"
        );
        Ok(html! {
            p class="ok" id="request-abandoned" { "Request #" (id) " marked abandoned." }
            p { a id="to-group" href=(super::view::group_href(&source.group)) { "Back to " (source.group) } }
        })
    }
    .await;
    console.render(&session, "Abandon request", result)
}

/// Why request `id` of `group` was not marked: absent, not running, or
/// claimed too recently.
async fn why_not(pool: &sqlx::MySqlPool, id: u64, group: &str, now: i64) -> crate::Error {
    let row: Result<Option<(IdText, i64, String)>, sqlx::Error> = sqlx::query_as(STATE_SQL)
        .bind(id)
        .bind(group)
        .fetch_optional(pool)
        .await;
    let (claimed_by, claimed_at_ms, outcome) = match row {
        Err(error) => return error.into(),
        Ok(None) => {
            return crate::Error::NotFound(format!("no request #{id} of group `{group}`"));
        }
        Ok(Some((claimed_by, at, outcome))) => (String::from(claimed_by), at, outcome),
    };
    crate::Error::Refused(if !outcome.is_empty() {
        format!("request #{id} has finished ({outcome})")
    } else if claimed_by.is_empty() {
        format!("request #{id} is pending: no instance has claimed it")
    } else {
        format!(
            "request #{id} was claimed by {claimed_by} at {} UTC, {} s ago: a running request \
             is abandoned only after {} s",
            utc(claimed_at_ms),
            now.saturating_sub(claimed_at_ms) / 1000,
            stalled_after_ms() / 1000
        )
    })
}

/// The abandon form of a stalled request on the group's page.
pub(super) fn abandon_form(csrf: &str, operator: Option<&str>, group: &str, id: u64) -> Markup {
    html! {
        form method="post" action="/console/consumers/abandon" class="abandon-request" {
            (super::super::html::hidden("csrf", csrf))
            (super::super::html::hidden("group", group))
            (super::super::html::hidden("id", &id.to_string()))
            (operator_field(operator))
            input name="reason" placeholder="reason (required)" required maxlength="512";
            button type="submit" class="abandon" { "Mark abandoned" }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_request_claimed_before_the_bound_has_stalled() {
        let bound = stalled_after_ms();
        assert!(!stalled(0, bound * 2), "never claimed");
        assert!(!stalled(1_000, 1_000 + bound));
        assert!(stalled(1_000, 1_001 + bound));
    }
}
