//! The relay binary refuses console and admin settings that cannot work, at
//! start-up and naming the key, before it connects to anything (the MySQL
//! URL points nowhere: a wrongly accepted config would fail on connect with
//! a message that names no key).

use testkit::binary::{ConfigCase, assert_start_refused};

const EXE: &str = env!("CARGO_BIN_EXE_outbox-relay");

/// A config the relay would start with (if MySQL answered), plus `extra`.
fn base(extra: &str) -> String {
    format!(
        "mysql:\n  url: \"{}\"\noutbox_worker:\n  publish_mode: direct\n  nudge_enabled: false\n\
         direct:\n  activity_endpoint: \"http://127.0.0.1:1\"\nadmin_token: \"startup-admin-token\"\n{extra}",
        testkit::binary::UNREACHABLE_MYSQL
    )
}

#[test]
fn unusable_console_settings_are_refused_naming_the_key() {
    let dir = std::env::temp_dir().join(testkit::unique("relay-operators-"));
    std::fs::create_dir_all(&dir).unwrap();
    let malformed = dir.join("malformed");
    std::fs::write(&malformed, "alice 0123\n").unwrap();
    let duplicate = dir.join("duplicate");
    let hash = "a".repeat(64);
    let other = "b".repeat(64);
    std::fs::write(&duplicate, format!("alice = {hash}\nalice = {other}\n")).unwrap();
    let invalid = dir.join("invalid");
    std::fs::write(&invalid, format!("al ice = {hash}\n")).unwrap();
    let file = |path: &std::path::Path| format!("admin_operators_file: \"{}\"\n", path.display());
    let cases = [
        ConfigCase::file(
            "a wildcard allowed host",
            &base("admin_allowed_hosts: [\"*.example\"]\n"),
            "admin_allowed_hosts[0]",
        ),
        ConfigCase::env(
            "a host with a port from the environment",
            &base(""),
            "RELAY__ADMIN_ALLOWED_HOSTS",
            "localhost,relay:7201",
            "admin_allowed_hosts[1]",
        ),
        ConfigCase::file(
            "an operators file that does not exist",
            &base("admin_operators_file: /nonexistent/operators\n"),
            "admin_operators_file `/nonexistent/operators`",
        ),
        ConfigCase::file(
            "a malformed line",
            &base(&file(&malformed)),
            "line 1: expected",
        ),
        ConfigCase::file(
            "a duplicate operator",
            &base(&file(&duplicate)),
            "line 2: operator `alice` is listed twice",
        ),
        ConfigCase::file(
            "an invalid name",
            &base(&file(&invalid)),
            "line 1: the name has",
        ),
        ConfigCase::file(
            "a TLS key without a certificate",
            &base("admin_tls:\n  key_file: /nonexistent/key.pem\n"),
            "admin_tls.cert_file is required",
        ),
        ConfigCase::file(
            "a TLS certificate that does not exist",
            &base(
                "admin_tls:\n  cert_file: /nonexistent/cert.pem\n  key_file: /nonexistent/key.pem\n",
            ),
            "admin_tls.cert_file `/nonexistent/cert.pem`",
        ),
        ConfigCase::file(
            "a replay age beyond the consumers' dedup retention",
            &base("ops:\n  replay_max_age: 30d\n"),
            "ops.replay_max_age `30d`",
        ),
        ConfigCase::file(
            "an admin CPU priority beyond the lowest",
            &base(
                "admin_cpu_nice: 20
",
            ),
            "admin_cpu_nice must be between 0 and 19",
        ),
        ConfigCase::file(
            "an admin CPU priority above the relay's",
            &base(
                "admin_cpu_nice: -5
",
            ),
            "admin_cpu_nice must be between 0 and 19",
        ),
        ConfigCase::file(
            "an admin pool of no connection",
            &base(
                "admin_max_connections: 0
",
            ),
            "admin_max_connections must be at least 1",
        ),
    ];
    assert_start_refused(EXE, &cases);
    std::fs::remove_dir_all(&dir).unwrap();
}
