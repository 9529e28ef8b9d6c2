//! Login throttling: after [`CLIENT_LIMIT`] wrong tokens from one client
//! address within [`WINDOW_MS`], or [`GLOBAL_LIMIT`] from everyone, every
//! further attempt — the right token included, so guessing cannot go on by
//! testing each guess after the lock — is refused with 429 and
//! `Retry-After` until that window has passed.
//!
//! State is per process (each replica throttles what it sees) and bounded:
//! at most [`MAX_CLIENTS`] addresses are tracked; a new one first drops the
//! expired entries, then evicts the oldest window. An attacker who rotates
//! addresses to evict their own entries still meets the global limit.

use crate::metrics::ConsoleMetrics;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;

/// Wrong tokens one address may present within a window.
pub const CLIENT_LIMIT: u32 = 5;
/// Wrong tokens all addresses together may present within a window.
pub const GLOBAL_LIMIT: u32 = 100;
/// The window: 5 minutes from an address's first failure.
pub const WINDOW_MS: i64 = 5 * 60_000;
/// Most addresses tracked at once.
pub const MAX_CLIENTS: usize = 4_096;

/// Failures within one window.
#[derive(Debug, Clone, Copy)]
struct Window {
    started_ms: i64,
    failures: u32,
}

impl Window {
    fn live(self, now_ms: i64) -> bool {
        now_ms < self.started_ms + WINDOW_MS
    }

    /// Seconds until the window ends, at least 1 (a `Retry-After` of 0
    /// would invite an immediate retry).
    fn retry_after_secs(self, now_ms: i64) -> u64 {
        let left = (self.started_ms + WINDOW_MS - now_ms).max(0);
        u64::try_from((left + 999) / 1_000).unwrap_or(1).max(1)
    }
}

#[derive(Debug, Default)]
struct State {
    clients: HashMap<Option<IpAddr>, Window>,
    global: Option<Window>,
}

/// The throttle shared by the console's login, its bearer header and
/// `/admin/*`.
#[derive(Debug, Default)]
pub struct LoginThrottle {
    state: Mutex<State>,
    metrics: ConsoleMetrics,
}

impl LoginThrottle {
    /// A throttle counting into `metrics`.
    pub fn new(metrics: ConsoleMetrics) -> Self {
        Self {
            state: Mutex::default(),
            metrics,
        }
    }

    /// `Err(retry_after_secs)` while `client` (None: address unknown) or
    /// everyone is over the limit; counted as throttled.
    pub fn check(&self, client: Option<IpAddr>, now_ms: i64) -> Result<(), u64> {
        let state = self.lock();
        let over = |window: Option<&Window>, limit| {
            window
                .filter(|window| window.live(now_ms) && window.failures >= limit)
                .map(|window| window.retry_after_secs(now_ms))
        };
        let wait = over(state.clients.get(&client), CLIENT_LIMIT)
            .into_iter()
            .chain(over(state.global.as_ref(), GLOBAL_LIMIT))
            .max();
        match wait {
            Some(secs) => {
                self.metrics.logins_throttled.inc();
                Err(secs)
            }
            None => Ok(()),
        }
    }

    /// Records a wrong token from `client`.
    pub fn failed(&self, client: Option<IpAddr>, now_ms: i64) {
        self.metrics.login_failures.inc();
        let mut state = self.lock();
        let global = state.global.filter(|window| window.live(now_ms));
        state.global = Some(bump(global, now_ms));
        if !state.clients.contains_key(&client) && state.clients.len() >= MAX_CLIENTS {
            make_room(&mut state.clients, now_ms);
        }
        let current = state
            .clients
            .get(&client)
            .copied()
            .filter(|window| window.live(now_ms));
        state.clients.insert(client, bump(current, now_ms));
    }

    /// Records a right token from `client`: its failures are forgiven.
    pub fn succeeded(&self, client: Option<IpAddr>) {
        self.lock().clients.remove(&client);
    }

    /// Addresses tracked now (bounded by [`MAX_CLIENTS`]).
    pub fn tracked(&self) -> usize {
        self.lock().clients.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // The state stays consistent between statements; a panic elsewhere
        // while holding the lock does not make it unusable.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn bump(window: Option<Window>, now_ms: i64) -> Window {
    match window {
        Some(window) => Window {
            failures: window.failures.saturating_add(1),
            ..window
        },
        None => Window {
            started_ms: now_ms,
            failures: 1,
        },
    }
}

/// Drops expired windows; when none were, the oldest one.
fn make_room(clients: &mut HashMap<Option<IpAddr>, Window>, now_ms: i64) {
    clients.retain(|_, window| window.live(now_ms));
    if clients.len() < MAX_CLIENTS {
        return;
    }
    if let Some(oldest) = clients
        .iter()
        .min_by_key(|(_, window)| window.started_ms)
        .map(|(client, _)| *client)
    {
        clients.remove(&oldest);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> Option<IpAddr> {
        Some(IpAddr::from([10, 0, 0, last]))
    }

    #[test]
    fn a_client_is_throttled_until_its_window_passes() {
        let throttle = LoginThrottle::default();
        for _ in 0..CLIENT_LIMIT {
            assert_eq!(throttle.check(ip(1), 1_000), Ok(()));
            throttle.failed(ip(1), 1_000);
        }
        assert_eq!(throttle.check(ip(1), 2_000), Err(299));
        assert_eq!(throttle.check(ip(2), 2_000), Ok(()), "others are not");
        assert_eq!(throttle.check(ip(1), 1_000 + WINDOW_MS), Ok(()));
        assert_eq!(throttle.metrics.login_failures.get(), 5);
        assert_eq!(throttle.metrics.logins_throttled.get(), 1);
    }

    #[test]
    fn the_global_limit_holds_across_addresses_and_the_table_is_bounded() {
        let throttle = LoginThrottle::default();
        for index in 0..GLOBAL_LIMIT {
            throttle.failed(Some(IpAddr::from(index.to_be_bytes())), 0);
        }
        assert!(throttle.check(ip(200), 1).is_err());
        for index in 0..(MAX_CLIENTS as u32 + 50) {
            throttle.failed(Some(IpAddr::from((index + 1_000).to_be_bytes())), 10);
        }
        assert_eq!(throttle.tracked(), MAX_CLIENTS);
        throttle.succeeded(Some(IpAddr::from(1_001u32.to_be_bytes())));
        assert_eq!(throttle.tracked(), MAX_CLIENTS - 1);
    }
}
