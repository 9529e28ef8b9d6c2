//! Who may use the console, without server-side session state.
//!
//! - **Login** posts the admin token (or the read-only `admin_read_token`)
//!   in a form body — never a URL — and receives a session cookie
//!   (`HttpOnly`, `SameSite=Strict`, `Path=/console`) that says the role and
//!   the expiry, signed with HMAC-SHA256 under a key derived from the admin
//!   token: nothing is stored, nothing grows, every relay replica accepts it,
//!   and rotating the admin token ends every session.
//! - **CSRF**: every form carries a token that is an HMAC of the session
//!   cookie, so it is bound to the session and cannot be made elsewhere; a
//!   POST is refused without it, and refused outright when the browser says
//!   it is cross-site (`Sec-Fetch-Site`) or its `Origin` is not this host.
//! - **Bearer**: scripts may send `Authorization: Bearer <token>` instead of
//!   a cookie (a browser never attaches it on its own, so it needs no CSRF
//!   token); the same role rule applies.
//! - **Roles**: a read-only session sees every page; every mutation is
//!   refused with 403.
//!
//! Tokens are compared in constant time and never logged or echoed.

use crate::admin::constant_time_eq;
use axum::http::{HeaderMap, header};
use hmac::{Hmac, Mac};
use service_kit::Secret;
use sha2::Sha256;

/// The session cookie's name.
pub const COOKIE: &str = "relay_console";
/// How long a session lasts after login.
pub const SESSION_MS: i64 = 8 * 3_600_000;

type HmacSha256 = Hmac<Sha256>;

/// What a session may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Every page and every mutation (the admin token).
    Operator,
    /// Every page, no mutation (`admin_read_token`).
    ReadOnly,
}

impl Role {
    fn code(self) -> &'static str {
        match self {
            Role::Operator => "rw",
            Role::ReadOnly => "ro",
        }
    }

    /// How pages name it.
    pub fn label(self) -> &'static str {
        match self {
            Role::Operator => "operator",
            Role::ReadOnly => "read-only",
        }
    }
}

/// An authenticated request: its role, and the CSRF token its forms carry
/// (empty for bearer requests, which need none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// The role.
    pub role: Role,
    /// The CSRF token bound to this session's cookie.
    pub csrf: String,
    /// True when authenticated by cookie (a browser): mutations then need
    /// the CSRF token.
    pub by_cookie: bool,
}

/// The console's keys: the two tokens and the signing key derived from the
/// admin token.
#[derive(Clone)]
pub struct Keys {
    admin: Secret,
    read_only: Secret,
    signing: Vec<u8>,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Keys(***)")
    }
}

impl Keys {
    /// Keys of `admin` (required, non-empty) and the optional `read_only` token.
    pub fn new(admin: &Secret, read_only: &Secret) -> Self {
        let mut mac = mac_with(admin.expose().as_bytes());
        mac.update(b"hyapp relay console session key v1");
        Self {
            admin: admin.clone(),
            read_only: read_only.clone(),
            signing: mac.finalize().into_bytes().to_vec(),
        }
    }

    /// The role `token` grants, if any.
    pub fn role_of(&self, token: &str) -> Option<Role> {
        if token.is_empty() {
            return None;
        }
        if constant_time_eq(token.as_bytes(), self.admin.expose().as_bytes()) {
            return Some(Role::Operator);
        }
        let read_only = self.read_only.expose();
        if !read_only.is_empty() && constant_time_eq(token.as_bytes(), read_only.as_bytes()) {
            return Some(Role::ReadOnly);
        }
        None
    }

    fn sign(&self, text: &str) -> String {
        let mut mac = mac_with(&self.signing);
        mac.update(text.as_bytes());
        hex(&mac.finalize().into_bytes())
    }

    /// A session cookie value for `role`, valid until `now + SESSION_MS`.
    pub fn issue(&self, role: Role, now_ms: i64) -> String {
        let body = format!("v1.{}.{}", role.code(), now_ms + SESSION_MS);
        let signature = self.sign(&body);
        format!("{body}.{signature}")
    }

    /// The role of a cookie value that is ours, untampered and unexpired.
    pub fn verify(&self, cookie: &str, now_ms: i64) -> Option<Role> {
        let (body, signature) = cookie.rsplit_once('.')?;
        if !constant_time_eq(self.sign(body).as_bytes(), signature.as_bytes()) {
            return None;
        }
        let mut parts = body.split('.');
        let (Some("v1"), Some(role), Some(expiry), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return None;
        };
        if expiry.parse::<i64>().ok()? <= now_ms {
            return None;
        }
        match role {
            "rw" => Some(Role::Operator),
            "ro" => Some(Role::ReadOnly),
            _ => None,
        }
    }

