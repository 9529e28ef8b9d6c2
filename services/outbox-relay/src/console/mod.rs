//! The operator console: server-rendered pages on the relay's admin
//! listener, behind the admin token (docs/design.md#operator-console).
//!
//! | Path | Page |
//! |---|---|
//! | `GET /console/login`, `POST /console/login`, `POST /console/logout` | session ([`auth`]) |
//! | `GET /console` | overview: outbox by status and age, publishing over 15 minutes, relays and leases, consumer lag, dead letters |
//! | `GET /console/stuck`, `POST /console/stuck/retry-now`, `POST /console/stuck/skip` | retrying heads, decoded, and the audited actions |
//! | `GET /console/dead-letters`, `GET /console/dead-letters/dry-run`, `POST /console/dead-letters/replay` | filter, dry run, replay |
//! | `GET /console/audit` | the audit trail |
//! | `GET /console/rooms?room_id=` | a room's timeline with consumption per group |
//!
//! Every page and action calls the same `ops` functions as the CLI and
//! `/admin/*` — one implementation, one audit trail. Responses carry a
//! strict Content-Security-Policy and `Cache-Control: no-store`; tokens and
//! form bodies are never logged.

pub mod auth;
pub mod history;
pub mod html;
pub mod pages;

use crate::ops::{self, DeadLetterFilter, Target};
use auth::{Keys, Role, Session};
use axum::{
    Router,
    body::Bytes,
    extract::{Query, State},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use history::History;
use pages::FilterForm;
use service_kit::{Secret, time::now_ms};
use sqlx::MySqlPool;

/// What the console needs from the relay.
#[derive(Debug, Clone)]
pub struct ConsoleConfig {
    /// The outbox database.
    pub pool: MySqlPool,
    /// `admin_token`: operator role; empty disables the console.
    pub admin_token: Secret,
    /// `admin_read_token`: read-only role; empty = none.
    pub read_token: Secret,
    /// The publish ring and broker lag readings.
    pub history: History,
    /// Whether consumer lag is read (a broker is configured).
    pub broker_lag: bool,
    /// Consumer groups whose `consumer_dedup` rows the timeline shows.
    pub groups: Vec<String>,
}

#[derive(Debug, Clone)]
struct Console {
    config: ConsoleConfig,
    keys: Keys,
}

/// The console's routes, or an empty router when no admin token is set.
pub fn router(config: ConsoleConfig) -> Router {
    if config.admin_token.is_empty() {
        return Router::new();
    }
    let keys = Keys::new(&config.admin_token, &config.read_token);
    let state = Console { config, keys };
    Router::new()
        .route("/console", get(overview))
        .route("/console/style.css", get(style))
        .route("/console/login", get(login_form).post(login))
        .route("/console/logout", post(logout))
        .route("/console/stuck", get(stuck))
        .route("/console/stuck/retry-now", post(retry_now))
        .route("/console/stuck/skip", post(skip))
        .route("/console/dead-letters", get(dead_letters))
        .route("/console/dead-letters/dry-run", get(dry_run))
        .route("/console/dead-letters/replay", post(replay))
        .route("/console/audit", get(audit))
        .route("/console/rooms", get(room_timeline))
        .with_state(state)
}

/// An HTML response with the console's security headers.
fn html(status: StatusCode, body: String) -> Response {
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    secure(headers);
    response
}

fn secure(headers: &mut HeaderMap) {
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(html::CSP),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    // Not `no-referrer`: under it browsers send `Origin: null` with a form
    // POST, and the same-origin check could no longer tell our forms from
    // anyone's. `same-origin` still sends nothing to other sites.
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
}

/// To the login page (a fixed path: nothing from the request goes into it).
fn to_login() -> Response {
    redirect("/console/login", None)
}

fn redirect(location: &'static str, cookie: Option<String>) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    let headers = response.headers_mut();
    headers.insert(header::LOCATION, HeaderValue::from_static(location));
    if let Some(cookie) = cookie.and_then(|cookie| HeaderValue::from_str(&cookie).ok()) {
        headers.insert(header::SET_COOKIE, cookie);
    }
    secure(headers);
    response
}

impl Console {
    fn session(&self, headers: &HeaderMap) -> Option<Session> {
        self.keys.session(headers, now_ms())
    }

    fn page(&self, session: &Session, title: &str, refresh: Option<u32>, body: &str) -> String {
        html::page(title, session.role.label(), &session.csrf, refresh, body)
    }

    fn render(
        &self,
        session: &Session,
        title: &str,
        result: Result<String, crate::Error>,
    ) -> Response {
        match result {
            Ok(body) => html(StatusCode::OK, self.page(session, title, None, &body)),
            Err(error) => self.error(session, title, &error),
        }
    }

    fn error(&self, session: &Session, title: &str, error: &crate::Error) -> Response {
        self.error_after(session, title, error, "")
    }

    /// The refusal of `error`, after `prefix` (HTML: the page's form).
    fn error_after(
        &self,
        session: &Session,
        title: &str,
        error: &crate::Error,
        prefix: &str,
    ) -> Response {
        let status = match error {
            crate::Error::InvalidInput(_) => StatusCode::BAD_REQUEST,
            crate::Error::NotFound(_) => StatusCode::NOT_FOUND,
            crate::Error::Refused(_) => StatusCode::CONFLICT,
            crate::Error::Database(_) => StatusCode::SERVICE_UNAVAILABLE,
            crate::Error::Config(_) | crate::Error::Mq(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        if status.is_server_error() {
            tracing::warn!(%error, "console operation failed");
        }
        html(
            status,
            self.page(
                session,
                title,
                None,
                &format!("{prefix}{}", pages::refusal(&error.to_string())),
            ),
        )
    }

    /// The session of a mutation, or the refusal: not same-origin (403), no
    /// session (401), no or wrong CSRF token (403), read-only (403).
    fn mutation(&self, headers: &HeaderMap, csrf: &str) -> Result<Session, Response> {
        if let Some(why) = auth::cross_site(headers) {
            tracing::warn!(reason = why, "console mutation refused: cross-site");
            return Err(plain(StatusCode::FORBIDDEN, why));
        }
        let Some(session) = self.session(headers) else {
            return Err(plain(StatusCode::UNAUTHORIZED, "log in first"));
        };
        if !auth::csrf_ok(&session, csrf) {
            tracing::warn!("console mutation refused: missing or wrong csrf token");
            return Err(plain(
                StatusCode::FORBIDDEN,
                "missing or wrong CSRF token; reload the page",
            ));
        }
        if session.role == Role::ReadOnly {
            return Err(html(
                StatusCode::FORBIDDEN,
                self.page(
                    &session,
                    "Refused",
                    None,
                    &pages::refusal("a read-only session may not change anything"),
                ),
            ));
        }
        Ok(session)
    }
}

fn plain(status: StatusCode, text: &'static str) -> Response {
    let mut response = (status, text).into_response();
    secure(response.headers_mut());
    response
}

/// A form body, or a precise refusal.
fn form<T: serde::de::DeserializeOwned>(body: &Bytes) -> Result<T, crate::Error> {
    serde_urlencoded::from_bytes(body)
        .map_err(|error| crate::Error::InvalidInput(format!("form: {error}")))
}

fn optional(text: &str) -> Option<String> {
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_owned())
}

async fn style() -> Response {
    let mut response = html::STYLE.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/css"));
    secure(headers);
    response
}

async fn login_form() -> Response {
    html(StatusCode::OK, html::login_page(None))
}

#[derive(serde::Deserialize)]
struct LoginForm {
    #[serde(default)]
    token: String,
}

async fn login(State(console): State<Console>, headers: HeaderMap, body: Bytes) -> Response {
    if let Some(why) = auth::cross_site(&headers) {
        tracing::warn!(reason = why, "console login refused: cross-site");
        return plain(StatusCode::FORBIDDEN, why);
    }
    let token = form::<LoginForm>(&body)
        .map(|form| form.token)
        .unwrap_or_default();
    match console.keys.role_of(&token) {
        Some(role) => {
            let cookie = console.keys.issue(role, now_ms());
            tracing::info!(role = role.label(), "console login");
            redirect("/console", Some(auth::set_cookie(&cookie)))
        }
        None => {
            tracing::warn!("console login refused: wrong token");
            html(
                StatusCode::UNAUTHORIZED,
                html::login_page(Some("Wrong token.")),
            )
        }
    }
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct CsrfForm {
    csrf: String,
}

async fn logout(State(console): State<Console>, headers: HeaderMap, body: Bytes) -> Response {
    let csrf = form::<CsrfForm>(&body)
        .map(|form| form.csrf)
        .unwrap_or_default();
    let Some(session) = console.session(&headers) else {
        return to_login();
    };
    if auth::cross_site(&headers).is_some() || !auth::csrf_ok(&session, &csrf) {
        return plain(StatusCode::FORBIDDEN, "missing or wrong CSRF token");
    }
    redirect("/console/login", Some(auth::clear_cookie()))
}

async fn overview(State(console): State<Console>, headers: HeaderMap) -> Response {
    let Some(session) = console.session(&headers) else {
        return to_login();
    };
    let pool = &console.config.pool;
    let result = async {
        let status = ops::status(pool).await?;
        let ages = pages::FailingAges {
            retryable_ms: ops::status::oldest_failing_age_ms(pool, "retryable").await?,
            failed_ms: ops::status::oldest_failing_age_ms(pool, "failed").await?,
        };
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
        Ok::<_, crate::Error>(pages::overview(&pages::Overview {
            status: &status,
            ages,
            minutes: &minutes,
            leases: &leases,
            lags: console.config.broker_lag.then_some(lags.as_slice()),
            dead_letters: &dead_letters,
        }))
    }
    .await;
    match result {
        Ok(body) => html(
            StatusCode::OK,
            console.page(
                &session,
                "Overview",
                Some(pages::OVERVIEW_REFRESH_SECS),
                &body,
            ),
        ),
        Err(error) => console.error(&session, "Overview", &error),
    }
}

async fn stuck(State(console): State<Console>, headers: HeaderMap) -> Response {
    let Some(session) = console.session(&headers) else {
        return to_login();
    };
    let pool = &console.config.pool;
    let result = async {
        let status = ops::status(pool).await?;
        let mut jsons = Vec::with_capacity(status.retrying.len());
        for row in &status.retrying {
            jsons.push(ops::room::event_json(pool, &row.event_id).await?);
        }
        let heads: Vec<pages::StuckHead<'_>> = status
            .retrying
            .iter()
            .zip(jsons)
            .map(|(row, json)| pages::StuckHead { row, json })
            .collect();
        Ok(pages::stuck(
            &heads,
            &session.csrf,
            session.role == Role::ReadOnly,
        ))
    }
    .await;
    console.render(&session, "Stuck rooms", result)
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct InterveneForm {
    csrf: String,
    room_id: String,
    operator: String,
    reason: String,
}

async fn intervene(console: Console, headers: HeaderMap, body: Bytes, skip: bool) -> Response {
    let parsed = form::<InterveneForm>(&body);
    let csrf = parsed
        .as_ref()
        .map(|form| form.csrf.clone())
        .unwrap_or_default();
    let session = match console.mutation(&headers, &csrf) {
        Ok(session) => session,
        Err(refused) => return refused,
    };
    let title = if skip { "Skip" } else { "Retry now" };
    let pool = &console.config.pool;
    let result = async {
        let form = parsed?;
        let operator = ops::audit::operator_name(form.operator.trim(), "operator")?;
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

async fn retry_now(State(console): State<Console>, headers: HeaderMap, body: Bytes) -> Response {
    intervene(console, headers, body, false).await
}

async fn skip(State(console): State<Console>, headers: HeaderMap, body: Bytes) -> Response {
    intervene(console, headers, body, true).await
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

async fn dead_letters(
    State(console): State<Console>,
    headers: HeaderMap,
    Query(form): Query<FilterForm>,
) -> Response {
    let Some(session) = console.session(&headers) else {
        return to_login();
    };
    let result = async {
        let letters = ops::list_dead_letters(&console.config.pool, &filter_of(&form)?).await?;
        Ok(pages::dead_letters(&form, &letters))
    }
    .await;
    console.render(&session, "Dead letters", result)
}

async fn dry_run(
    State(console): State<Console>,
    headers: HeaderMap,
    Query(mut form): Query<FilterForm>,
) -> Response {
    let Some(session) = console.session(&headers) else {
        return to_login();
    };
    // Freeze the set: the replay form carries this moment and this count.
    if form.until_ms.is_empty() {
        form.until_ms = (now_ms() + 1).to_string();
    }
    let result = async {
        let letters =
            ops::replay_dead_letters(&console.config.pool, &filter_of(&form)?, true, None, None)
                .await?;
        form.limit = letters.len().max(1).to_string();
        Ok(pages::dry_run(
            &form,
            &letters,
            &session.csrf,
            session.role == Role::ReadOnly,
        ))
    }
    .await;
    console.render(&session, "Replay dry run", result)
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct ReplayForm {
    csrf: String,
    operator: String,
    reason: String,
    #[serde(flatten)]
    filter: FilterForm,
}

async fn replay(State(console): State<Console>, headers: HeaderMap, body: Bytes) -> Response {
    let parsed = form::<ReplayForm>(&body);
    let csrf = parsed
        .as_ref()
        .map(|form| form.csrf.clone())
        .unwrap_or_default();
    let session = match console.mutation(&headers, &csrf) {
        Ok(session) => session,
        Err(refused) => return refused,
    };
    let result = async {
        let form = parsed?;
        let operator = ops::audit::operator_name(form.operator.trim(), "operator")?;
        let reason = optional(&form.reason);
        let letters = ops::replay_dead_letters(
            &console.config.pool,
            &filter_of(&form.filter)?,
            false,
            Some(&operator),
            reason.as_deref(),
        )
        .await?;
        Ok(pages::replayed(&letters))
    }
    .await;
    console.render(&session, "Replay", result)
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct AuditForm {
    action: String,
    room_id: String,
    since: String,
}

async fn audit(
    State(console): State<Console>,
    headers: HeaderMap,
    Query(form): Query<AuditForm>,
) -> Response {
    let Some(session) = console.session(&headers) else {
        return to_login();
    };
    let filter = ops::AuditFilter {
        since: optional(&form.since),
        action: optional(&form.action),
        room_id: optional(&form.room_id),
        limit: None,
    };
    let result = ops::audit::list(&console.config.pool, &filter)
        .await
        .map(|records| pages::audit(&records));
    console.render(&session, "Audit log", result)
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct RoomForm {
    room_id: String,
}

async fn room_timeline(
    State(console): State<Console>,
    headers: HeaderMap,
    Query(form): Query<RoomForm>,
) -> Response {
    let Some(session) = console.session(&headers) else {
        return to_login();
    };
    let Some(room_id) = optional(&form.room_id) else {
        return html(
            StatusCode::OK,
            console.page(&session, "Room timeline", None, &pages::timeline("", None)),
        );
    };
    match ops::timeline::timeline(&console.config.pool, &room_id, &console.config.groups).await {
        Ok(timeline) => html(
            StatusCode::OK,
            console.page(
                &session,
                "Room timeline",
                None,
                &pages::timeline(&room_id, Some(&timeline)),
            ),
        ),
        Err(error) => console.error_after(
            &session,
            "Room timeline",
            &error,
            &pages::timeline(&room_id, None),
        ),
    }
}
