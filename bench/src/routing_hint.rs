//! Scenario `scale-out-routing-hint`: what following the routing hint saves.
//! The `scale-out-mixed` workload through three in-process instances twice,
//! each on a fresh cluster: once with every call to a seeded random instance
//! (the baseline), once sending each room's calls to the address its last
//! reply named in `x-room-served-by-address` (random while none is known).
//! Reported for both: the share of calls the receiving instance forwarded
//! (`x-room-served-by` names another node than the one called), p50/p99 of
//! all calls and commands/s. A build that does not send the header routes
//! the second run at random too; the note counts the replies that carried it.

use crate::{
    fixtures::BenchEnv,
    report::{Report, Row},
    room_load::{MIXED_SEED, MixedOutcome, Routing, millis_at},
    scale_out_scenarios::mixed_on,
};

/// Runs both routings and adds their rows.
pub async fn routing_hint(env: &BenchEnv, report: &mut Report) -> anyhow::Result<()> {
    let (rooms, seconds) = if env.smoke { (64, 1) } else { (1_000, 10) };
    println!("scale-out-routing-hint: {rooms} rooms, {seconds}s on 3 instances, random vs hint");
    let random = mixed_on(env, 3, rooms, seconds, Routing::Random, None).await?;
    let hinted = mixed_on(env, 3, rooms, seconds, Routing::Hint, None).await?;
    let share = |outcome: &MixedOutcome| {
        outcome.forwarded.len() as f64 * 100.0 / outcome.all.len().max(1) as f64
    };
    let note = |outcome: &MixedOutcome| {
        format!(
            "p50 {:.1} ms, p99 {:.1} ms, {:.0} commands/s; {} of {} replies carried \
             x-room-served-by-address",
            millis_at(&outcome.all, 0.5),
            millis_at(&outcome.all, 0.99),
            outcome.rate,
            outcome.with_address,
            outcome.all.len()
        )
    };
    report.add(Row {
        scenario: "routing, random instance".into(),
        metric: "% forwarded".into(),
        measured: share(&random),
        target: None,
        baseline: None,
        ratio: None,
        pass: None,
        note: format!("seed {MIXED_SEED:#x}; {}", note(&random)),
    });
    report.add(Row {
        scenario: "routing, follow the hint".into(),
        metric: "% forwarded".into(),
        measured: share(&hinted),
        target: None,
        baseline: Some(share(&random)),
        ratio: (share(&random) > 0.0).then(|| share(&hinted) / share(&random)),
        pass: None,
        note: format!("baseline: random instance; {}", note(&hinted)),
    });
    for (quantile, metric) in [(0.5, "p50 ms"), (0.99, "p99 ms")] {
        let (measured, baseline) = (
            millis_at(&hinted.all, quantile),
            millis_at(&random.all, quantile),
        );
        report.add(Row {
            scenario: "routing, follow the hint".into(),
            metric: metric.into(),
            measured,
            target: None,
            baseline: Some(baseline),
            ratio: (baseline > 0.0).then(|| measured / baseline),
            pass: None,
            note: "every command; baseline: random instance".into(),
        });
    }
    Ok(())
}
