//! Authenticated admin HTTP endpoints: the CLI's operator commands over HTTP,
//! served by the same `ops` functions. Reads are GET, mutations POST:
//!
//! | Endpoint | Command |
//! |---|---|
//! | `GET /admin/status` | `status` |
//! | `GET /admin/rooms/{room_id}` | `room` |
//! | `POST /admin/rooms/{room_id}/retry-now`, `/admin/events/{event_id}/retry-now` | `retry-now` |
//! | `POST /admin/rooms/{room_id}/skip`, `/admin/events/{event_id}/skip` | `skip` (`reason=` required) |
//! | `GET /admin/leases` | `leases` |
//! | `GET /admin/audit` | `audit` |
//! | `GET /admin/dead-letters`, `POST /admin/dead-letters/replay` | `dead-letters list`, `replay` |
//! | `POST /admin/purge` | `purge` |
//! | `GET /console/…`, `POST /console/…` | the operator console (`crate::console`: login, pages, the same operations from forms) |
//!
//! Every request needs an allowed `Host` (`admin_allowed_hosts`, else 421)
//! and `Authorization: Bearer <admin_token>` or a named operator's token
//! (`admin_operators_file`); with no admin token configured the endpoints
//! are disabled (404). Tokens are compared in constant time, never logged,
//! and wrong ones are throttled per client (429, `crate::access`).
//! [`check_token`] refuses, at start, a guessable token on a listener other
//! hosts can reach. A mutation with the admin token also needs
//! `x-operator: <name>`, recorded in the audit trail with its reason; a
//! named operator's token records that operator, whatever the header says.
//! Refusals are JSON `{"error": …}`: 400 bad input, 404 unknown room or
//! event, 409 a row not in a state the command applies to.

