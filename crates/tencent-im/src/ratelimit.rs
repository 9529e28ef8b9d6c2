//! Per-key token bucket that makes callers wait for a token instead of failing.
//!
//! Tencent limits each REST API separately (200 calls/s by default), so the client keys the
//! bucket by API path. The bucket holds up to one second's worth of tokens. A caller that
//! finds it empty *reserves* the next token by driving the count negative and sleeps until
//! that token would have been refilled, so concurrent waiters queue in arrival order without
//! a wake-up stampede. Time comes from `tokio::time`, so tests can pause and advance it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    last: Instant,
}

/// A token bucket per key, all with the same rate.
#[derive(Debug)]
pub struct RateLimiter {
    per_second: f64,
    buckets: Mutex<HashMap<&'static str, Bucket>>,
    throttled: AtomicU64,
}

impl RateLimiter {
    /// A limiter admitting `per_second` calls per second per key (at least 1).
    pub fn new(per_second: u32) -> Self {
        RateLimiter {
            per_second: f64::from(per_second.max(1)),
            buckets: Mutex::new(HashMap::new()),
            throttled: AtomicU64::new(0),
        }
    }

    /// Waits until a call for `key` may proceed. Returns whether it had to wait.
    ///
    /// If the returned future is dropped while waiting, its reserved token is not returned;
    /// that under-uses the budget slightly, which is the safe direction.
    pub async fn acquire(&self, key: &'static str) -> bool {
        let wait = self.reserve(key);
        match wait {
            Some(delay) => {
                self.throttled.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(delay).await;
                true
            }
            None => false,
        }
    }

    /// How many calls so far had to wait for a token.
    pub fn throttled(&self) -> u64 {
        self.throttled.load(Ordering::Relaxed)
    }

    fn reserve(&self, key: &'static str) -> Option<Duration> {
        let now = Instant::now();
        // A poisoned lock only means another caller panicked mid-update of plain numbers;
        // the bucket is still usable.
        let mut buckets = self
            .buckets
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        let bucket = buckets.entry(key).or_insert_with(|| Bucket {
            tokens: self.per_second,
            last: now,
        });
        let elapsed = now.saturating_duration_since(bucket.last).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * self.per_second).min(self.per_second);
        bucket.last = now;
        bucket.tokens -= 1.0;
        if bucket.tokens >= 0.0 {
            None
        } else {
            Some(Duration::from_secs_f64(-bucket.tokens / self.per_second))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;

    use super::*;

    /// Lets every runnable task run without advancing the paused clock.
    async fn settle() {
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn calls_beyond_the_limit_wait_instead_of_failing() {
        let limiter = Arc::new(RateLimiter::new(5));
        let done = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..12 {
            let (limiter, done) = (limiter.clone(), done.clone());
            tasks.push(tokio::spawn(async move {
                limiter.acquire("group_open_http_svc/send_group_msg").await;
                done.fetch_add(1, Ordering::SeqCst);
            }));
        }
        settle().await;
        assert_eq!(
            done.load(Ordering::SeqCst),
            5,
            "one second's burst passes at once"
        );

        // Tokens refill every 200ms; at 500ms exactly two waiters have been admitted.
        tokio::time::advance(Duration::from_millis(500)).await;
        settle().await;
        assert_eq!(done.load(Ordering::SeqCst), 7);

        tokio::time::advance(Duration::from_secs(2)).await;
        for task in tasks {
            task.await.expect("acquire task");
        }
        assert_eq!(
            done.load(Ordering::SeqCst),
            12,
            "every call eventually proceeds"
        );
        assert_eq!(limiter.throttled(), 7);
    }

    #[tokio::test(start_paused = true)]
    async fn keys_have_independent_budgets() {
        let limiter = RateLimiter::new(2);
        assert!(!limiter.acquire("a").await);
        assert!(!limiter.acquire("a").await);
        assert!(
            !limiter.acquire("b").await,
            "another api is not throttled by the first"
        );
        assert!(
            limiter.acquire("a").await,
            "third call on the same api waited"
        );
        assert_eq!(limiter.throttled(), 1);
    }
}
