//! Every alert of `deploy/prometheus/alerts.yml`, evaluated by promtool
//! against real scrapes of the running services: once in a scenario that
//! must fire it, and at least once where it must stay quiet.
//!
//! Each scenario starts the platform in-process (`stack`), drives a room
//! session through it, breaks one thing (a service stopped, failed rows, IM
//! refusing, a malformed message, the relay cut off from the broker...),
//! waits until the services' own gauges show the break, scrapes every
//! target twice and asks promtool which alerts fire when that state goes on
//! (`deploy_check::alert_eval`). Its expectation lists the alerts it must
//! fire; every other alert must stay quiet in it. The test fails when an
//! alert of alerts.yml is fired by no scenario, so a new alert needs a
//! scenario. It prints the table alert → scenario that fired it.
//!
//! promtool comes from Debian's `prometheus` package, which `cargo xtask
//! test` installs when missing (`HYAPP_TEST_PROMTOOL` names it).

mod alert_scenarios {
    pub mod faults;
    pub mod planted;
    pub mod probe;
    pub mod scenarios;
    pub mod stack;
}

use alert_scenarios::{faults, scenarios, scenarios::Scenario, stack::Stack};
use deploy_check::alert_eval::{self, Target};
use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    process::Command,
    sync::Arc,
};
use tokio::{sync::Semaphore, task::JoinSet};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn promtool() -> String {
    std::env::var("HYAPP_TEST_PROMTOOL").unwrap_or_else(|_| "promtool".into())
}

/// Alerts no scenario can produce against the test broker, each with why.
/// Their expressions are still evaluated by promtool, on a series shaped like
/// the metric the runtime exports (rising once, and flat); an entry here is a
/// stated gap in the end-to-end coverage, so keep the list short.
const WITHOUT_SCENARIO: &[(&str, &str)] = &[(
    "ConsumerOffsetGapUnrepaired",
    "it needs records deleted from under a running, back-pressured consumer \
     (broker retention); Tansu 0.6 has no retention on demand. The runtime's \
     side — a gap that survives every look-back counts once — is tested in \
     consumer-runtime's offset_gap tests",
)];

fn without_scenario(alert: &str) -> Option<&'static str> {
    WITHOUT_SCENARIO
        .iter()
        .find(|(name, _)| *name == alert)
        .map(|(_, why)| *why)
}

/// The alerts of [`WITHOUT_SCENARIO`], evaluated by promtool on the metric
/// their expression reads: firing when it rose, quiet when flat.
#[test]
fn alerts_without_a_scenario_fire_on_their_metric() {
    let alerts = alert_names();
    for (alert, why) in WITHOUT_SCENARIO {
        assert!(
            alerts.iter().any(|known| known == alert),
            "WITHOUT_SCENARIO names {alert}, which alerts.yml does not define"
        );
        for rises in [true, false] {
            let fires = if rises {
                BTreeSet::from([(*alert).to_string()])
            } else {
                BTreeSet::new()
            };
            let name = format!("{alert} counter rises {rises}");
            let (mismatched, report) = evaluate(
                &name,
                &[counter_target(rises)],
                60.0,
                &[(*alert).to_string()],
                &fires,
            );
            assert!(
                mismatched.is_empty(),
                "{alert} ({why}): unexpected verdict when the counter rises={rises}\n{report}"
            );
        }
    }
}

/// An im-bridge target whose `consumer_offset_gaps_unrepaired_total` rose
/// by one between its two scrapes (`rises`) or stayed at zero.
fn counter_target(rises: bool) -> Target {
    let group = outbox_schema::groups::IM_BRIDGE.group;
    let scrape = |value: u8| {
        Some(
            alert_eval::parse_exposition(&format!(
                "# TYPE consumer_offset_gaps_unrepaired counter\n\
                 consumer_offset_gaps_unrepaired_total{{consumer_group=\"{group}\"}} {value}\n"
            ))
            .expect("exposition"),
        )
    };
    Target {
        job: "im-bridge".into(),
        instance: "127.0.0.1:7401".into(),
        scrapes: [scrape(0), scrape(u8::from(rises))],
    }
}

fn alert_names() -> Vec<String> {
    let text = std::fs::read_to_string(root().join("deploy/prometheus/alerts.yml")).unwrap();
    let alerts = deploy_check::yaml::parse_one(&text).unwrap();
    let mut names = Vec::new();
    for group in alerts["groups"].as_array().expect("groups") {
        for rule in group["rules"].as_array().expect("rules") {
            if let Some(name) = rule["alert"].as_str() {
                names.push(name.to_string());
            }
        }
    }
    names
}

/// Scrapes every listed target, `None` where the scrape fails.
async fn scrape_all(stack: &Stack) -> BTreeMap<&'static str, Option<Vec<alert_eval::Sample>>> {
    let mut scrapes = BTreeMap::new();
    for (job, addr) in &stack.targets {
        let text = Stack::scrape(*addr).await;
        let samples = text.map(|text| alert_eval::parse_exposition(&text).expect("exposition"));
        scrapes.insert(*job, samples);
    }
    scrapes
}

