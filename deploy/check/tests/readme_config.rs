//! Keeps the configuration reference (docs/configuration.md) true for all
//! five services.
//!
//! Each service's keys are taken from two places: the serialized `Default` of
//! its real config type (a dev-dependency; also the source of the documented
//! defaults) and what its binary prints with
//! `--config services/<svc>/configs/<svc>.yaml --dump-config`. The binaries
//! belong to other packages, so no `CARGO_BIN_EXE_*` exists for them here: the
//! test runs `cargo build --workspace --bins --examples` (the `cargo` running
//! the test, the workspace's target directory, honouring `CARGO_TARGET_DIR`)
//! and takes their paths from cargo's JSON messages, so it never runs a stale
//! or missing binary. Both directions are asserted (every key documented for
//! the service, every documented key real), documented defaults are compared
//! with the built-in ones, and the environment table is exercised: each
//! documented prefix must override `http_listen`, and each list key must take
//! a comma-separated value exactly when the reference says so.
//!
//! The `*_is_caught` tests feed a deliberately wrong reference and expect the
//! problem named.

use deploy_check::readme::{self, Reference};
use deploy_check::readme_keys;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

const SERVICES: [&str; 5] = [
    "room-service",
    "outbox-relay",
    "im-bridge",
    "activity-consumer",
    "notice-consumer",
];

/// Bounds one `--dump-config` run: a binary that ignores the flag would start
/// the service and never exit. It bounds a wait, it synchronises nothing.
const RUN_GUARD: Duration = Duration::from_secs(60);

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn reference_text() -> String {
    deploy_check::source::read(&root().join(readme::PATH)).unwrap()
}

fn defaults(service: &str) -> Value {
    let value = match service {
        "room-service" => serde_json::to_value(room_service::Config::default()),
        "outbox-relay" => serde_json::to_value(outbox_relay::config::RelayServiceConfig::default()),
        "im-bridge" => serde_json::to_value(im_bridge::config::Config::default()),
        "activity-consumer" => serde_json::to_value(activity_consumer::config::Config::default()),
        "notice-consumer" => serde_json::to_value(notice_consumer::config::Config::default()),
        other => panic!("unknown service {other}"),
    };
    value.unwrap()
}

fn parse(text: &str) -> Reference {
    readme::parse(text, &SERVICES)
        .unwrap_or_else(|problems| panic!("{}:\n  {}", readme::PATH, problems.join("\n  ")))
}

/// Key and default problems of `reference` against `actual` keys per service.
fn problems(reference: &Reference, actual: &BTreeMap<&str, BTreeSet<String>>) -> Vec<String> {
    let mut problems = Vec::new();
    for service in SERVICES {
        problems.extend(readme_keys::check_keys(
            service,
            &reference.paths(service),
            &actual[service],
        ));
        let rows = reference.keys.get(service).cloned().unwrap_or_default();
        problems.extend(readme_keys::check_defaults(
            service,
            &rows,
            &defaults(service),
        ));
    }
    problems
}

/// Every service's keys according to its `Default`.
fn default_keys() -> BTreeMap<&'static str, BTreeSet<String>> {
    SERVICES
        .into_iter()
        .map(|service| (service, readme_keys::config_paths(&defaults(service))))
        .collect()
}

fn assert_clean(problems: Vec<String>) {
    assert!(
        problems.is_empty(),
        "the configuration reference ({}) is out of date:\n  {}",
        readme::PATH,
        problems.join("\n  ")
    );
}

fn assert_caught(problems: Vec<String>, needles: &[&str]) {
    for needle in needles {
        assert!(
            problems.iter().any(|problem| problem.contains(needle)),
            "expected a problem naming `{needle}`, got:\n  {}",
            problems.join("\n  ")
        );
    }
}

/// The variables cargo set for this test, kept from the nested build
/// (xtask's own list and reason, compiled in).
#[path = "../../../xtask/src/cargo_env.rs"]
mod cargo_env;

