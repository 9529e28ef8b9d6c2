//! Scenario `gateway-auth`: what authenticating room-service's callers
//! costs (docs/design.md#who-may-call).
//!
//! - The `scale-out-mixed` workload through three in-process instances with
//!   random routing, once in plaintext (the baseline) and once behind mutual
//!   TLS with certificate identities, the forwarded calls included:
//!   commands/s and p50/p99 of every call.
//! - Verifying the gateway's user assertion (an Ed25519 JWT checked against
//!   a JWKS, issuer, audience, expiry and the acting user): µs per call on
//!   one core, over distinct tokens.
//!
//! Figures only: nothing here asserts a timing.

use std::time::Instant;

use room_service::auth::{AssertionVerifier, Caller};
use room_service::config::UserAssertionConfig;
use testkit::assertions::{AUDIENCE, AssertionSigner, ISSUER};

use crate::{
    fixtures::BenchEnv,
    report::{Report, Row},
    room_load::{MIXED_SEED, MixedOutcome, Routing, millis_at},
    scale_out_scenarios::mixed_on,
    security::Security,
};

/// Runs both parts and adds their rows.
pub async fn gateway_auth(env: &BenchEnv, report: &mut Report) -> anyhow::Result<()> {
    let (rooms, seconds, tokens) = if env.smoke {
        (64, 1, 200)
    } else {
        (1_000, 10, 20_000)
    };
    println!("gateway-auth: {rooms} rooms, {seconds}s on 3 instances, plaintext vs mutual TLS");
    let plain = mixed_on(env, 3, rooms, seconds, Routing::Random, None).await?;
    let security = Security::generate();
    let secured = mixed_on(env, 3, rooms, seconds, Routing::Random, Some(&security)).await?;
    let note = |outcome: &MixedOutcome| {
        format!(
            "p50 {:.1} ms, p99 {:.1} ms, {} calls",
            millis_at(&outcome.all, 0.5),
            millis_at(&outcome.all, 0.99),
            outcome.all.len()
        )
    };
    report.add(Row {
        scenario: "gateway-auth, plaintext".into(),
        metric: "commands/s".into(),
        measured: plain.rate,
        target: None,
        baseline: None,
        ratio: None,
        pass: None,
        note: format!("seed {MIXED_SEED:#x}, random routing; {}", note(&plain)),
    });
    report.add(ratio_row(
        "commands/s",
        secured.rate,
        plain.rate,
        note(&secured),
    ));
    for (quantile, metric) in [(0.5, "p50 ms"), (0.99, "p99 ms")] {
        let (measured, baseline) = (
            millis_at(&secured.all, quantile),
            millis_at(&plain.all, quantile),
        );
        report.add(ratio_row(metric, measured, baseline, "every call".into()));
    }
    report.add(assertion_row(&security, tokens)?);
    Ok(())
}

fn ratio_row(metric: &str, measured: f64, baseline: f64, note: String) -> Row {
    Row {
        scenario: "gateway-auth, mutual TLS".into(),
        metric: metric.into(),
        measured,
        target: None,
        baseline: Some(baseline),
        ratio: (baseline > 0.0).then(|| measured / baseline),
        pass: None,
        note: format!("baseline: plaintext; identities checked on every call; {note}"),
    }
}

/// µs per assertion verified (and checked against its acting user), over
/// `tokens` distinct tokens on one core.
fn assertion_row(security: &Security, tokens: usize) -> anyhow::Result<Row> {
    let signer = AssertionSigner::generate(&security.pki.dir, "bench-gateway");
    let verifier = AssertionVerifier::load(&UserAssertionConfig {
        jwks_file: signer.jwks.display().to_string(),
        issuer: ISSUER.into(),
        audience: AUDIENCE.into(),
        ..UserAssertionConfig::default()
    })?;
    let minted: Vec<(String, String)> = (0..tokens)
        .map(|user| {
            let user = format!("user-{user}");
            let token = signer.assertion(&user, AUDIENCE, 600);
            (user, token)
        })
        .collect();
    let started = Instant::now();
    for (user, token) in &minted {
        let caller = Caller {
            user: Some(verifier.subject(token)?),
        };
        caller.may_act_as(Some(user))?;
    }
    let micros = started.elapsed().as_secs_f64() * 1e6 / tokens as f64;
    Ok(Row {
        scenario: "gateway-auth, user assertion".into(),
        metric: "µs per call".into(),
        measured: micros,
        target: None,
        baseline: None,
        ratio: None,
        pass: None,
        note: format!(
            "Ed25519 JWT: signature, iss, aud, exp, sub = acting user; {tokens} distinct tokens, one core ({:.0} calls/s)",
            1e6 / micros.max(f64::MIN_POSITIVE)
        ),
    })
}
