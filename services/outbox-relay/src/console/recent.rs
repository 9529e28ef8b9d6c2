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
//! The answers to one request (a page, a session) are paced once it has a
//! copy, [`PACE`] apart (a held F5 key's rate), and booked at most
//! [`MAX_AHEAD`]: a client reloading with no pause waits its turn instead of
//! making the relay's host answer thousands of loads a second, and a flood
//! in parallel gets 429. An answer whose turn comes after its copy expired
//! is a fresh load.
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
    http::{HeaderMap, HeaderValue, Method, StatusCode, header},
    middleware::Next,
    response::Response,
};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long a copy is served.
pub const FRESH_FOR: Duration = Duration::from_secs(1);
/// Most copies kept (past it, expired ones go first, then all).
pub const MAX_COPIES: usize = 256;
/// Largest page kept (a live page is tens of kilobytes).
pub const MAX_COPY_BYTES: usize = 4 << 20;
/// Shortest time between two answers from one copy: a held F5 key repeats
/// about 30 times a second, so no person waits for it, while a script
/// reloading with no pause is paced to it instead of spending the relay
/// host's CPU (and kernel loopback work, which no thread priority bounds)
/// on thousands of answers a second.
pub const PACE: Duration = Duration::from_millis(33);
/// Furthest ahead an answer from a copy is booked; past it (requests in
/// parallel), 429 with `Retry-After: 1`. Bounds the requests waiting.
pub const MAX_AHEAD: Duration = Duration::from_secs(1);

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
    /// When its latest answer was booked (at first, when it was taken).
    booked: Instant,
    headers: HeaderMap,
    body: Bytes,
}

/// Answers from one copy are booked further than [`MAX_AHEAD`].
#[derive(Debug, PartialEq, Eq)]
struct Busy;

/// When the next answer from a copy whose latest answer was booked at
/// `booked` may go out: [`PACE`] after it, or now.
fn next_slot(booked: Instant, now: Instant) -> Result<Instant, Busy> {
    let slot = (booked + PACE).max(now);
    if slot.duration_since(now) > MAX_AHEAD {
        return Err(Busy);
    }
    Ok(slot)
}

/// The copies, by request.
#[derive(Debug, Default, Clone)]
pub(super) struct Recent {
    copies: Arc<Mutex<HashMap<[u8; 32], Copy>>>,
}

impl Recent {
    /// The map, locked; a lock poisoned by a panic is taken over (the map
    /// only holds copies, each whole or absent).
    fn copies(&self) -> MutexGuard<'_, HashMap<[u8; 32], Copy>> {
        self.copies
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// Books the next answer to `key`'s request: when it may go out, or
    /// [`Busy`]. A request with no copy yet (a first load) goes at once.
    fn book(&self, key: &[u8; 32]) -> Result<Instant, Busy> {
        let mut copies = self.copies();
        let now = Instant::now();
        let Some(copy) = copies.get_mut(key) else {
            return Ok(now);
        };
        let slot = next_slot(copy.booked, now)?;
        copy.booked = slot;
        Ok(slot)
    }

    fn fresh(&self, key: &[u8; 32]) -> Option<Copy> {
        let copies = self.copies();
        copies
            .get(key)
            .filter(|copy| copy.taken.elapsed() < FRESH_FOR)
            .cloned()
    }

    /// Keeps `copy` as `key`'s, with the answers already booked on the
    /// copy it replaces.
    fn keep(&self, key: [u8; 32], mut copy: Copy) {
        let mut copies = self.copies();
        if let Some(replaced) = copies.get(&key) {
            copy.booked = copy.booked.max(replaced.booked);
        }
        if copies.len() >= MAX_COPIES {
            copies.retain(|_, kept| kept.taken.elapsed() < FRESH_FOR);
            if copies.len() >= MAX_COPIES {
                copies.clear();
            }
        }
        copies.insert(key, copy);
    }

    fn forget_all(&self) {
        self.copies().clear();
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

/// The middleware: live GETs paced, then answered from a fresh copy (after
/// the session check; without a copy the page's handler checks it); every
/// other method drops the copies once it has run.
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
    let Ok(slot) = console.recent.book(&key) else {
        if let Err(refusal) = console.session(request.headers(), client).await {
            return refusal;
        }
        return too_many();
    };
    tokio::time::sleep_until(slot.into()).await;
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
            let now = Instant::now();
            let copy = Copy {
                taken: now,
                booked: now,
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

/// The answer to a request whose answers are booked too far ahead.
fn too_many() -> Response {
    let mut response = super::plain(
        StatusCode::TOO_MANY_REQUESTS,
        "this page is being reloaded faster than 30 times a second; retry in a second",
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
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
                    booked: Instant::now(),
                    headers: HeaderMap::new(),
                    body: Bytes::new(),
                },
            );
        }
        assert!(recent.copies.lock().unwrap().len() <= MAX_COPIES);
        let stale = Copy {
            taken: Instant::now() - FRESH_FOR,
            booked: Instant::now() - FRESH_FOR,
            headers: HeaderMap::new(),
            body: Bytes::new(),
        };
        recent.keep([9; 32], stale);
        assert!(recent.fresh(&[9; 32]).is_none(), "a copy past FRESH_FOR");
    }

    #[test]
    fn answers_from_a_copy_are_paced_and_booked_at_most_a_second_ahead() {
        let now = Instant::now();
        // Long after the last answer: at once.
        assert_eq!(next_slot(now - PACE * 2, now), Ok(now));
        // Right after it: PACE after it.
        assert_eq!(next_slot(now, now), Ok(now + PACE));
        // Back to back, each booked PACE after the one before, until the
        // next would be more than MAX_AHEAD away.
        let mut booked = now;
        let mut answers = 0;
        while let Ok(slot) = next_slot(booked, now) {
            assert_eq!(slot, booked + PACE);
            booked = slot;
            answers += 1;
        }
        assert_eq!(answers, MAX_AHEAD.as_millis() / PACE.as_millis());
        assert_eq!(next_slot(booked, now), Err(Busy));
        // Once time has caught up, answers are booked again.
        assert!(next_slot(booked, booked).is_ok());
    }
}
