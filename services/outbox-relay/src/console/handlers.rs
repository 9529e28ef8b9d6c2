//! The console's request handlers: each page reads through the `ops`
//! functions and renders with `pages`; each action checks the session
//! (`Console::mutation`: same origin, CSRF token, role), then calls the same
//! audited `ops` mutation as the CLI. Form bodies are parsed here and never
//! logged.

use super::{
    Console, auth, counts, form, history, html, optional, overview, pages, plain, redirect,
    replay_pages, secure,
};
use crate::access::{Client, sessions};
use crate::ops::{self, DeadLetterFilter, OperatorName, Target};
use auth::{Role, Session};
use axum::{
    Extension,
    body::Bytes,
    extract::{Query, State},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use pages::FilterForm;
use service_kit::time::now_ms;

pub(super) async fn style() -> Response {
    let mut response = html::STYLE.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/css"));
    secure(headers);
    response
}

pub(super) async fn login_form() -> Response {
    html(StatusCode::OK, html::login_page(None))
}

#[derive(serde::Deserialize)]
pub(super) struct LoginForm {
    #[serde(default)]
    token: String,
}

pub(super) async fn login(
    State(console): State<Console>,
    Extension(client): Extension<Client>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(why) = auth::cross_site(&headers, &console.access.hosts) {
        tracing::warn!(reason = why, "console login refused: cross-site");
        return plain(StatusCode::FORBIDDEN, why);
    }
    let token = form::<LoginForm>(&body)
        .map(|form| form.token)
        .unwrap_or_default();
    let principal = match console.access.authenticate(client, &token) {
        Ok(principal) => principal,
        Err(denied) => {
            if let Some(throttled) = denied.throttled_response() {
                tracing::warn!("console login refused: throttled");
                return throttled;
            }
            tracing::warn!("console login refused: wrong token");
            return html(
                StatusCode::UNAUTHORIZED,
                html::login_page(Some("Wrong token.")),
            );
        }
    };
    let generation = match sessions::current(&console.config.pool).await {
        Ok(generation) => generation,
        Err(error) => return console.unavailable(&error),
    };
    let cookie = console.keys.issue(&principal, generation, now_ms());
    tracing::info!(
        role = principal.role.label(),
        operator = principal.operator.as_ref().map(OperatorName::as_str),
        "console login"
    );
    let set_cookie = auth::set_cookie(&cookie, console.access.secure_cookies);
    redirect("/console", Some(set_cookie))
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
pub(super) struct CsrfForm {
    csrf: String,
}

/// Ends the session — and, by moving the session generation on, every
/// console session of every operator on every replica (copied cookies
/// included; `crate::access::sessions` says why).
pub(super) async fn logout(
    State(console): State<Console>,
    Extension(client): Extension<Client>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let csrf = form::<CsrfForm>(&body)
        .map(|form| form.csrf)
        .unwrap_or_default();
    let session = match console.session(&headers, client).await {
        Ok(session) => session,
        Err(refusal) => return refusal,
    };
    if auth::cross_site(&headers, &console.access.hosts).is_some()
        || !auth::csrf_ok(&session, &csrf)
    {
        return plain(StatusCode::FORBIDDEN, "missing or wrong CSRF token");
    }
    if let Err(error) = sessions::revoke_all(&console.config.pool).await {
        return console.unavailable(&error);
    }
    tracing::info!("console logout: every console session ended");
    let clear = auth::clear_cookie(console.access.secure_cookies);
    redirect("/console/login", Some(clear))
}

/// The operator an action is recorded under: the session's named operator
/// (the form's field is ignored: it could say anyone), else the form's.
pub(super) fn acting_operator(
    session: &Session,
    form_operator: &str,
) -> Result<OperatorName, crate::Error> {
    match &session.operator {
        Some(name) => Ok(name.clone()),
        None => ops::audit::operator_name(form_operator.trim(), "operator"),
    }
}

pub(super) async fn overview(
    State(console): State<Console>,
    Extension(client): Extension<Client>,
    headers: HeaderMap,
    uri: axum::http::Uri,
) -> Response {
    let live = super::refresh::Live::of(&headers, uri);
    let session = match console.session(&headers, client).await {
        Ok(session) => session,
        Err(refusal) => return refusal,
    };
    let pool = &console.config.pool;
    let result = async {
        let counts = counts::counts(pool).await?;
        let leases = ops::leases(pool).await?;
        let dead_letters = ops::list_dead_letters(
            pool,
            &DeadLetterFilter {
                limit: Some(10),
                ..DeadLetterFilter::default()
            },
        )
        .await?;
        let minutes = history::minutes(&console.config.history.samples());
        let lags = console.config.history.lags();
        Ok::<_, crate::Error>(overview::overview(&overview::Overview {
            counts: &counts,
            gauges: console.config.history.gauges(),
            minutes: &minutes,
            leases: &leases,
            lags: console.config.broker_lag.then_some(lags.as_slice()),
            dead_letters: &dead_letters,
        }))
    }
    .await;
    console.render_live(&session, "Overview", &live, result)
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
pub(super) struct InterveneForm {
    csrf: String,
    room_id: String,
    operator: String,
    reason: String,
}

impl super::Posted for InterveneForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

pub(super) async fn intervene(
    console: Console,
    client: Client,
    headers: HeaderMap,
    body: Bytes,
    skip: bool,
) -> Response {
    let (session, parsed) = match console
        .mutation(&headers, client, form::<InterveneForm>(&body))
        .await
    {
        Ok(checked) => checked,
        Err(refused) => return *refused,
    };
    let title = if skip { "Skip" } else { "Retry now" };
    let pool = &console.config.pool;
    let result = async {
        let form = parsed?;
        let operator = acting_operator(&session, &form.operator)?;
        let target = Target::from_parts(Some(&form.room_id), None)?;
        let reason = optional(&form.reason);
        let done = if skip {
            ops::skip(pool, &target, &operator, reason.as_deref()).await?
        } else {
            ops::retry_now(pool, &target, &operator, reason.as_deref()).await?
        };
        Ok(pages::intervened(&done))
    }
    .await;
    console.render(&session, title, result)
}

pub(super) async fn retry_now(
    State(console): State<Console>,
    Extension(client): Extension<Client>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    intervene(console, client, headers, body, false).await
}

pub(super) async fn skip(
    State(console): State<Console>,
    Extension(client): Extension<Client>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    intervene(console, client, headers, body, true).await
}

/// The ops filter of a form's fields; empty fields are "any".
fn filter_of(form: &FilterForm) -> Result<DeadLetterFilter, crate::Error> {
    let number = |field: &str, text: &str| -> Result<Option<i64>, crate::Error> {
        optional(text)
            .map(|text| {
                text.parse::<i64>().map_err(|_| {
                    crate::Error::InvalidInput(format!(
                        "{field} `{}` is not a number",
                        text.escape_debug()
                    ))
                })
            })
            .transpose()
    };
    Ok(DeadLetterFilter {
        event_id: None,
        room_id: optional(&form.room_id),
        event_type: optional(&form.event_type),
        since: optional(&form.since),
        since_ms: None,
        until_ms: number("until_ms", &form.until_ms)?,
        limit: number("limit", &form.limit)?.map(|limit| u64::try_from(limit.max(1)).unwrap_or(1)),
    })
}

pub(super) async fn dry_run(
    State(console): State<Console>,
    Extension(client): Extension<Client>,
    headers: HeaderMap,
    Query(mut form): Query<FilterForm>,
) -> Response {
    let session = match console.session(&headers, client).await {
        Ok(session) => session,
        Err(refusal) => return refusal,
    };
    // Freeze the set: the replay form carries this moment and this count.
    if form.until_ms.is_empty() {
        form.until_ms = (now_ms() + 1).to_string();
    }
    let result = async {
        let replay = ops::replay_dead_letters(
            &console.config.pool,
            &filter_of(&form)?,
            true,
            None,
            None,
            console.replay_guard(false),
        )
        .await?;
        form.limit = replay.replayed.len().max(1).to_string();
        Ok(replay_pages::dry_run(
            &form,
            &replay,
            &session.csrf,
            session.role == Role::ReadOnly,
            session.operator.as_ref().map(OperatorName::as_str),
        ))
    }
    .await;
    console.render(&session, "Replay dry run", result)
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
pub(super) struct ReplayForm {
    csrf: String,
    operator: String,
    reason: String,
    /// The force box: replay rows older than `ops.replay_max_age` too.
    force: Option<String>,
    #[serde(flatten)]
    filter: FilterForm,
}

impl super::Posted for ReplayForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

pub(super) async fn replay(
    State(console): State<Console>,
    Extension(client): Extension<Client>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (session, parsed) = match console
        .mutation(&headers, client, form::<ReplayForm>(&body))
        .await
    {
        Ok(checked) => checked,
        Err(refused) => return *refused,
    };
    let result = async {
        let form = parsed?;
        let operator = acting_operator(&session, &form.operator)?;
        let reason = optional(&form.reason);
        let force = match form.force.as_deref() {
            None | Some("") => false,
            Some("true" | "on") => true,
            Some(other) => {
                return Err(crate::Error::InvalidInput(format!(
                    "force `{}` is not true",
                    other.escape_debug()
                )));
            }
        };
        let replay = ops::replay_dead_letters(
            &console.config.pool,
            &filter_of(&form.filter)?,
            false,
            Some(&operator),
            reason.as_deref(),
            console.replay_guard(force),
        )
        .await?;
        Ok(replay_pages::replayed(&replay))
    }
    .await;
    console.render(&session, "Replay", result)
}
