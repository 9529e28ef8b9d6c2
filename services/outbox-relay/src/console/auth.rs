//! Who may use the console, with one row of server-side state.
//!
//! - **Login** posts a token in a form body — never a URL — and receives a
//!   session cookie (`HttpOnly`, `SameSite=Strict`, `Path=/console`, and
//!   `Secure` when the listener serves TLS) that says the role, the named
//!   operator if any, the expiry and the session generation, signed with
//!   HMAC-SHA256 under a key derived from both the admin token and the
//!   read-only token: rotating either ends every session.
//! - **Revocation**: a cookie is valid only while its generation is the one
//!   in `relay_console_sessions` (`crate::access::sessions`), so a logout or
//!   `outbox-relay console revoke-sessions` ends every console session on
//!   every replica, copied cookies included. A named operator's session also
//!   ends when the name leaves `admin_operators_file`.
//! - **CSRF**: every form carries a token that is an HMAC of the session
//!   cookie; a POST is refused without it, and refused outright when the
//!   browser says it is cross-site (`Sec-Fetch-Site`) or its `Origin` is not
//!   an allowed host addressed as this request is (`admin_allowed_hosts`).
//! - **Bearer**: scripts may send `Authorization: Bearer <token>` instead of
//!   a cookie (a browser never attaches it on its own, so it needs no CSRF
//!   token); the same role rule and the same login throttle apply.
//!
//! Tokens are compared in constant time and never logged or echoed.

use crate::access::{Principal, hosts::AllowedHosts};
pub use crate::access::{Role, bearer_token};
use axum::http::{HeaderMap, header};
use hmac::{Hmac, Mac};
use service_kit::{Secret, operator::OperatorName, secret::equal_in_constant_time};
use sha2::Sha256;

/// The session cookie's name.
pub const COOKIE: &str = "relay_console";
/// How long a session lasts after login.
pub const SESSION_MS: i64 = 8 * 3_600_000;

type HmacSha256 = Hmac<Sha256>;

fn code(role: Role) -> &'static str {
    match role {
        Role::Operator => "rw",
        Role::ReadOnly => "ro",
    }
}

/// An authenticated request: its role, its named operator, and the CSRF
/// token its forms carry (empty for bearer requests, which need none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// The role.
    pub role: Role,
    /// The named operator (`admin_operators_file`), whom the audit records
    /// instead of the form's operator field.
    pub operator: Option<OperatorName>,
    /// The CSRF token bound to this session's cookie.
    pub csrf: String,
    /// True when authenticated by cookie (a browser): mutations then need
    /// the CSRF token.
    pub by_cookie: bool,
}

/// What a genuine, unexpired cookie says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    /// The role.
    pub role: Role,
    /// The named operator, if any.
    pub operator: Option<OperatorName>,
    /// The session generation it was issued in.
    pub generation: u64,
}

/// The cookie signing key, derived from the admin and read-only tokens.
#[derive(Clone)]
pub struct Keys {
    signing: Vec<u8>,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Keys(***)")
    }
}

impl Keys {
    /// Keys of `admin` (required, non-empty) and the optional `read_only`
    /// token; the read token's length is hashed in first so the two can
    /// never be re-split into another pair with the same key.
    pub fn new(admin: &Secret, read_only: &Secret) -> Self {
        let mut mac = mac_with(admin.expose().as_bytes());
        mac.update(b"hyapp relay console session key v2");
        mac.update(&(read_only.expose().len() as u64).to_be_bytes());
        mac.update(read_only.expose().as_bytes());
        Self {
            signing: mac.finalize().into_bytes().to_vec(),
        }
    }

    fn sign(&self, text: &str) -> String {
        let mut mac = mac_with(&self.signing);
        mac.update(text.as_bytes());
        hex(&mac.finalize().into_bytes())
    }

    /// A session cookie value for `principal` in `generation`, valid until
    /// `now + SESSION_MS`.
    pub fn issue(&self, principal: &Principal, generation: u64, now_ms: i64) -> String {
        let operator = principal
            .operator
            .as_ref()
            .map(OperatorName::as_str)
            .unwrap_or_default();
        let body = format!(
            "v2.{}.{}.{generation}.{operator}",
            code(principal.role),
            now_ms + SESSION_MS
        );
        let signature = self.sign(&body);
        format!("{body}.{signature}")
    }

    /// What a cookie value that is ours, untampered and unexpired says.
    pub fn verify(&self, cookie: &str, now_ms: i64) -> Option<Claims> {
        let (body, signature) = cookie.rsplit_once('.')?;
        if !equal_in_constant_time(self.sign(body).as_bytes(), signature.as_bytes()) {
            return None;
        }
        // The operator comes last: its name may hold dots.
        let mut parts = body.splitn(5, '.');
        let (Some("v2"), Some(role), Some(expiry), Some(generation), Some(operator)) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return None;
        };
        if expiry.parse::<i64>().ok()? <= now_ms {
            return None;
        }
        let role = match role {
            "rw" => Role::Operator,
            "ro" => Role::ReadOnly,
            _ => return None,
        };
        let operator = match operator {
            "" => None,
            name => Some(OperatorName::new(name).ok()?),
        };
        Some(Claims {
            role,
            operator,
            generation: generation.parse().ok()?,
        })
    }

    /// The CSRF token of a session cookie.
    pub fn csrf_of(&self, cookie: &str) -> String {
        self.sign(&format!("csrf|{cookie}"))
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
pub fn cookie_value(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.to_owned())
}

