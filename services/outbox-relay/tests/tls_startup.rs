//! The relay binary refuses TLS settings for MySQL and the nudge's Redis
//! that cannot work, at start-up and naming the key, before it connects to
//! anything (the MySQL URL points nowhere: a wrongly accepted config would
//! fail on connect with a message that names no key).

use testkit::binary::{ConfigCase, assert_start_refused};

const EXE: &str = env!("CARGO_BIN_EXE_outbox-relay");

/// A config the relay would start with (if MySQL answered): direct mode
/// with an activity sink, so only the case's own keys can be at fault.
fn base(mysql_extra: &str, worker_extra: &str) -> String {
    format!(
        "mysql:\n  url: \"{}\"\n{mysql_extra}outbox_worker:\n  publish_mode: direct\n{worker_extra}\
         direct:\n  activity_endpoint: \"http://127.0.0.1:1\"\n",
        testkit::binary::UNREACHABLE_MYSQL
    )
}

#[test]
fn unusable_tls_settings_are_refused_naming_the_key() {
    let cases = [
        ConfigCase::file(
            "verify_identity without a CA file",
            &base("  ssl_mode: verify_identity\n", ""),
            "mysql.ssl_ca is required",
        ),
        ConfigCase::env(
            "verify_ca from the environment without a CA file",
            &base("", ""),
            "RELAY__MYSQL__SSL_MODE",
            "verify_ca",
            "mysql.ssl_ca is required",
        ),
        ConfigCase::file(
            "a CA file that does not exist",
            &base(
                "  ssl_mode: verify_ca\n  ssl_ca: /nonexistent/mysql-ca.pem\n",
                "",
            ),
            "mysql.ssl_ca `/nonexistent/mysql-ca.pem`",
        ),
        ConfigCase::file(
            "an unknown ssl_mode",
            &base("  ssl_mode: verify_everything\n", ""),
            "mysql.ssl_mode",
        ),
        ConfigCase::file(
            "the URL's ssl-mode contradicting mysql.ssl_mode",
            &base("", "").replace("/none\"", "/none?ssl-mode=DISABLED\""),
            "mysql.ssl_mode",
        ),
        ConfigCase::file(
            "a nudge CA file with a plain redis:// URL",
            &base("", "  redis_tls_ca_file: /nonexistent/redis-ca.pem\n"),
            "outbox_worker.redis_tls_ca_file is set",
        ),
        ConfigCase::file(
            "a nudge CA file that does not exist",
            &base(
                "",
                "  redis_url: rediss://127.0.0.1:1\n  redis_tls_ca_file: /nonexistent/redis-ca.pem\n",
            ),
            "outbox_worker.redis_tls_ca_file `/nonexistent/redis-ca.pem`",
        ),
    ];
    assert_start_refused(EXE, &cases);
}
