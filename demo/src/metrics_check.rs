//! The metrics line of the report: every service named by `--metrics
//! NAME=URL=METRIC` is scraped and must export its metric after the session.

use crate::checks::{Check, named};

/// Scrapes each service's `/metrics` and checks the Prometheus text carries
/// the metric that service must export after the session.
pub async fn check(http: &reqwest::Client, targets: &[String]) -> Check {
    let mut missing = Vec::new();
    let mut scraped = Vec::new();
    for target in targets {
        let mut parts = target.splitn(3, '=');
        let (Some(name), Some(url), Some(metric)) = (parts.next(), parts.next(), parts.next())
        else {
            missing.push(format!("bad --metrics `{target}`"));
            continue;
        };
        let body = match http.get(url).send().await {
            Ok(response) if response.status().is_success() => {
                response.text().await.unwrap_or_default()
            }
            Ok(response) => {
                missing.push(format!("{name}: HTTP {}", response.status()));
                continue;
            }
            Err(error) => {
                missing.push(format!("{name}: {error}"));
                continue;
            }
        };
        let has_metric = body
            .lines()
            .any(|line| !line.starts_with('#') && line.starts_with(metric));
        if has_metric {
            scraped.push(format!("{name}:{metric}"));
        } else {
            missing.push(format!("{name}: no {metric}"));
        }
    }
    named(
        "every service exports Prometheus metrics",
        missing.is_empty(),
        if missing.is_empty() {
            scraped.join(", ")
        } else {
            missing.join("; ")
        },
    )
}
