//! Live pages served again from a copy at most [`FRESH_FOR`] old, so that
//! reloading a page back to back — an operator holding F5, a dozen tabs,
//! an aggressive auto-refresh — costs the database at most one load of that
//! page per second per session instead of one per request.
//!
//! Each copy belongs to one exact request: the path and query, and the
//! session's `Authorization` and `Cookie` headers (hashed: no token is kept
//! in the clear), so a copy is never shown to another session or another
//! role, and the auto-refresh toggle's cookie picks its own copy. The
//! session is still checked on every request (a revoked session is refused
//! at once); only the page is reused. Any mutation through the console
//! drops every copy, so an operator always sees what they just did. At most
//! [`MAX_COPIES`] copies of at most [`MAX_COPY_BYTES`] each are kept.
//!
//! Written here rather than taken from a caching crate: what needs care is
//! the key (session-bound) and the invalidation on the console's own
//! mutations; the store is a map with a deadline per entry.

use super::Console;
use crate::access::Client;
use axum::{
    Extension,
    body::{Body, Bytes},
    extract::{Request, State},
    http::{HeaderMap, Method, StatusCode, header},
    middleware::Next,
    response::Response,
};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a copy is served.
pub const FRESH_FOR: Duration = Duration::from_secs(1);
/// Most copies kept (past it, expired ones go first, then all).
pub const MAX_COPIES: usize = 256;
/// Largest page kept (a live page is tens of kilobytes).
pub const MAX_COPY_BYTES: usize = 4 << 20;

/// The live pages (the ones that refresh themselves).
const LIVE: [&str; 6] = [
    "/console",
    "/console/stuck",
    "/console/dead-letters",
    "/console/audit",
    "/console/rooms",
    "/console/charts",
];

/// A page as it was answered.
#[derive(Debug, Clone)]
struct Copy {
    taken: Instant,
    headers: HeaderMap,
    body: Bytes,
}

/// The copies, by request.
#[derive(Debug, Default, Clone)]
pub(super) struct Recent {
    copies: Arc<Mutex<HashMap<[u8; 32], Copy>>>,
}

impl Recent {
    fn fresh(&self, key: &[u8; 32]) -> Option<Copy> {
        let copies = self
            .copies
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        copies
            .get(key)
            .filter(|copy| copy.taken.elapsed() < FRESH_FOR)
            .cloned()
    }

    fn keep(&self, key: [u8; 32], copy: Copy) {
        let mut copies = self
            .copies
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        if copies.len() >= MAX_COPIES {
            copies.retain(|_, kept| kept.taken.elapsed() < FRESH_FOR);
            if copies.len() >= MAX_COPIES {
                copies.clear();
            }
        }
        copies.insert(key, copy);
    }

    fn forget_all(&self) {
        self.copies
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .clear();
    }
}

/// The request a copy answers.
fn key_of(request: &Request) -> [u8; 32] {
    let mut hash = Sha256::new();
    let uri = request.uri();
    hash.update(uri.path().as_bytes());
    hash.update([0]);
    hash.update(uri.query().unwrap_or_default().as_bytes());
    for name in [header::AUTHORIZATION, header::COOKIE] {
        hash.update([0]);
        for value in request.headers().get_all(&name) {
            hash.update(value.as_bytes());
            hash.update([1]);
        }
    }
    hash.finalize().into()
}

/// The middleware: live GETs from a fresh copy (after the session check;
/// without a copy the page's handler checks it), every other method drops
/// the copies once it has run.
pub(super) async fn serve(
    State(console): State<Console>,
    Extension(client): Extension<Client>,
    request: Request,
    next: Next,
) -> Response {
    if request.method() != Method::GET {
        let response = next.run(request).await;
        console.recent.forget_all();
        return response;
    }
    if !LIVE.contains(&request.uri().path()) {
        return next.run(request).await;
    }
    let key = key_of(&request);
    if let Some(copy) = console.recent.fresh(&key) {
        if let Err(refusal) = console.session(request.headers(), client).await {
            return refusal;
        }
        let mut response = Response::new(Body::from(copy.body));
        *response.headers_mut() = copy.headers;
        return response;
    }
    // No copy: the page's handler checks the session (once), and only its
    // 200 — given to a valid session — becomes a copy.
    let response = next.run(request).await;
    if response.status() != StatusCode::OK {
        return response;
    }
    let (parts, body) = response.into_parts();
    match axum::body::to_bytes(body, MAX_COPY_BYTES).await {
        Ok(body) => {
            let copy = Copy {
                taken: Instant::now(),
                headers: parts.headers.clone(),
                body: body.clone(),
            };
            console.recent.keep(key, copy);
            Response::from_parts(parts, Body::from(body))
        }
        Err(error) => {
            tracing::warn!(%error, "console page not read to its end");
            super::plain(StatusCode::INTERNAL_SERVER_ERROR, "page too large")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(uri: &str, cookie: &str) -> Request {
        Request::builder()
            .uri(uri)
            .header(header::COOKIE, cookie)
            .body(Body::empty())
            .unwrap()
    }

    #[test]
    fn a_copy_belongs_to_one_page_and_one_session() {
        let key = key_of(&request("/console/stuck?room_id=r", "s=a"));
        assert_eq!(key, key_of(&request("/console/stuck?room_id=r", "s=a")));
        for other in [
            request("/console/stuck?room_id=q", "s=a"),
            request("/console/stuck?room_id=r", "s=b"),
            request("/console/dead-letters?room_id=r", "s=a"),
        ] {
            assert_ne!(key, key_of(&other), "{:?}", other.uri());
        }
    }

    #[test]
    fn copies_are_bounded_and_expire() {
        let recent = Recent::default();
        for n in 0..(MAX_COPIES + 10) {
            let mut key = [0_u8; 32];
            key[..8].copy_from_slice(&(n as u64).to_be_bytes());
            recent.keep(
                key,
                Copy {
                    taken: Instant::now(),
                    headers: HeaderMap::new(),
                    body: Bytes::new(),
                },
            );
        }
        assert!(recent.copies.lock().unwrap().len() <= MAX_COPIES);
        let stale = Copy {
            taken: Instant::now() - FRESH_FOR,
            headers: HeaderMap::new(),
            body: Bytes::new(),
        };
        recent.keep([9; 32], stale);
        assert!(recent.fresh(&[9; 32]).is_none(), "a copy past FRESH_FOR");
    }
}
