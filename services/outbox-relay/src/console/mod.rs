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
mod handlers;
pub mod history;
pub mod html;
pub mod pages;

use auth::{Keys, Role, Session};
use axum::{
    Router,
    body::Bytes,
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use history::History;
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
        .route("/console", get(handlers::overview))
        .route("/console/style.css", get(handlers::style))
        .route(
            "/console/login",
            get(handlers::login_form).post(handlers::login),
        )
        .route("/console/logout", post(handlers::logout))
        .route("/console/stuck", get(handlers::stuck))
        .route("/console/stuck/retry-now", post(handlers::retry_now))
        .route("/console/stuck/skip", post(handlers::skip))
        .route("/console/dead-letters", get(handlers::dead_letters))
        .route("/console/dead-letters/dry-run", get(handlers::dry_run))
        .route("/console/dead-letters/replay", post(handlers::replay))
        .route("/console/audit", get(handlers::audit))
        .route("/console/rooms", get(handlers::room_timeline))
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
        let status = crate::admin::error_status(error);
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
    fn mutation(&self, headers: &HeaderMap, csrf: &str) -> Result<Session, Box<Response>> {
        if let Some(why) = auth::cross_site(headers) {
            tracing::warn!(reason = why, "console mutation refused: cross-site");
            return Err(Box::new(plain(StatusCode::FORBIDDEN, why)));
        }
        let Some(session) = self.session(headers) else {
            return Err(Box::new(plain(StatusCode::UNAUTHORIZED, "log in first")));
        };
        if !auth::csrf_ok(&session, csrf) {
            tracing::warn!("console mutation refused: missing or wrong csrf token");
            return Err(Box::new(plain(
                StatusCode::FORBIDDEN,
                "missing or wrong CSRF token; reload the page",
            )));
        }
        if session.role == Role::ReadOnly {
            return Err(Box::new(html(
                StatusCode::FORBIDDEN,
                self.page(
                    &session,
                    "Refused",
                    None,
                    &pages::refusal("a read-only session may not change anything"),
                ),
            )));
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
