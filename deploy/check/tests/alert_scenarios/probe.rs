//! Reading the services' own metrics while a scenario runs, and keeping
//! an activity going until the scrapes are taken.

use super::stack::Stack;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// How long a scenario waits for the services to show its break.
const WAIT: Duration = Duration::from_secs(90);

/// Values of `name` in `job`'s current scrape (empty when it fails).
pub async fn values(stack: &Stack, job: &str, name: &str) -> Vec<f64> {
    let Some(addr) = stack.targets.get(job) else {
        return Vec::new();
    };
    let text = Stack::scrape(*addr).await.unwrap_or_default();
    deploy_check::alert_eval::parse_exposition(&text)
        .unwrap_or_default()
        .into_iter()
        .filter(|sample| sample.name == name)
        .map(|sample| sample.value)
        .collect()
}

/// The sum of `name` over its label sets in `job`'s current scrape.
pub async fn total(stack: &Stack, job: &str, name: &str) -> f64 {
    values(stack, job, name).await.iter().sum()
}

/// Polls `condition` until it holds; panics naming `what` after [`WAIT`].
pub async fn until<F, Fut>(what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + WAIT;
    while !condition().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Runs `step` every `every` until the returned token is cancelled.
pub fn keep_doing<F, Fut>(every: Duration, mut step: F) -> CancellationToken
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let token = CancellationToken::new();
    let stop = token.clone();
    tokio::spawn(async move {
        while !stop.is_cancelled() {
            step().await;
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = tokio::time::sleep(every) => {}
            }
        }
    });
    token
}