/// Runs promtool on `targets`; returns the alerts whose verdict differed
/// from `fires` (must fire) / the rest (must stay quiet), with its report.
fn evaluate(
    name: &str,
    targets: &[Target],
    seconds_apart: f64,
    alerts: &[String],
    fires: &BTreeSet<String>,
) -> (Vec<String>, String) {
    let series = alert_eval::input_series(targets, seconds_apart);
    let verdicts: Vec<(String, bool)> = alerts
        .iter()
        .map(|alert| (alert.clone(), fires.contains(alert)))
        .collect();
    let dir = root().join("target/alert-scenarios");
    std::fs::create_dir_all(&dir).unwrap();
    let rules = root().join("deploy/prometheus/alerts.yml");
    let slug: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let file = dir.join(format!("{slug}.yml"));
    std::fs::write(
        &file,
        alert_eval::rule_test_file(rules.to_str().unwrap(), &series, &verdicts),
    )
    .unwrap();
    let output = Command::new(promtool())
        .args(["test", "rules"])
        .arg(&file)
        .output()
        .unwrap_or_else(|error| {
            panic!(
                "cannot run {} ({error}); `cargo xtask test` installs it",
                promtool()
            )
        });
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let mismatched = alert_eval::mismatched_alerts(&report);
    assert!(
        output.status.success() || !mismatched.is_empty(),
        "promtool failed on {}:\n{report}",
        file.display()
    );
    (mismatched, report)
}

/// Scenarios that run at the same time. Each has a platform of its own (its
/// database, Redis prefix, topic namespace, consumer groups and fakes), so
/// they cannot see each other; most of a scenario is waiting for gauges to
/// refresh ([`faults::await_second_scrape`]), which overlaps. Four stacks
/// stay well inside MariaDB's default 151 connections (about 20 each).
const CONCURRENT_SCENARIOS: usize = 4;

/// Runs `scenario` on a stack of its own: a healthy session, the break, two
/// scrapes of every target and promtool's verdict. `Some` names the alerts
/// whose verdict differed, with promtool's report.
async fn run_scenario(scenario: &Scenario, alerts: &[String]) -> Option<String> {
    let fires: BTreeSet<String> = scenario.fires.iter().map(|a| a.to_string()).collect();
    eprintln!("scenario {:?} starts", scenario.name);
    let mut stack = Stack::start(&scenario.setup()).await;
    faults::healthy_session(&stack, !scenario.relay_cut_off()).await;
    let continuing = faults::induce(scenario, &mut stack).await;
    let first_backlog = faults::backlog(&stack).await;
    let first = scrape_all(&stack).await;
    let started = std::time::Instant::now();
    faults::await_second_scrape(scenario, &stack, &first_backlog).await;
    let second = scrape_all(&stack).await;
    let seconds_apart = started.elapsed().as_secs_f64();
    continuing.cancel();
    let mut targets = Vec::new();
    for (job, addr) in &stack.targets {
        targets.push(Target {
            job: job.to_string(),
            instance: addr.to_string(),
            scrapes: [first[job].clone(), second[job].clone()],
        });
    }
    stack.stop_all().await;
    let (mismatched, report) = evaluate(scenario.name, &targets, seconds_apart, alerts, &fires);
    eprintln!("scenario {:?} done", scenario.name);
    (!mismatched.is_empty()).then(|| {
        format!(
            "scenario {:?}: unexpected verdicts for {mismatched:?}\n{report}",
            scenario.name
        )
    })
}

/// Every scenario's verdicts, [`CONCURRENT_SCENARIOS`] at a time, in the
/// order of [`scenarios::SCENARIOS`]. A scenario that panics (a break the
/// services never showed) fails the test with its own message.
async fn run_all(alerts: &Arc<Vec<String>>) -> Vec<Option<String>> {
    let slots = Arc::new(Semaphore::new(CONCURRENT_SCENARIOS));
    let mut running = JoinSet::new();
    for (index, scenario) in scenarios::SCENARIOS.iter().enumerate() {
        let (alerts, slots) = (Arc::clone(alerts), Arc::clone(&slots));
        running.spawn(async move {
            let _slot = slots.acquire_owned().await.expect("slots stay open");
            (index, run_scenario(scenario, &alerts).await)
        });
    }
    let mut verdicts = vec![None; scenarios::SCENARIOS.len()];
    while let Some(finished) = running.join_next().await {
        match finished {
            Ok((index, verdict)) => verdicts[index] = verdict,
            Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
            Err(error) => panic!("scenario task: {error}"),
        }
    }
    verdicts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_alert_fires_in_its_scenario_and_stays_quiet_elsewhere() {
    let alerts = alert_names();
    let mut fired_by: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    let mut quiet_in: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for scenario in scenarios::SCENARIOS {
        let fires: BTreeSet<String> = scenario.fires.iter().map(|a| a.to_string()).collect();
        for alert in &fires {
            assert!(
                alerts.contains(alert),
                "scenario {:?} expects {alert}, which alerts.yml does not define",
                scenario.name
            );
        }
        for alert in &alerts {
            let table = if fires.contains(alert) {
                &mut fired_by
            } else {
                &mut quiet_in
            };
            table.entry(alert.clone()).or_default().push(scenario.name);
        }
    }
    let alerts = Arc::new(alerts);
    let failures: Vec<String> = run_all(&alerts).await.into_iter().flatten().collect();
    println!("{:<36} scenario that fired it", "alert");
    for alert in alerts.iter() {
        let scenarios = fired_by.get(alert).map_or_else(
            || match without_scenario(alert) {
                Some(_) => {
                    "no scenario: alerts_without_a_scenario_fire_on_their_metric".to_string()
                }
                None => "NONE".to_string(),
            },
            |names| names.join(", "),
        );
        println!("{alert:<36} {scenarios}");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    let unfired: Vec<&String> = alerts
        .iter()
        .filter(|alert| !fired_by.contains_key(*alert) && without_scenario(alert).is_none())
        .collect();
    let never_quiet: Vec<&String> = alerts
        .iter()
        .filter(|alert| !quiet_in.contains_key(*alert) && without_scenario(alert).is_none())
        .collect();
    assert!(
        unfired.is_empty(),
        "alerts no scenario fires (add a scenario in tests/alert_scenarios/scenarios.rs): {unfired:?}"
    );
    assert!(
        never_quiet.is_empty(),
        "alerts never quiet: {never_quiet:?}"
    );
}
