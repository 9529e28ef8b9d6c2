//! The images as built by deploy/Dockerfile: the `runtime` target (the one
//! Kubernetes runs) holds exactly the five services and no curl, the fakes
//! live in the `fakes` target, and compose's healthchecks use `hyapp-probe`
//! (deploy/probe.sh, which both images carry) rather than a tool the
//! production image does not have.

use serde_json::Value;
use std::collections::BTreeSet;

/// The binaries the production image must hold, and nothing else.
pub const SERVICES: [&str; 5] = [
    "room-service",
    "outbox-relay",
    "activity-consumer",
    "im-bridge",
    "notice-consumer",
];

/// The fakes, built into the `fakes` target only.
pub const FAKES: [&str; 2] = ["fake-wallet", "fake-tencent-im"];

/// The lines of the Dockerfile stage `FROM … AS name`, continuation lines joined.
fn stage(dockerfile: &str, name: &str) -> Option<Vec<String>> {
    let joined = dockerfile.replace("\\\n", " ");
    let mut lines = joined.lines().map(str::trim);
    let header = |line: &str| line.starts_with("FROM ") && line.ends_with(&format!(" AS {name}"));
    lines.by_ref().find(|line| header(line))?;
    Some(
        lines
            .take_while(|line| !line.starts_with("FROM "))
            .map(str::to_owned)
            .collect(),
    )
}

/// Binaries named by the stage's `COPY --from=builder` lines (`/out/<name>`).
fn copied_binaries(lines: &[String]) -> BTreeSet<String> {
    lines
        .iter()
        .filter(|line| line.starts_with("COPY --from=builder"))
        .flat_map(|line| line.split_whitespace())
        .filter_map(|word| word.strip_prefix("/out/"))
        .filter(|name| !name.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Every problem of the Dockerfile's targets and compose's use of them.
pub fn check_images(dockerfile: &str, compose: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    for line in dockerfile.replace("\\\n", " ").lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.contains(&"install") && words.contains(&"curl") {
            problems.push("Dockerfile: an image installs curl".into());
        }
    }
    let expect =
        |name: &str, wanted: &[&str], problems: &mut Vec<String>| match stage(dockerfile, name) {
            None => problems.push(format!("Dockerfile: no `{name}` target")),
            Some(lines) => {
                let copied = copied_binaries(&lines);
                let wanted: BTreeSet<String> =
                    wanted.iter().map(|name| (*name).to_owned()).collect();
                if copied != wanted {
                    problems.push(format!(
                        "Dockerfile: the `{name}` target holds {copied:?}, expected {wanted:?}"
                    ));
                }
            }
        };
    expect("runtime", &SERVICES, &mut problems);
    expect("fakes", &FAKES, &mut problems);
    let last = dockerfile
        .lines()
        .rev()
        .find(|line| line.starts_with("FROM "));
    if !last.is_some_and(|line| line.ends_with(" AS runtime")) {
        problems.push("Dockerfile: `runtime` must be the last (default) target".into());
    }
    if !dockerfile.contains("deploy/probe.sh /usr/local/bin/hyapp-probe") {
        problems.push("Dockerfile: hyapp-probe (deploy/probe.sh) is not installed".into());
    }
    let services = compose.get("services").and_then(Value::as_object);
    for (name, service) in services.into_iter().flatten() {
        let target = service.pointer("/build/target").and_then(Value::as_str);
        let wanted = if FAKES.contains(&name.as_str()) {
            Some("fakes")
        } else if SERVICES.contains(&name.as_str()) {
            Some("runtime")
        } else {
            None
        };
        if wanted.is_some() && target != wanted {
            problems.push(format!(
                "compose: {name} builds target {target:?}, expected {wanted:?}"
            ));
        }
        let test = service.pointer("/healthcheck/test").map(Value::to_string);
        if wanted.is_some()
            && test
                .as_deref()
                .is_some_and(|test| !test.contains("hyapp-probe"))
        {
            problems.push(format!(
                "compose: {name}'s healthcheck must use hyapp-probe (the images have no curl)"
            ));
        }
    }
    problems
}
