//! Who may reach the console and `/admin/*`, shared by both so they cannot
//! drift apart:
//!
//! - [`hosts`]: only requests whose `Host` is in `admin_allowed_hosts` are
//!   answered (421 otherwise) — the DNS-rebinding defence;
//! - [`throttle`]: wrong tokens per client address and in total are
//!   limited (429 with `Retry-After`);
//! - [`Credentials`]: the admin token (operator role), `admin_read_token`
//!   (read-only role) and the named operators of [`operators`], each token
//!   compared in constant time (`service_kit::secret::equal_in_constant_time`);
//! - [`sessions`]: the console's session generation in MySQL.
//!
//! The probes and `/metrics` are not behind any of this.

pub mod hosts;
pub mod operators;
pub mod sessions;
pub mod throttle;

use axum::{
    extract::{ConnectInfo, Request, State},
    http::{StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use hosts::AllowedHosts;
use operators::Operators;
use service_kit::{Secret, operator::OperatorName, secret::equal_in_constant_time};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use throttle::LoginThrottle;

/// What a session may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Every page and every mutation (the admin token, a named operator).
    Operator,
    /// Every page, no mutation (`admin_read_token`).
    ReadOnly,
}

impl Role {
    /// How pages name it.
    pub fn label(self) -> &'static str {
        match self {
            Role::Operator => "operator",
            Role::ReadOnly => "read-only",
        }
    }
}

/// Who a token proves the caller is: a role, and for a named operator's
/// token the operator, whose name the audit then records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The role.
    pub role: Role,
    /// The named operator, if the token is one of `admin_operators_file`.
    pub operator: Option<OperatorName>,
}

/// The tokens that grant access.
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    /// `admin_token`: operator role; empty disables the console and `/admin/*`.
    pub admin: Secret,
    /// `admin_read_token`: read-only role; empty = none.
    pub read_only: Secret,
    /// `admin_operators_file`: named operators.
    pub operators: Operators,
}

impl Credentials {
    /// Who `token` proves the caller is, if anyone.
    pub fn authenticate(&self, token: &str) -> Option<Principal> {
        if token.is_empty() {
            return None;
        }
        let principal = |role, operator| Some(Principal { role, operator });
        if let Some(name) = self.operators.operator_of(token) {
            return principal(Role::Operator, Some(name));
        }
        if equal_in_constant_time(token.as_bytes(), self.admin.expose().as_bytes()) {
            return principal(Role::Operator, None);
        }
        let read_only = self.read_only.expose();
        if !read_only.is_empty() && equal_in_constant_time(token.as_bytes(), read_only.as_bytes()) {
            return principal(Role::ReadOnly, None);
        }
        None
    }
}

/// Why a token was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denied {
    /// Not a token we know (now counted against the client).
    Wrong,
    /// Too many wrong tokens lately; try again after this many seconds.
    Throttled(u64),
}

impl Denied {
    /// The 429 of a throttled attempt (`Retry-After` set), else None.
    pub fn throttled_response(self) -> Option<Response> {
        let Denied::Throttled(secs) = self else {
            return None;
        };
        let mut response = (
            StatusCode::TOO_MANY_REQUESTS,
            "too many wrong tokens from here; wait before trying again",
        )
            .into_response();
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from(secs));
        Some(response)
    }
}

/// The token of an `Authorization: Bearer` header, if there is one.
pub fn bearer_token(headers: &axum::http::HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
}

/// The address a request came from (None when the server was not started
/// with connection info: then every caller shares one throttle entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Client(pub Option<IpAddr>);

/// Everything the gate needs; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// `admin_allowed_hosts`.
    pub hosts: AllowedHosts,
    /// Shared by the console and `/admin/*`.
    pub throttle: Arc<LoginThrottle>,
    /// The tokens.
    pub credentials: Credentials,
    /// Session cookies get `Secure` (the listener serves TLS).
    pub secure_cookies: bool,
}

impl Access {
    /// Checks `token` from `client`: refused while throttled (even when
    /// right), counted when wrong, forgiven when right.
    pub fn authenticate(&self, client: Client, token: &str) -> Result<Principal, Denied> {
        let now = service_kit::time::now_ms();
        self.throttle
            .check(client.0, now)
            .map_err(Denied::Throttled)?;
        match self.credentials.authenticate(token) {
            Some(principal) => {
                self.throttle.succeeded(client.0);
                Ok(principal)
            }
            None => {
                self.throttle.failed(client.0, now);
                Err(Denied::Wrong)
            }
        }
    }
}

/// Middleware of the console and `/admin/*`: refuses a `Host` outside
/// `admin_allowed_hosts` (421), and records the client address for the
/// handlers ([`Client`]).
pub async fn guard(State(access): State<Access>, mut request: Request, next: Next) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    if !access.hosts.allows(host) {
        tracing::warn!(
            host = %host.escape_debug(),
            path = %request.uri().path(),
            "admin request refused: host not in admin_allowed_hosts"
        );
        return (
            StatusCode::MISDIRECTED_REQUEST,
            "this relay's console and /admin answer only to the names in admin_allowed_hosts",
        )
            .into_response();
    }
    let client = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|info| info.0.ip());
    request.extensions_mut().insert(Client(client));
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_grant_their_roles_and_names() {
        let alice = "alice-token-0123456789abcdef012345";
        let line = operators::hash_line("alice", alice).unwrap();
        let credentials = Credentials {
            admin: Secret::new("admin-token"),
            read_only: Secret::new("read-token"),
            operators: Operators::parse(&line).unwrap(),
        };
        let of = |token: &str| credentials.authenticate(token);
        assert_eq!(of("admin-token").unwrap().role, Role::Operator);
        assert_eq!(of("read-token").unwrap().role, Role::ReadOnly);
        let named = of(alice).unwrap();
        assert_eq!(
            (named.role, named.operator.unwrap().as_str()),
            (Role::Operator, "alice")
        );
        assert_eq!(of("admin-tokeN"), None);
        assert_eq!(of(""), None);
        assert!(equal_in_constant_time(b"abc", b"abc"));
        assert!(
            !equal_in_constant_time(b"abc", b"abd") && !equal_in_constant_time(b"abc", b"abcd")
        );
    }
}