    /// The CSRF token of a session cookie.
    pub fn csrf_of(&self, cookie: &str) -> String {
        self.sign(&format!("csrf|{cookie}"))
    }

    /// The session of a request: a valid bearer header, else a valid cookie.
    pub fn session(&self, headers: &HeaderMap, now_ms: i64) -> Option<Session> {
        if let Some(token) = headers
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "))
        {
            return self.role_of(token).map(|role| Session {
                role,
                csrf: String::new(),
                by_cookie: false,
            });
        }
        let cookie = cookie_value(headers)?;
        let role = self.verify(&cookie, now_ms)?;
        Some(Session {
            role,
            csrf: self.csrf_of(&cookie),
            by_cookie: true,
        })
    }
}

fn mac_with(key: &[u8]) -> HmacSha256 {
    // HMAC takes a key of any length.
    HmacSha256::new_from_slice(key).unwrap_or_else(|_| unreachable!("HMAC accepts any key length"))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Our cookie's value among the request's cookies.
fn cookie_value(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.to_owned())
}

/// The `Set-Cookie` value of a new session.
pub fn set_cookie(value: &str) -> String {
    format!(
        "{COOKIE}={value}; Path=/console; HttpOnly; SameSite=Strict; Max-Age={}",
        SESSION_MS / 1_000
    )
}

/// The `Set-Cookie` value that ends the session in the browser.
pub fn clear_cookie() -> String {
    format!("{COOKIE}=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0")
}

/// Why a POST came from somewhere else, if it did: the browser's
/// `Sec-Fetch-Site` says cross-site or same-site (another port or
/// subdomain), or `Origin` names another host than the one addressed.
/// Requests without either header (scripts) pass this check and still need
/// a token.
pub fn cross_site(headers: &HeaderMap) -> Option<&'static str> {
    let text = |name: &str| headers.get(name).and_then(|value| value.to_str().ok());
    if let Some(site) = text("sec-fetch-site")
        && site != "same-origin"
        && site != "none"
    {
        return Some("the browser marked the request as cross-site (Sec-Fetch-Site)");
    }
    if let Some(origin) = text("origin") {
        let host = text("host").unwrap_or_default();
        let same = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
            .is_some_and(|rest| !host.is_empty() && rest == host);
        if !same {
            return Some("the request's Origin is not this console");
        }
    }
    None
}

/// True when `presented` is the session's CSRF token.
pub fn csrf_ok(session: &Session, presented: &str) -> bool {
    !session.by_cookie
        || (!presented.is_empty()
            && constant_time_eq(presented.as_bytes(), session.csrf.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> Keys {
        Keys::new(&Secret::new("admin-token"), &Secret::new("read-token"))
    }

    #[test]
    fn sessions_verify_only_untampered_and_unexpired() {
        let keys = keys();
        let cookie = keys.issue(Role::ReadOnly, 1_000);
        assert_eq!(keys.verify(&cookie, 2_000), Some(Role::ReadOnly));
        assert_eq!(keys.verify(&cookie, 1_000 + SESSION_MS), None, "expired");
        let forged = cookie.replace(".ro.", ".rw.");
        assert_eq!(keys.verify(&forged, 2_000), None, "role changed");
        let other = Keys::new(&Secret::new("rotated"), &Secret::default());
        assert_eq!(other.verify(&cookie, 2_000), None, "token rotated");
        assert_eq!(keys.verify("garbage", 2_000), None);
        assert!(!cookie.contains("admin-token") && !cookie.contains("read-token"));
    }

    #[test]
    fn tokens_grant_their_roles() {
        let keys = keys();
        assert_eq!(keys.role_of("admin-token"), Some(Role::Operator));
        assert_eq!(keys.role_of("read-token"), Some(Role::ReadOnly));
        assert_eq!(keys.role_of("admin-tokeN"), None);
        assert_eq!(keys.role_of(""), None);
        let no_reader = Keys::new(&Secret::new("admin-token"), &Secret::default());
        assert_eq!(no_reader.role_of(""), None);
    }

    #[test]
    fn cross_site_requests_are_named() {
        let mut headers = HeaderMap::new();
        headers.insert("host", "127.0.0.1:7201".parse().unwrap());
        assert_eq!(cross_site(&headers), None);
        headers.insert("origin", "http://127.0.0.1:7201".parse().unwrap());
        headers.insert("sec-fetch-site", "same-origin".parse().unwrap());
        assert_eq!(cross_site(&headers), None);
        headers.insert("origin", "http://evil.example".parse().unwrap());
        assert!(cross_site(&headers).unwrap().contains("Origin"));
        headers.insert("origin", "http://127.0.0.1:7201".parse().unwrap());
        headers.insert("sec-fetch-site", "cross-site".parse().unwrap());
        assert!(cross_site(&headers).unwrap().contains("Sec-Fetch-Site"));
    }
}