use crate::access::{self, Access, Client, Principal};
use crate::ops::{self, DeadLetterFilter, OperatorName, ReplayGuard, Target};
use axum::{
    Extension, Json, Router,
    extract::{Path, Query, Request, State},
    http::{HeaderMap, StatusCode},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use serde::Deserialize;
use service_kit::Secret;
use service_kit::secret::equal_in_constant_time;
use sqlx::MySqlPool;

/// The header naming who performs a mutation.
pub const OPERATOR_HEADER: &str = "x-operator";

/// The token of the sample config (`configs/outbox-relay.yaml`), known to
/// everyone who has read this repository.
pub const SAMPLE_TOKEN: &str = "local-admin-token";

/// Shortest token accepted on a non-loopback listener: 32 bytes of random
/// text cannot be guessed by trying, a memorable word can.
pub const MIN_TOKEN_BYTES: usize = 32;

/// Refuses an `admin_token` that anyone could present, when `http_listen` is
/// reachable from other hosts: the sample token or one shorter than
/// [`MIN_TOKEN_BYTES`]. On a loopback listener (local development, the demo,
/// tests) only processes on the same host can call, so any token is allowed;
/// an empty token disables the endpoints and is allowed everywhere.
pub fn check_token(token: &Secret, http_listen: &str) -> Result<(), crate::Error> {
    check_secret("admin_token", "RELAY__ADMIN_TOKEN", token, http_listen)
}

/// The console's tokens together: each passes [`check_token`]'s rule (the
/// read-only one names `admin_read_token`), a read-only token needs an
/// admin token (the console is off without one), and the two differ (a
/// login must tell the roles apart).
pub fn check_tokens(
    admin: &Secret,
    read_only: &Secret,
    http_listen: &str,
) -> Result<(), crate::Error> {
    check_token(admin, http_listen)?;
    check_secret(
        "admin_read_token",
        "RELAY__ADMIN_READ_TOKEN",
        read_only,
        http_listen,
    )?;
    if read_only.is_empty() {
        return Ok(());
    }
    if admin.is_empty() {
        return Err(crate::Error::Config(
            "admin_read_token is set but admin_token is empty; the console is off \
             without admin_token, so set it too or leave admin_read_token empty"
                .into(),
        ));
    }
    if equal_in_constant_time(admin.expose().as_bytes(), read_only.expose().as_bytes()) {
        return Err(crate::Error::Config(
            "admin_read_token equals admin_token; give the read-only role its own token".into(),
        ));
    }
    Ok(())
}

fn check_secret(
    key: &str,
    variable: &str,
    token: &Secret,
    http_listen: &str,
) -> Result<(), crate::Error> {
    // An address that does not parse counts as reachable: bind refuses it
    // later anyway, and the weaker token must not slip through first.
    let loopback = http_listen
        .parse::<std::net::SocketAddr>()
        .is_ok_and(|addr| addr.ip().is_loopback());
    if token.is_empty() || loopback {
        return Ok(());
    }
    let problem = if token.expose() == SAMPLE_TOKEN {
        "is the sample token".to_owned()
    } else if token.expose().len() < MIN_TOKEN_BYTES {
        format!("is shorter than {MIN_TOKEN_BYTES} bytes")
    } else {
        return Ok(());
    };
    Err(crate::Error::Config(format!(
        "{key} {problem}, and http_listen `{http_listen}` is not loopback; \
         set a random token of at least {MIN_TOKEN_BYTES} bytes \
         ({variable} or {variable}_FILE), or leave it empty to disable /admin/*"
    )))
}

#[derive(Clone)]
struct AdminState {
    pool: MySqlPool,
    access: Access,
    default_retention_ms: i64,
    replay_max_age_ms: i64,
}

/// The admin routes with the default gate (loopback hosts, the admin token
/// alone, the default `ops.replay_max_age`), or an empty router when no
/// token is configured.
pub fn router(pool: MySqlPool, token: Secret, default_retention_ms: i64) -> Router {
    let access = Access {
        credentials: access::Credentials {
            admin: token,
            ..access::Credentials::default()
        },
        ..Access::default()
    };
    let max_age = crate::config::MAX_REPLAY_AGE_SECS * 1_000;
    router_with(pool, access, default_retention_ms, max_age)
}

/// The admin routes behind `access`, or an empty router when it has no
/// admin token.
pub fn router_with(
    pool: MySqlPool,
    access: Access,
    default_retention_ms: i64,
    replay_max_age_ms: i64,
) -> Router {
    if access.credentials.admin.is_empty() {
        return Router::new();
    }
    let state = AdminState {
        pool,
        access: access.clone(),
        default_retention_ms,
        replay_max_age_ms,
    };
    Router::new()
        .route("/admin/status", get(status))
        .route("/admin/rooms/{room_id}", get(room))
        .route("/admin/rooms/{room_id}/retry-now", post(room_retry_now))
        .route("/admin/rooms/{room_id}/skip", post(room_skip))
        .route("/admin/events/{event_id}/retry-now", post(event_retry_now))
        .route("/admin/events/{event_id}/skip", post(event_skip))
        .route("/admin/leases", get(leases))
        .route("/admin/audit", get(audit))
        .route("/admin/dead-letters", get(list_dead_letters))
        .route("/admin/dead-letters/replay", post(replay))
        .route("/admin/purge", post(purge))
        .layer(middleware::from_fn_with_state(state.clone(), require_token))
        .layer(middleware::from_fn_with_state(access, access::guard))
        .with_state(state)
}

/// Lets through an operator-role token (the admin token or a named
/// operator's; `admin_read_token` is the console's only), recording the
/// principal for the handlers.
async fn require_token(
    State(state): State<AdminState>,
    Extension(client): Extension<Client>,
    mut request: Request,
    next: Next,
) -> Response {
    let presented = access::bearer_token(request.headers()).unwrap_or_default();
    match state.access.authenticate(client, presented) {
        Ok(principal) if principal.role == access::Role::Operator => {
            request.extensions_mut().insert(principal);
            next.run(request).await
        }
        refused => {
            if let Some(throttled) = refused.err().and_then(|denied| denied.throttled_response()) {
                tracing::warn!(path = %request.uri().path(), "admin request refused: throttled");
                return throttled;
            }
            tracing::warn!(path = %request.uri().path(), "admin request refused: missing or wrong token");
            (StatusCode::UNAUTHORIZED, "missing or wrong admin token").into_response()
        }
    }
}

/// The HTTP status of each error: the caller's fault (4xx) or the server's.
/// The admin endpoints and the console answer an operation's error alike.
pub(crate) fn error_status(error: &crate::Error) -> StatusCode {
    match error {
        crate::Error::InvalidInput(_) => StatusCode::BAD_REQUEST,
        crate::Error::NotFound(_) => StatusCode::NOT_FOUND,
        crate::Error::Refused(_) => StatusCode::CONFLICT,
        crate::Error::Database(_) => StatusCode::SERVICE_UNAVAILABLE,
        crate::Error::Config(_) | crate::Error::Mq(_) | crate::Error::Io(_) => {
            StatusCode::INTERNAL_SERVER_ERROR
        }
    }
}

fn error_response(error: crate::Error) -> Response {
    let status = error_status(&error);
    if status.is_server_error() {
        tracing::warn!(%error, "admin operation failed");
    }
    (
        status,
        Json(serde_json::json!({ "error": error.to_string() })),
    )
        .into_response()
}

fn respond<T: serde::Serialize>(result: Result<T, crate::Error>) -> Response {
    match result {
        Ok(value) => Json(value).into_response(),
        Err(error) => error_response(error),
    }
}

/// Who a mutation is recorded under: the named operator whose token was
/// presented, else the `x-operator` header, checked like the CLI's
/// `--operator`.
fn operator(principal: &Principal, headers: &HeaderMap) -> Result<OperatorName, crate::Error> {
    if let Some(name) = &principal.operator {
        return Ok(name.clone());
    }
    let name = match headers.get(OPERATOR_HEADER) {
        None => "",
        Some(value) => value.to_str().map_err(|_| {
            crate::Error::InvalidInput(format!("{OPERATOR_HEADER} is not visible ASCII"))
        })?,
    };
    ops::audit::operator_name(name, OPERATOR_HEADER)
}

async fn status(State(state): State<AdminState>) -> Response {
    respond(ops::status(&state.pool).await)
}

async fn room(State(state): State<AdminState>, Path(room_id): Path<String>) -> Response {
    respond(ops::room(&state.pool, &room_id).await)
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct ReasonQuery {
    reason: Option<String>,
}

async fn intervene(
    state: AdminState,
    principal: Principal,
    headers: HeaderMap,
    target: Result<Target, crate::Error>,
    reason: Option<String>,
    skip: bool,
) -> Response {
    let result = async {
        let operator = operator(&principal, &headers)?;
        let target = target?;
        if skip {
            ops::skip(&state.pool, &target, &operator, reason.as_deref()).await
        } else {
            ops::retry_now(&state.pool, &target, &operator, reason.as_deref()).await
        }
    }
    .await;
    respond(result)
}

async fn room_retry_now(
    State(state): State<AdminState>,
    Extension(principal): Extension<Principal>,
    headers: HeaderMap,
    Path(room_id): Path<String>,
    Query(query): Query<ReasonQuery>,
) -> Response {
    let target = Target::from_parts(Some(&room_id), None);
    intervene(state, principal, headers, target, query.reason, false).await
}

async fn room_skip(
    State(state): State<AdminState>,
    Extension(principal): Extension<Principal>,
    headers: HeaderMap,
    Path(room_id): Path<String>,
    Query(query): Query<ReasonQuery>,
) -> Response {
    let target = Target::from_parts(Some(&room_id), None);
    intervene(state, principal, headers, target, query.reason, true).await
}

async fn event_retry_now(
    State(state): State<AdminState>,
    Extension(principal): Extension<Principal>,
    headers: HeaderMap,
    Path(event_id): Path<String>,
    Query(query): Query<ReasonQuery>,
) -> Response {
    let target = Target::from_parts(None, Some(&event_id));
    intervene(state, principal, headers, target, query.reason, false).await
}

async fn event_skip(
    State(state): State<AdminState>,
    Extension(principal): Extension<Principal>,
    headers: HeaderMap,
    Path(event_id): Path<String>,
    Query(query): Query<ReasonQuery>,
) -> Response {
    let target = Target::from_parts(None, Some(&event_id));
    intervene(state, principal, headers, target, query.reason, true).await
}

async fn leases(State(state): State<AdminState>) -> Response {
    respond(ops::leases(&state.pool).await)
}

async fn audit(
    State(state): State<AdminState>,
    Query(filter): Query<ops::AuditFilter>,
) -> Response {
    respond(ops::audit::list(&state.pool, &filter).await)
}

async fn list_dead_letters(
    State(state): State<AdminState>,
    Query(filter): Query<DeadLetterFilter>,
) -> Response {
    respond(ops::list_dead_letters(&state.pool, &filter).await)
}

/// The dead-letter filter's fields plus the replay's own, written out:
/// `serde(flatten)` would buffer the query's values as text and then refuse
/// `limit=5` as "a string, expected u64".
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct ReplayQuery {
    event_id: Option<String>,
    room_id: Option<String>,
    event_type: Option<String>,
    since: Option<String>,
    since_ms: Option<i64>,
    until_ms: Option<i64>,
    limit: Option<u64>,
    dry_run: bool,
    /// Replay rows older than `ops.replay_max_age` too.
    force: bool,
    reason: Option<String>,
}

async fn replay(
    State(state): State<AdminState>,
    Extension(principal): Extension<Principal>,
    headers: HeaderMap,
    Query(query): Query<ReplayQuery>,
) -> Response {
    let filter = DeadLetterFilter {
        event_id: query.event_id,
        room_id: query.room_id,
        event_type: query.event_type,
        since: query.since,
        since_ms: query.since_ms,
        until_ms: query.until_ms,
        limit: query.limit,
    };
    let result = async {
        let operator = if query.dry_run {
            None
        } else {
            Some(operator(&principal, &headers)?)
        };
        let guard = ReplayGuard {
            max_age_ms: state.replay_max_age_ms,
            force: query.force,
        };
        let replay = ops::replay_dead_letters(
            &state.pool,
            &filter,
            query.dry_run,
            operator.as_ref(),
            query.reason.as_deref(),
            guard,
        )
        .await?;
        Ok(serde_json::json!({
            "dry_run": query.dry_run,
            "replayed": replay.replayed,
            "too_old": replay.too_old,
            "forced": replay.forced,
        }))
    }
    .await;
    respond(result)
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct PurgeQuery {
    retention_ms: Option<i64>,
    retention: Option<String>,
    reason: Option<String>,
}

async fn purge(
    State(state): State<AdminState>,
    Extension(principal): Extension<Principal>,
    headers: HeaderMap,
    Query(query): Query<PurgeQuery>,
) -> Response {
    let result = async {
        let operator = operator(&principal, &headers)?;
        let retention = match (&query.retention, query.retention_ms) {
            (Some(text), None) => ops::parse_duration("retention", text)?,
            (None, Some(ms)) => ms,
            (None, None) => state.default_retention_ms,
            (Some(_), Some(_)) => {
                return Err(crate::Error::InvalidInput(
                    "give one of retention and retention_ms".into(),
                ));
            }
        };
        ops::purge_delivered(&state.pool, retention, &operator, query.reason.as_deref()).await
    }
    .await;
    respond(result)
}

#[cfg(test)]
mod tests {
    use super::{MIN_TOKEN_BYTES, SAMPLE_TOKEN, check_token, check_tokens};
    use service_kit::Secret;

    #[test]
    fn guessable_tokens_are_refused_off_loopback() {
        let strong = Secret::new("x".repeat(MIN_TOKEN_BYTES));
        let short = Secret::new("x".repeat(MIN_TOKEN_BYTES - 1));
        let sample = Secret::new(SAMPLE_TOKEN);
        for listen in ["0.0.0.0:7201", "10.1.2.3:7201", "[::]:7201", "relay:7201"] {
            for (token, names) in [(&sample, "sample token"), (&short, "shorter than 32")] {
                let error = check_token(token, listen).unwrap_err().to_string();
                assert!(
                    error.contains("admin_token") && error.contains(names),
                    "{listen}: {error}"
                );
                assert!(!error.contains(token.expose()), "token printed: {error}");
            }
            check_token(&strong, listen).unwrap();
            check_token(&Secret::default(), listen).unwrap();
            let error = check_tokens(&strong, &short, listen)
                .unwrap_err()
                .to_string();
            assert!(
                error.contains("admin_read_token is shorter than 32")
                    && error.contains("RELAY__ADMIN_READ_TOKEN_FILE"),
                "{listen}: {error}"
            );
        }
        let other = Secret::new("y".repeat(MIN_TOKEN_BYTES));
        check_tokens(&strong, &other, "0.0.0.0:7201").unwrap();
        check_tokens(&strong, &Secret::default(), "0.0.0.0:7201").unwrap();
        let same = check_tokens(&strong, &strong.clone(), "127.0.0.1:0")
            .unwrap_err()
            .to_string();
        assert!(
            same.contains("admin_read_token equals admin_token"),
            "{same}"
        );
        let alone = check_tokens(&Secret::default(), &other, "127.0.0.1:0")
            .unwrap_err()
            .to_string();
        assert!(alone.contains("admin_token is empty"), "{alone}");
        for listen in ["127.0.0.1:7201", "127.0.0.1:0", "[::1]:7201"] {
            for token in [&sample, &short, &strong] {
                check_token(token, listen).unwrap();
            }
        }
    }
}