/// The five service binaries, built (or found fresh) by cargo.
fn binaries() -> &'static BTreeMap<String, PathBuf> {
    static BINARIES: OnceLock<BTreeMap<String, PathBuf>> = OnceLock::new();
    BINARIES.get_or_init(|| {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
        let mut command = Command::new(cargo);
        // The build `cargo xtask demo`, `up` and `chaos` run, so the binaries
        // the test build left are fresh: the whole workspace with
        // `--examples` resolves features as a test build does, and the
        // variables cargo set for this test process must not reach the
        // build (ring's build script reruns when CARGO_MANIFEST_DIR or
        // CARGO_PKG_* change, and everything above it with it).
        command
            .current_dir(root())
            .args([
                "build",
                "--workspace",
                "--bins",
                "--examples",
                "--keep-going",
                "--message-format=json-render-diagnostics",
            ])
            .stdin(Stdio::null());
        cargo_env::remove_cargo_run_env(&mut command);
        let output = command.output().expect("run cargo build");
        let mut found = BTreeMap::new();
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            let Ok(message) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            let name = message.pointer("/target/name").and_then(Value::as_str);
            let executable = message.get("executable").and_then(Value::as_str);
            if let (Some(name), Some(executable)) = (name, executable)
                && SERVICES.contains(&name)
            {
                found.insert(name.to_string(), PathBuf::from(executable));
            }
        }
        let missing: Vec<&str> = SERVICES
            .into_iter()
            .filter(|service| !found.contains_key(*service))
            .collect();
        assert!(
            missing.is_empty(),
            "cargo build did not produce {missing:?} (exit {}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        found
    })
}

/// Runs `<service> --config <its shipped config> --dump-config` with exactly
/// `env` as its environment, in the workspace root.
fn dump(service: &str, env: &[(String, String)]) -> Output {
    let config = root()
        .join("services")
        .join(service)
        .join("configs")
        .join(format!("{service}.yaml"));
    let child = Command::new(&binaries()[service])
        .arg("--config")
        .arg(&config)
        .arg("--dump-config")
        .env_clear()
        .envs(env.iter().map(|(key, value)| (key, value)))
        .current_dir(root())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|error| panic!("cannot run {service}: {error}"));
    let pid = child.id();
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(child.wait_with_output());
    });
    match receiver.recv_timeout(RUN_GUARD) {
        Ok(output) => output.expect("wait for the binary"),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!("{service} --dump-config still running after {RUN_GUARD:?}");
        }
    }
}

