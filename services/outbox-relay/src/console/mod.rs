//! The operator console: server-rendered pages on the relay's admin
//! listener, behind the admin token (docs/design.md#operator-console).
//!
//! | Path | Page |
//! |---|---|
//! | `GET /console/login`, `POST /console/login`, `POST /console/logout` | session ([`auth`]) |
//! | `GET /console` | overview: outbox by status and age (counts capped, [`counts`]), publishing over 15 minutes, relays and leases, consumer lag, dead letters |
//! | `GET /console/stuck`, `POST /console/stuck/retry-now`, `POST /console/stuck/skip` | retrying heads, decoded, searched and paged; the audited actions |
//! | `POST /console/stuck/bulk-retry-now`, `POST /console/stuck/bulk-skip` | the same on the ticked rooms, one reason, audited per room ([`bulk`]) |
//! | `GET /console/dead-letters`, `GET /console/dead-letters/dry-run`, `POST /console/dead-letters/replay` | search, dry run, replay |
//! | `GET /console/audit` | the audit trail, filtered and paged |
//! | `GET /console/rooms?room_id=` | a room's timeline: per group applied (ms, lags), pending or not consumed by design; trace links |
//! | `GET /console/consumers`, `GET /console/consumers/group`, `GET /console/consumers/dead-letter` | the consumer groups' own dead letters and failed deliveries, read-only, with the consumer CLI command that replays or retries each ([`consumers`]) |
//! | `GET /console/charts` | the fleet's last hour as SVG charts: publishes per second, commit → publish lag, each group's lag ([`charts`]) |
//! | `GET /console/refresh?set=off\|on&back=` | the live pages' auto-refresh preference ([`refresh`]) |
//!
//! The listings search by event id, room, event type, status and time
//! range, a bounded page at a time with a keyset cursor ([`search`],
//! [`audit_search`]).
//!
//! Every page and action calls the same `ops` functions as the CLI and
//! `/admin/*` — one implementation, one audit trail. Every route is behind
//! `crate::access::guard` (allowed hosts) and logins behind its throttle. Responses carry a
//! strict Content-Security-Policy and `Cache-Control: no-store`; tokens and
//! form bodies are never logged.

pub mod audit_search;
pub mod auth;
mod bulk;
pub mod charts;
pub mod consumers;
pub mod consumption;
pub mod counts;
mod handlers;
pub mod history;
pub mod html;
mod listings;
pub mod overview;
pub mod pages;
mod recent;
pub mod refresh;
pub mod replay_pages;
pub mod search;
pub mod search_pages;
pub mod trace;
pub mod when;

use crate::access::{self, Access, Client};
use crate::ops::ReplayGuard;
use auth::{Keys, Role, Session};
use axum::{
    Router,
    body::Bytes,
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use history::History;
use maud::Markup;
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
    /// Consumer groups whose `consumer_dedup` rows the timeline shows, in
    /// `outbox_schema::groups::CONSUMERS` order (im-bridge's as configured).
    pub groups: Vec<String>,
    /// `console.trace_url`: where an event's trace is shown; None = no link.
    pub trace_url: Option<trace::TraceUrl>,
}

#[derive(Debug, Clone)]
struct Console {
    config: ConsoleConfig,
    keys: Keys,
    access: Access,
    replay_max_age_ms: i64,
    consumers: consumers::Sources,
    /// Live pages' copies, reused for a second (`recent`).
    recent: recent::Recent,
}

/// The console's routes with the default gate: loopback hosts, no named
/// operators, no TLS, the default `ops.replay_max_age`.
pub fn router(config: ConsoleConfig) -> Router {
    let consumers = consumers::Sources::without_broker(&config.groups);
    router_reading(config, consumers)
}

/// [`router`], reading the consumer groups' dead letters through `consumers`.
pub fn router_reading(config: ConsoleConfig, consumers: consumers::Sources) -> Router {
    let access = Access {
        credentials: access::Credentials {
            admin: config.admin_token.clone(),
            read_only: config.read_token.clone(),
            operators: access::operators::Operators::default(),
        },
        ..Access::default()
    };
    let max_age = crate::config::MAX_REPLAY_AGE_SECS * 1_000;
    router_with_consumers(config, access, max_age, consumers)
}

/// The console's routes behind `access` (whose credentials must be the
/// config's tokens), or an empty router when no admin token is set.
pub fn router_with(config: ConsoleConfig, access: Access, replay_max_age_ms: i64) -> Router {
    let consumers = consumers::Sources::without_broker(&config.groups);
    router_with_consumers(config, access, replay_max_age_ms, consumers)
}