fn secure_attribute(secure: bool) -> &'static str {
    if secure { "; Secure" } else { "" }
}

/// The `Set-Cookie` value of a new session; `Secure` over TLS.
pub fn set_cookie(value: &str, secure: bool) -> String {
    format!(
        "{COOKIE}={value}; Path=/console; HttpOnly; SameSite=Strict; Max-Age={}{}",
        SESSION_MS / 1_000,
        secure_attribute(secure)
    )
}

/// The `Set-Cookie` value that ends the session in the browser.
pub fn clear_cookie(secure: bool) -> String {
    format!(
        "{COOKIE}=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0{}",
        secure_attribute(secure)
    )
}

/// Why a POST came from somewhere else, if it did: the browser's
/// `Sec-Fetch-Site` says cross-site or same-site (another port or
/// subdomain), or `Origin` is not an allowed host addressed exactly as this
/// request's `Host` (a rebound name passes "Origin equals Host" but is not
/// allowed). Requests without either header (scripts) pass this check and
/// still need a token.
pub fn cross_site(headers: &HeaderMap, hosts: &AllowedHosts) -> Option<&'static str> {
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
            .is_some_and(|rest| {
                !host.is_empty() && rest.eq_ignore_ascii_case(host) && hosts.allows(rest)
            });
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
            && equal_in_constant_time(presented.as_bytes(), session.csrf.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> Keys {
        Keys::new(&Secret::new("admin-token"), &Secret::new("read-token"))
    }

    fn principal(role: Role, operator: Option<&str>) -> Principal {
        Principal {
            role,
            operator: operator.map(|name| OperatorName::new(name).unwrap()),
        }
    }

    #[test]
    fn sessions_verify_only_untampered_and_unexpired() {
        let keys = keys();
        let cookie = keys.issue(&principal(Role::ReadOnly, None), 3, 1_000);
        let claims = keys.verify(&cookie, 2_000).unwrap();
        assert_eq!((claims.role, claims.generation), (Role::ReadOnly, 3));
        assert_eq!(keys.verify(&cookie, 1_000 + SESSION_MS), None, "expired");
        let forged = cookie.replace(".ro.", ".rw.");
        assert_eq!(keys.verify(&forged, 2_000), None, "role changed");
        let admin_rotated = Keys::new(&Secret::new("rotated"), &Secret::new("read-token"));
        assert_eq!(admin_rotated.verify(&cookie, 2_000), None, "admin rotated");
        let read_rotated = Keys::new(&Secret::new("admin-token"), &Secret::new("read-2"));
        assert_eq!(read_rotated.verify(&cookie, 2_000), None, "read rotated");
        assert_eq!(keys.verify("garbage", 2_000), None);
        assert!(!cookie.contains("admin-token") && !cookie.contains("read-token"));
        let named = keys.issue(&principal(Role::Operator, Some("ali.ce@x")), 0, 1_000);
        let claims = keys.verify(&named, 2_000).unwrap();
        assert_eq!(claims.operator.unwrap().as_str(), "ali.ce@x");
        assert_eq!(keys.verify(&named.replace("ali.ce", "bob.ce"), 2_000), None);
    }

    #[test]
    fn cross_site_requests_are_named() {
        let hosts = AllowedHosts::default();
        let mut headers = HeaderMap::new();
        headers.insert("host", "127.0.0.1:7201".parse().unwrap());
        assert_eq!(cross_site(&headers, &hosts), None);
        headers.insert("origin", "http://127.0.0.1:7201".parse().unwrap());
        headers.insert("sec-fetch-site", "same-origin".parse().unwrap());
        assert_eq!(cross_site(&headers, &hosts), None);
        headers.insert("origin", "http://evil.example".parse().unwrap());
        assert!(cross_site(&headers, &hosts).unwrap().contains("Origin"));
        headers.insert("host", "evil.example".parse().unwrap());
        assert!(cross_site(&headers, &hosts).is_some(), "rebound name");
        headers.insert("host", "127.0.0.1:7201".parse().unwrap());
        headers.insert("origin", "http://127.0.0.1:7201".parse().unwrap());
        headers.insert("sec-fetch-site", "cross-site".parse().unwrap());
        assert!(
            cross_site(&headers, &hosts)
                .unwrap()
                .contains("Sec-Fetch-Site")
        );
    }

    #[test]
    fn cookies_are_secure_over_tls() {
        assert!(set_cookie("v", true).ends_with("; Secure"));
        assert!(!set_cookie("v", false).contains("Secure"));
        assert!(clear_cookie(true).contains("Max-Age=0; Secure"));
    }
}
