//! Running a service binary the way an operator does (`env!("CARGO_BIN_EXE_<name>")`),
//! for the start-up tests every service has: a table of invalid configs that
//! must be refused with a message naming the key, and `--dump-config` with
//! secrets supplied through the file and the environment, which must print
//! them as `***`. Written once here so the five services' tests stay tables.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A start-up that neither exits nor fails within this long is a bug in the
/// test's premise (the config was accepted); the guard turns a hang into a
/// failure. It bounds a wait, it does not synchronise anything.
const EXIT_GUARD: Duration = Duration::from_secs(90);

/// A MySQL URL nothing listens on: a config that validation wrongly accepts
/// fails at once on connect, with a message that does not name the key.
pub const UNREACHABLE_MYSQL: &str = "mysql://root@127.0.0.1:1/none";

/// What a finished binary printed.
#[derive(Debug)]
pub struct Run {
    /// Exit status.
    pub status: ExitStatus,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

/// Writes `body` to a fresh temporary YAML file and returns its path.
///
/// # Panics
/// When the temporary directory is not writable.
pub fn write_config(body: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(crate::unique("hyapp-config-"));
    std::fs::create_dir_all(&dir).expect("create config dir");
    let path = dir.join("config.yaml");
    std::fs::write(&path, body).expect("write config");
    path
}

/// Removes a file made by [`write_config`] and then its directory, which
/// only that file was in (a directory still holding anything is left), so
/// test runs leave no empty directories behind in the temporary directory.
pub fn remove_config(path: &Path) {
    let _ = std::fs::remove_file(path);
    if let Some(dir) = path.parent() {
        let _ = std::fs::remove_dir(dir);
    }
}

/// Runs `exe` with `args` and exactly `env` as its environment (nothing is
/// inherited, so a developer's `ROOM__…` variables or `RUST_LOG` cannot change
/// the outcome), in an empty working directory (so no default
/// `configs/<service>.yaml` is picked up).
///
/// # Panics
/// When the binary cannot be started or runs past the exit guard.
pub fn run(exe: &str, args: &[&str], env: &[(&str, &str)]) -> Run {
    let dir = std::env::temp_dir().join(crate::unique("hyapp-run-"));
    std::fs::create_dir_all(&dir).expect("create run dir");
    // Files, not pipes: a chatty binary cannot block on a full pipe.
    let stdout_path = dir.join("stdout");
    let stderr_path = dir.join("stderr");
    let mut child = Command::new(exe)
        .args(args)
        .env_clear()
        .envs(env.iter().copied())
        .current_dir(&dir)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout_path).expect("stdout file"))
        .stderr(std::fs::File::create(&stderr_path).expect("stderr file"))
        .spawn()
        .unwrap_or_else(|error| panic!("cannot run {exe}: {error}"));
    let deadline = Instant::now() + EXIT_GUARD;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for binary") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{exe} {args:?} still running after {EXIT_GUARD:?}; stderr:\n{}",
                std::fs::read_to_string(&stderr_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let read = |path: &PathBuf| {
        String::from_utf8_lossy(&std::fs::read(path).unwrap_or_default()).into_owned()
    };
    let run = Run {
        status,
        stdout: read(&stdout_path),
        stderr: read(&stderr_path),
    };
    let _ = std::fs::remove_dir_all(&dir);
    run
}

/// The trace export settings every binary must refuse when malformed (its
/// `log.otlp_endpoint` through `<prefix>__LOG__OTLP_ENDPOINT`, and the
/// standard `OTEL_*` variables), on top of the config file `base`.
pub fn trace_export_cases(base: &str, prefix: &str) -> Vec<ConfigCase> {
    vec![
        ConfigCase::env(
            "log.otlp_endpoint without a scheme",
            base,
            format!("{prefix}__LOG__OTLP_ENDPOINT"),
            "collector:4318",
            "log.otlp_endpoint",
        ),
        ConfigCase::env(
            "OTLP base endpoint without a scheme",
            base,
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "collector:4318",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
        ),
        ConfigCase::env(
            "OTLP traces endpoint with another scheme",
            base,
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "grpc://collector:4317",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        ),
        ConfigCase::env(
            "resource attribute without a value",
            base,
            "OTEL_RESOURCE_ATTRIBUTES",
            "team=rooms,region",
            "OTEL_RESOURCE_ATTRIBUTES: entry 2",
        ),
    ]
}

/// One invalid configuration and the key its refusal must name.
#[derive(Debug, Clone)]
pub struct ConfigCase {
    /// What is wrong, for the failure message.
    pub name: &'static str,
    /// The config file.
    pub yaml: String,
    /// Environment on top of the file.
    pub env: Vec<(String, String)>,
    /// Text the error must contain (the key, or the offending value).
    pub names: &'static str,
}

