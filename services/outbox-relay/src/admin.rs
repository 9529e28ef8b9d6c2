//! Authenticated admin HTTP endpoints (the CLI's operations over HTTP):
//! `GET /admin/status`, `GET /admin/dead-letters`, `POST /admin/dead-letters/replay`,
//! `POST /admin/purge`. Every request needs `Authorization: Bearer <admin_token>`;
//! with no token configured the endpoints are disabled (404). The token is
//! compared in constant time and never logged. [`check_token`] refuses, at
//! start, a guessable token on a listener other hosts can reach.

use crate::ops::{self, DeadLetterFilter};
use axum::{
    Json, Router,
    extract::{Query, Request, State},
    http::{StatusCode, header::AUTHORIZATION},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use serde::Deserialize;
use service_kit::Secret;
use sqlx::MySqlPool;

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
        "admin_token {problem}, and http_listen `{http_listen}` is not loopback; \
         set a random token of at least {MIN_TOKEN_BYTES} bytes \
         (RELAY__ADMIN_TOKEN or RELAY__ADMIN_TOKEN_FILE), or leave it empty to disable /admin/*"
    )))
}

#[derive(Clone)]
struct AdminState {
    pool: MySqlPool,
    token: Secret,
    default_retention_ms: i64,
}

/// The admin routes, or an empty router when no token is configured.
pub fn router(pool: MySqlPool, token: Secret, default_retention_ms: i64) -> Router {
    if token.is_empty() {
        return Router::new();
    }
    let state = AdminState {
        pool,
        token,
        default_retention_ms,
    };
    Router::new()
        .route("/admin/status", get(status))
        .route("/admin/dead-letters", get(list_dead_letters))
        .route("/admin/dead-letters/replay", post(replay))
        .route("/admin/purge", post(purge))
        .layer(middleware::from_fn_with_state(state.clone(), require_token))
        .with_state(state)
}

async fn require_token(State(state): State<AdminState>, request: Request, next: Next) -> Response {
    let presented = request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .unwrap_or_default();
    if constant_time_eq(presented.as_bytes(), state.token.expose().as_bytes()) {
        next.run(request).await
    } else {
        tracing::warn!(path = %request.uri().path(), "admin request refused: missing or wrong token");
        (StatusCode::UNAUTHORIZED, "missing or wrong admin token").into_response()
    }
}

/// Compares without an early exit, so timing does not reveal a prefix match.
fn constant_time_eq(left: &[u8], right: &[u8]) -> bool {
    if left.len() != right.len() {
        return false;
    }
    left.iter()
        .zip(right)
        .fold(0u8, |acc, (a, b)| acc | (a ^ b))
        == 0
}

fn internal(error: crate::Error) -> Response {
    tracing::warn!(%error, "admin operation failed");
    (StatusCode::SERVICE_UNAVAILABLE, error.to_string()).into_response()
}

async fn status(State(state): State<AdminState>) -> Response {
    match ops::status(&state.pool).await {
        Ok(report) => Json(report).into_response(),
        Err(error) => internal(error),
    }
}

async fn list_dead_letters(
    State(state): State<AdminState>,
    Query(filter): Query<DeadLetterFilter>,
) -> Response {
    match ops::list_dead_letters(&state.pool, &filter).await {
        Ok(letters) => Json(letters).into_response(),
        Err(error) => internal(error),
    }
}

#[derive(Debug, Deserialize)]
struct ReplayQuery {
    #[serde(flatten)]
    filter: DeadLetterFilter,
    #[serde(default)]
    dry_run: bool,
}

async fn replay(State(state): State<AdminState>, Query(query): Query<ReplayQuery>) -> Response {
    match ops::replay_dead_letters(&state.pool, &query.filter, query.dry_run).await {
        Ok(letters) => Json(serde_json::json!({ "dry_run": query.dry_run, "replayed": letters }))
            .into_response(),
        Err(error) => internal(error),
    }
}

#[derive(Debug, Deserialize)]
struct PurgeQuery {
    retention_ms: Option<i64>,
}

async fn purge(State(state): State<AdminState>, Query(query): Query<PurgeQuery>) -> Response {
    let retention = query.retention_ms.unwrap_or(state.default_retention_ms);
    match ops::purge_delivered(&state.pool, retention).await {
        Ok(deleted) => Json(serde_json::json!({ "deleted": deleted, "retention_ms": retention }))
            .into_response(),
        Err(error) => internal(error),
    }
}

#[cfg(test)]
mod tests {
    use super::{MIN_TOKEN_BYTES, SAMPLE_TOKEN, check_token, constant_time_eq};
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
        }
        for listen in ["127.0.0.1:7201", "127.0.0.1:0", "[::1]:7201"] {
            for token in [&sample, &short, &strong] {
                check_token(token, listen).unwrap();
            }
        }
    }

    #[test]
    fn token_comparison() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
        assert!(!constant_time_eq(b"", b"x"));
    }
}