fn dump_json(service: &str, env: &[(String, String)]) -> Result<Value, String> {
    let output = dump(service, env);
    if !output.status.success() {
        return Err(format!(
            "exit {}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    serde_json::from_slice(&output.stdout).map_err(|error| {
        format!(
            "not JSON ({error}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

#[test]
fn every_dumped_key_is_documented_and_every_documented_key_exists() {
    let reference = parse(&reference_text());
    let mut actual = BTreeMap::new();
    let mut problems = Vec::new();
    for service in SERVICES {
        let defaults = defaults(service);
        let dumped = dump_json(service, &[])
            .unwrap_or_else(|error| panic!("{service} --dump-config: {error}"));
        let open = readme_keys::open_maps(&defaults);
        let from_dump = readme_keys::fold_open_maps(readme_keys::config_paths(&dumped), &open);
        let from_defaults = readme_keys::config_paths(&defaults);
        // The binary and the linked config type must agree, or one of the
        // two sources below is not what runs.
        let only_dump: Vec<&String> = from_dump.difference(&from_defaults).collect();
        let only_defaults: Vec<&String> = from_defaults
            .difference(&from_dump)
            .filter(|path| !path.contains("[]"))
            .collect();
        if !only_dump.is_empty() || !only_defaults.is_empty() {
            problems.push(format!(
                "{service}: --dump-config and the config type disagree: only dumped {only_dump:?}, only in Default {only_defaults:?}"
            ));
        }
        actual.insert(service, from_dump.union(&from_defaults).cloned().collect());
    }
    problems.extend(self::problems(&reference, &actual));
    assert_clean(problems);
}

#[test]
fn environment_table_matches_the_binaries() {
    assert_clean(env_problems(&parse(&reference_text())));
}

#[test]
fn a_wrong_prefix_or_list_key_is_caught() {
    let text = reference_text();
    let row = text
        .lines()
        .find(|line| line.starts_with("| room-service | `ROOM__` |"))
        .expect("room-service's environment row");
    let text = text
        .replacen(
            "| outbox-relay | `RELAY__` |",
            "| outbox-relay | `OUTBOX__` |",
            1,
        )
        .replacen(
            row,
            &format!("{}, `room.rules.rank_size` |", row.trim_end_matches(" |")),
            1,
        );
    assert_caught(
        env_problems(&parse(&text)),
        &["OUTBOX__HTTP_LISTEN", "`room.rules.rank_size`"],
    );
}

/// The environment table against the binaries (see the module docs).
fn env_problems(reference: &Reference) -> Vec<String> {
    let mut problems = Vec::new();
    for service in SERVICES {
        let Some(env) = reference.env.get(service) else {
            problems.push(format!("{service}: no row in the environment table"));
            continue;
        };
        // The prefix: an override of http_listen must show in the dump.
        let address = "127.0.0.1:17999";
        let variable = format!("{}__HTTP_LISTEN", env.prefix);
        match dump_json(service, &[(variable.clone(), address.into())]) {
            Ok(dumped) if dumped["http_listen"] == address => {}
            Ok(dumped) => problems.push(format!(
                "{service}: {variable}={address} did not override http_listen (got {}); is `{}__` its prefix?",
                dumped["http_listen"], env.prefix
            )),
            Err(error) => problems.push(format!("{service}: {variable}: {error}")),
        }
        // Lists: every list of scalars outside a list of maps either takes a
        // comma-separated value (and is documented to) or is refused.
        let defaults = defaults(service);
        for path in readme_keys::config_paths(&defaults) {
            let is_list = readme_keys::values_at(&defaults, &path)
                .first()
                .is_some_and(|value| value.is_array());
            if !is_list || path.contains("[]") || path == "activity.activities" {
                continue;
            }
            let variable = format!(
                "{}__{}",
                env.prefix,
                path.replace('.', "__").to_ascii_uppercase()
            );
            let documented = env.list_keys.contains(&path);
            // `10,20` as broker addresses would be refused as plaintext off
            // this machine: the transport rule is not what is tested here.
            let insecure = format!("{}__ROCKETMQ__ALLOW_INSECURE_TRANSPORT", env.prefix);
            let result = dump_json(
                service,
                &[
                    (variable.clone(), "10,20".into()),
                    (insecure, "true".into()),
                ],
            );
            let taken = result.as_ref().is_ok_and(|dumped| {
                readme_keys::values_at(dumped, &path)
                    .first()
                    .and_then(|value| value.as_array())
                    .is_some_and(|items| items.len() == 2)
            });
            match (documented, taken) {
                (true, false) => problems.push(format!(
                    "{service}: the configuration reference lists `{path}` as a comma-separated environment list, but {variable}=10,20 gave {result:?}"
                )),
                (false, true) => problems.push(format!(
                    "{service}: {variable}=10,20 sets the list `{path}`, but the configuration reference's environment table does not list it"
                )),
                _ => {}
            }
        }
        for path in &env.list_keys {
            if !readme_keys::values_at(&defaults, path)
                .first()
                .is_some_and(|value| value.is_array())
            {
                problems.push(format!(
                    "{service}: the configuration reference's environment table lists `{path}`, which is not a list key"
                ));
            }
        }
    }
    problems
}

#[test]
fn a_missing_key_is_caught() {
    let text = reference_text();
    let row = text
        .lines()
        .find(|line| line.starts_with("| `outbox_worker.claim_lease` |"))
        .expect("the claim_lease row");
    let reference = parse(&text.replace(&format!("{row}\n"), ""));
    assert_caught(
        problems(&reference, &default_keys()),
        &[
            "room-service: keys not documented",
            "outbox_worker.claim_lease",
        ],
    );
}

#[test]
fn a_documented_key_that_does_not_exist_is_caught() {
    let text = reference_text();
    let bogus = "| `consumer.max_batches` | `64` | Misspelt. |\n";
    let text = text.replacen(
        "| `consumer.group` |",
        &format!("{bogus}| `consumer.group` |"),
        1,
    );
    assert_caught(
        problems(&parse(&text), &default_keys()),
        &[
            "notice-consumer: docs/configuration.md documents keys",
            "consumer.max_batches",
        ],
    );
}

#[test]
fn a_wrong_default_is_caught() {
    let text = reference_text().replacen(
        "| `outbox_worker.batch_size` | `100` |",
        "| `outbox_worker.batch_size` | `500` |",
        1,
    );
    assert_caught(
        problems(&parse(&text), &default_keys()),
        &["`outbox_worker.batch_size`", "`500`", "`100`"],
    );
}

#[test]
fn a_section_used_by_the_wrong_service_is_caught() {
    let text = reference_text().replacen(
        "Used by: room-service, im-bridge, outbox-relay (as `direct.im_bridge.*`).",
        "Used by: room-service, im-bridge, notice-consumer, outbox-relay (as `direct.im_bridge.*`).",
        1,
    );
    assert_caught(
        problems(&parse(&text), &default_keys()),
        &[
            "notice-consumer: docs/configuration.md documents keys",
            "im_bridge.kick_mute",
        ],
    );
}