impl ConfigCase {
    /// A case given as a file only.
    pub fn file(name: &'static str, yaml: &str, names: &'static str) -> Self {
        Self {
            name,
            yaml: yaml.to_string(),
            env: Vec::new(),
            names,
        }
    }

    /// A case given as a file plus one environment variable.
    pub fn env(
        name: &'static str,
        yaml: &str,
        key: impl Into<String>,
        value: &str,
        names: &'static str,
    ) -> Self {
        Self {
            name,
            yaml: yaml.to_string(),
            env: vec![(key.into(), value.to_string())],
            names,
        }
    }
}

/// Starts `exe` (no subcommand, i.e. "run the service") with each case and
/// asserts it exits non-zero, without a panic, with the key named on stderr.
/// Every case runs; the failures are reported together.
///
/// # Panics
/// When any case is not refused as expected.
pub fn assert_start_refused(exe: &str, cases: &[ConfigCase]) {
    let mut failures = Vec::new();
    for case in cases {
        let path = write_config(&case.yaml);
        let env: Vec<(&str, &str)> = case
            .env
            .iter()
            .map(|(key, value)| (key.as_str(), value.as_str()))
            .collect();
        let run = run(exe, &["--config", path.to_str().expect("utf-8 path")], &env);
        remove_config(&path);
        if run.status.success() {
            failures.push(format!("{}: started (exit 0)", case.name));
        } else if run.stderr.contains("panicked") {
            failures.push(format!("{}: panicked:\n{}", case.name, run.stderr));
        } else if !run.stderr.contains(case.names) {
            failures.push(format!(
                "{}: stderr does not name `{}`:\n{}",
                case.name, case.names, run.stderr
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Runs `exe --config <yaml> --dump-config` with `env` and asserts the dump
/// succeeded, is JSON, contains none of `secrets` anywhere, and shows `***`
/// at each JSON pointer in `redacted` (so a secret moved to another key, or
/// silently dropped, is noticed too). Returns the parsed dump.
///
/// # Panics
/// When the dump fails or leaks.
pub fn assert_dump_redacts(
    exe: &str,
    yaml: &str,
    env: &[(&str, &str)],
    secrets: &[&str],
    redacted: &[&str],
) -> serde_json::Value {
    let path = write_config(yaml);
    let run = run(
        exe,
        &[
            "--config",
            path.to_str().expect("utf-8 path"),
            "--dump-config",
        ],
        env,
    );
    remove_config(&path);
    assert!(
        run.status.success(),
        "--dump-config failed:\n{}",
        run.stderr
    );
    for secret in secrets {
        assert!(
            !run.stdout.contains(secret) && !run.stderr.contains(secret),
            "secret `{secret}` printed by --dump-config:\n{}{}",
            run.stdout,
            run.stderr
        );
    }
    let dump: serde_json::Value = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|error| panic!("dump is not JSON ({error}):\n{}", run.stdout));
    for pointer in redacted {
        assert_eq!(
            dump.pointer(pointer).and_then(serde_json::Value::as_str),
            Some("***"),
            "{pointer} should be redacted in:\n{}",
            run.stdout
        );
    }
    dump
}

/// A consumer service's config that passes validation: broker, IM and an
/// unreachable MySQL (a case that validation wrongly accepts fails on connect,
/// without naming its key).
pub const CONSUMER_BASE: &str = "mysql:
  url: \"mysql://root@127.0.0.1:1/none\"
rocketmq:
  enabled: true
  name_servers: [\"127.0.0.1:1\"]
tencent_im:
  base_url: \"http://127.0.0.1:1\"
  sdk_app_id: 1400000000
  secret_key: \"k\"
";

/// Invalid values of the sections every consumer shares (`rocketmq`,
/// `tencent_im`, `consumer`, `http_listen`, trace export), given on top of
/// [`CONSUMER_BASE`] through the environment with `prefix` (e.g. `NOTICE`).
pub fn consumer_cases(prefix: &str) -> Vec<ConfigCase> {
    broker_and_im_cases(prefix)
        .into_iter()
        .chain(service_cases(prefix))
        .chain(trace_export_cases(CONSUMER_BASE, prefix))
        .collect()
}

/// One consumer case: `value` for `key` in the environment with `prefix`.
fn consumer_env_case(
    prefix: &str,
    name: &'static str,
    key: &str,
    value: &str,
    names: &'static str,
) -> ConfigCase {
    ConfigCase::env(
        name,
        CONSUMER_BASE,
        format!("{prefix}__{key}"),
        value,
        names,
    )
}

/// The `rocketmq` and `tencent_im` cases of [`consumer_cases`].
fn broker_and_im_cases(prefix: &str) -> Vec<ConfigCase> {
    let env =
        |name, key: &str, value: &str, names| consumer_env_case(prefix, name, key, value, names);
    vec![
        ConfigCase::file(
            "no broker address",
            &CONSUMER_BASE.replace("  name_servers: [\"127.0.0.1:1\"]\n", ""),
            "rocketmq.name_servers",
        ),
        env(
            "unknown security protocol",
            "ROCKETMQ__SECURITY_PROTOCOL",
            "tls",
            "rocketmq.security_protocol",
        ),
        env(
            "SASL user without password",
            "ROCKETMQ__ACCESS_KEY",
            "user",
            "rocketmq.secret_key",
        ),
        env(
            "empty IM secret",
            "TENCENT_IM__SECRET_KEY",
            "",
            "tencent_im.secret_key",
        ),
        env(
            "zero IM app id",
            "TENCENT_IM__SDK_APP_ID",
            "0",
            "tencent_im.sdk_app_id",
        ),
        env(
            "IM group template without the room",
            "TENCENT_IM__GROUP_ID_TEMPLATE",
            "fixed",
            "tencent_im.group_id_template",
        ),
    ]
}

/// The listener, `consumer`, file, secret and transport cases of [`consumer_cases`].
fn service_cases(prefix: &str) -> Vec<ConfigCase> {
    let env =
        |name, key: &str, value: &str, names| consumer_env_case(prefix, name, key, value, names);
    vec![
        env(
            "listen address without port",
            "HTTP_LISTEN",
            "127.0.0.1",
            "http_listen",
        ),
        env(
            "unknown consumer key",
            "CONSUMER__MAX_BATCHES",
            "5",
            "max_batches",
        ),
        env("bad duration", "CONSUMER__FETCH_WAIT_MAX", "soon", "soon"),
        ConfigCase::file(
            "unknown top-level key in the file",
            &format!("{CONSUMER_BASE}http_lisen: \"127.0.0.1:1\"\n"),
            "http_lisen",
        ),
        ConfigCase {
            name: "IM secret given as value and as file",
            yaml: CONSUMER_BASE.to_string(),
            env: vec![
                (format!("{prefix}__TENCENT_IM__SECRET_KEY"), "a".into()),
                (
                    format!("{prefix}__TENCENT_IM__SECRET_KEY_FILE"),
                    "/nonexistent/im-secret".into(),
                ),
            ],
            names: "tencent_im.secret_key is set by both",
        },
        env(
            "secret file missing",
            "ROCKETMQ__SECRET_KEY_FILE",
            "/nonexistent/sasl-password",
            "rocketmq.secret_key",
        ),
        ConfigCase::file(
            "plaintext to a broker off this machine",
            &CONSUMER_BASE.replace("[\"127.0.0.1:1\"]", "[\"kafka.internal:1\"]"),
            "rocketmq.allow_insecure_transport",
        ),
        env(
            "unverified MySQL off this machine",
            "MYSQL__URL",
            "mysql://root@db.internal:1/none",
            "mysql.allow_insecure_transport",
        ),
        ConfigCase::file(
            "a security property among the client properties",
            &format!(
                "{CONSUMER_BASE}consumer:\n  client_properties:\n    security.protocol: \"plaintext\"\n"
            ),
            "consumer.client_properties.security.protocol may not be set",
        ),
    ]
}

/// Runs `--dump-config` of a consumer with the four secrets a consumer holds
/// (IM key and SASL password in the file; DB password and a password pasted
/// into the MySQL URL in the environment with `prefix`) and asserts all are
/// redacted.
pub fn assert_consumer_dump_redacts(exe: &str, prefix: &str) -> serde_json::Value {
    let yaml = CONSUMER_BASE.replace("secret_key: \"k\"", "secret_key: \"im-SECRET-1\"")
        + "  admin_identifier: \"administrator\"\n"
        + "consumer:\n  group: \"g\"\n";
    let yaml = yaml.replace(
        "  enabled: true\n",
        "  enabled: true\n  access_key: \"user\"\n  secret_key: \"sasl-SECRET-2\"\n",
    );
    let password = format!("{prefix}__MYSQL__PASSWORD");
    let url = format!("{prefix}__MYSQL__URL");
    let dump = assert_dump_redacts(
        exe,
        &yaml,
        &[
            (password.as_str(), "db-SECRET-3"),
            (
                url.as_str(),
                "mysql://root:url-SECRET-4@127.0.0.1:3306/hyapp",
            ),
        ],
        &["SECRET"],
        &[
            "/tencent_im/secret_key",
            "/rocketmq/secret_key",
            "/mysql/password",
        ],
    );
    assert_eq!(
        dump.pointer("/mysql/url")
            .and_then(serde_json::Value::as_str),
        Some("mysql://root:***@127.0.0.1:3306/hyapp")
    );
    dump
}