/// [`router_with`], reading the consumer groups' dead letters through
/// `consumers` (the relay's broker settings).
pub fn router_with_consumers(
    config: ConsoleConfig,
    access: Access,
    replay_max_age_ms: i64,
    consumers: consumers::Sources,
) -> Router {
    if config.admin_token.is_empty() {
        return Router::new();
    }
    let keys = Keys::new(&config.admin_token, &config.read_token);
    let state = Console {
        config,
        keys,
        access: access.clone(),
        replay_max_age_ms,
        consumers,
        recent: recent::Recent::default(),
    };
    Router::new()
        .route("/console", get(handlers::overview))
        .route("/console/style.css", get(handlers::style))
        .route(
            "/console/login",
            get(handlers::login_form).post(handlers::login),
        )
        .route("/console/logout", post(handlers::logout))
        .route("/console/refresh", get(refresh::set))
        .route("/console/stuck", get(listings::stuck))
        .route("/console/stuck/retry-now", post(handlers::retry_now))
        .route("/console/stuck/skip", post(handlers::skip))
        .route("/console/stuck/bulk-retry-now", post(bulk::retry_now))
        .route("/console/stuck/bulk-skip", post(bulk::skip))
        .route("/console/dead-letters", get(listings::dead_letters))
        .route("/console/dead-letters/dry-run", get(handlers::dry_run))
        .route("/console/dead-letters/replay", post(handlers::replay))
        .route("/console/audit", get(listings::audit))
        .route("/console/rooms", get(listings::room_timeline))
        .merge(charts::routes())
        .merge(consumers::routes())
        // Inside the gate: it needs the client the gate found.
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            recent::serve,
        ))
        .layer(axum::middleware::from_fn_with_state(access, access::guard))
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
    /// The session of a request, or what to answer instead: a bearer token
    /// (throttled: 429), else a cookie whose generation is current and whose
    /// named operator is still listed; otherwise to the login page. A
    /// database that cannot say the generation is a 503, not a logout.
    async fn session(&self, headers: &HeaderMap, client: Client) -> Result<Session, Response> {
        if let Some(token) = auth::bearer_token(headers) {
            return match self.access.authenticate(client, token) {
                Ok(principal) => Ok(Session {
                    role: principal.role,
                    operator: principal.operator,
                    csrf: String::new(),
                    by_cookie: false,
                }),
                Err(denied) => {
                    tracing::warn!("console request refused: wrong bearer token");
                    Err(denied.throttled_response().unwrap_or_else(to_login))
                }
            };
        }
        let cookie = auth::cookie_value(headers).ok_or_else(to_login)?;
        let claims = self.keys.verify(&cookie, now_ms()).ok_or_else(to_login)?;
        let generation = access::sessions::current(&self.config.pool)
            .await
            .map_err(|error| {
                tracing::warn!(%error, "console session check failed");
                plain(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "session store unavailable; retry",
                )
            })?;
        let operators = &self.access.credentials.operators;
        let operator_listed = claims
            .operator
            .as_ref()
            .is_none_or(|name| operators.contains(name.as_str()));
        if claims.generation != generation || !operator_listed {
            return Err(to_login());
        }
        Ok(Session {
            role: claims.role,
            operator: claims.operator,
            csrf: self.keys.csrf_of(&cookie),
            by_cookie: true,
        })
    }

    /// The answer when the session store cannot be read or written.
    fn unavailable(&self, error: &crate::Error) -> Response {
        tracing::warn!(%error, "console session store failed");
        plain(
            StatusCode::SERVICE_UNAVAILABLE,
            "session store unavailable; retry",
        )
    }

    /// The replay guard of a form's force box.
    fn replay_guard(&self, force: bool) -> ReplayGuard {
        ReplayGuard {
            max_age_ms: self.replay_max_age_ms,
            force,
        }
    }

    fn page(&self, session: &Session, title: &str, refresh: Option<u32>, body: Markup) -> String {
        html::page(title, session.role.label(), &session.csrf, refresh, body)
    }

    fn render(
        &self,
        session: &Session,
        title: &str,
        result: Result<Markup, crate::Error>,
    ) -> Response {
        match result {
            Ok(body) => html(StatusCode::OK, self.page(session, title, None, body)),
            Err(error) => self.error(session, title, &error),
        }
    }

    /// A live page: refreshed every few seconds unless turned off, with
    /// its toggle (`refresh`). A refusal does not refresh.
    fn render_live(
        &self,
        session: &Session,
        title: &str,
        live: &refresh::Live,
        result: Result<Markup, crate::Error>,
    ) -> Response {
        match result {
            Ok(body) => html(
                StatusCode::OK,
                self.page(
                    session,
                    title,
                    live.secs(),
                    maud::html! { (live.toggle()) (body) },
                ),
            ),
            Err(error) => self.error(session, title, &error),
        }
    }

    fn error(&self, session: &Session, title: &str, error: &crate::Error) -> Response {
        self.error_after(session, title, error, maud::html! {})
    }

    /// The refusal of `error`, after `prefix` (the page's form).
    fn error_after(
        &self,
        session: &Session,
        title: &str,
        error: &crate::Error,
        prefix: Markup,
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
                maud::html! { (prefix) (pages::refusal(&error.to_string())) },
            ),
        )
    }

    /// The session of a mutation and its parsed form, or the refusal: not
    /// same-origin (403), no session (401, or the throttle's 429), no or
    /// wrong CSRF token (403), read-only (403). A form that did not parse
    /// has no token and is refused here; its precise error is the page's.
    async fn mutation<T: Posted>(
        &self,
        headers: &HeaderMap,
        client: Client,
        parsed: Result<T, crate::Error>,
    ) -> Result<(Session, Result<T, crate::Error>), Box<Response>> {
        let csrf = parsed.as_ref().map(Posted::csrf).unwrap_or_default();
        if let Some(why) = auth::cross_site(headers, &self.access.hosts) {
            tracing::warn!(reason = why, "console mutation refused: cross-site");
            return Err(Box::new(plain(StatusCode::FORBIDDEN, why)));
        }
        let session = match self.session(headers, client).await {
            Ok(session) => session,
            Err(refusal) if refusal.status() == StatusCode::SEE_OTHER => {
                return Err(Box::new(plain(StatusCode::UNAUTHORIZED, "log in first")));
            }
            Err(refusal) => return Err(Box::new(refusal)),
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
                    pages::refusal("a read-only session may not change anything"),
                ),
            )));
        }
        Ok((session, parsed))
    }
}

/// A form a mutation posts: it carries the session's CSRF token.
trait Posted {
    /// The form's `csrf` field.
    fn csrf(&self) -> &str;
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
