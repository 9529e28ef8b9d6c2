//! The operator surface: the `outbox-relay` binary's subcommands and config
//! checks, and the token-protected admin HTTP endpoints of a running relay.

mod common;

use common::service::service_config;
use common::*;
use outbox_relay::{access::throttle, app::App, config::RelayServiceConfig};
use service_kit::Secret;
use std::process::Command;
use testkit::binary::{ConfigCase, assert_dump_redacts, assert_start_refused};
use testkit::secrets::PlantedSecrets;
use tokio_util::sync::CancellationToken;

fn write_config(name: &str, body: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(testkit::unique("relay-config-"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    path
}

fn relay_binary(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_outbox-relay"))
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

const EXE: &str = env!("CARGO_BIN_EXE_outbox-relay");

#[test]
fn invalid_configs_are_refused_naming_the_key() {
    // MySQL is unreachable: a config wrongly accepted fails on connect
    // without naming the key.
    let base = format!(
        "mysql:\n  url: \"{}\"\n",
        testkit::binary::UNREACHABLE_MYSQL
    );
    let env = |name, key, value, names| ConfigCase::env(name, &base, key, value, names);
    let off_loopback = |name, token: &str, names| ConfigCase {
        name,
        yaml: base.clone(),
        env: vec![
            ("RELAY__HTTP_LISTEN".into(), "0.0.0.0:0".into()),
            ("RELAY__ADMIN_TOKEN".into(), token.into()),
        ],
        names,
    };
    let cases = [
        env(
            "mq mode without the MQ publisher",
            "RELAY__OUTBOX_WORKER__PUBLISH_MODE",
            "mq",
            "rocketmq.room_outbox.enabled",
        ),
        env(
            "direct mode without any sink",
            "RELAY__OUTBOX_WORKER__PUBLISH_MODE",
            "direct",
            "needs a direct sink",
        ),
        env(
            "unknown publish mode",
            "RELAY__OUTBOX_WORKER__PUBLISH_MODE",
            "kafka",
            "outbox_worker.publish_mode",
        ),
        env(
            "unknown retry strategy",
            "RELAY__OUTBOX_WORKER__RETRY_STRATEGY",
            "linear",
            "outbox_worker.retry_strategy",
        ),
        env(
            "unknown worker key",
            "RELAY__OUTBOX_WORKER__BATCH_SISE",
            "5",
            "batch_sise",
        ),
        env(
            "bad duration",
            "RELAY__OUTBOX_WORKER__CLAIM_LEASE",
            "soon",
            "soon",
        ),
        off_loopback(
            "sample admin token on a reachable listener",
            outbox_relay::admin::SAMPLE_TOKEN,
            "sample token",
        ),
        off_loopback(
            "short admin token on a reachable listener",
            "0123456789abcdef0123456789abcde",
            "shorter than 32 bytes",
        ),
        ConfigCase {
            name: "short read-only token on a reachable listener",
            yaml: base.clone(),
            env: vec![
                ("RELAY__HTTP_LISTEN".into(), "0.0.0.0:0".into()),
                (
                    "RELAY__ADMIN_TOKEN".into(),
                    "0123456789abcdef0123456789abcdef".into(),
                ),
                ("RELAY__ADMIN_READ_TOKEN".into(), "reader".into()),
            ],
            names: "admin_read_token is shorter than 32 bytes",
        },
        env(
            "read-only token without an admin token",
            "RELAY__ADMIN_READ_TOKEN",
            "reader",
            "admin_read_token is set but admin_token is empty",
        ),
        ConfigCase {
            name: "admin token given twice",
            yaml: base.clone(),
            env: vec![
                ("RELAY__ADMIN_TOKEN".into(), "a".into()),
                ("RELAY__ADMIN_TOKEN_FILE".into(), "/etc/hostname".into()),
            ],
            names: "admin_token is set by both RELAY__ADMIN_TOKEN and RELAY__ADMIN_TOKEN_FILE",
        },
        env(
            "secret file missing",
            "RELAY__MYSQL__PASSWORD_FILE",
            "/nonexistent/mysql-password",
            "mysql.password",
        ),
        ConfigCase::file(
            "unknown key in the file",
            &format!("{base}outbox_worker:\n  batch_sise: 5\n"),
            "batch_sise",
        ),
    ];
    assert_start_refused(EXE, &cases);
}

#[test]
fn dump_config_redacts_secrets() {
    let dump = assert_dump_redacts(
        EXE,
        "mysql:\n  password: \"pw-SECRET-2\"\nrocketmq:\n  access_key: \"user\"\n  secret_key: \"sasl-SECRET-3\"\ndirect:\n  tencent_im:\n    secret_key: \"im-SECRET-4\"\n",
        &[
            ("RELAY__ADMIN_TOKEN", "tok-SECRET-1"),
            ("RELAY__ADMIN_READ_TOKEN", "read-SECRET-6"),
            (
                "RELAY__MYSQL__URL",
                "mysql://root:url-SECRET-5@127.0.0.1:3306/hyapp",
            ),
        ],
        &["SECRET"],
        &[
            "/admin_token",
            "/admin_read_token",
            "/mysql/password",
            "/rocketmq/secret_key",
            "/direct/tencent_im/secret_key",
        ],
    );
    assert_eq!(
        dump["mysql"]["url"],
        "mysql://root:***@127.0.0.1:3306/hyapp"
    );
}

#[test]
fn dump_and_debug_hide_every_planted_secret() {
    let planted = PlantedSecrets::new("RELAY", outbox_relay::config::SECRET_KEYS);
    let (dump, path) = planted.dump(EXE, "");
    let config = RelayServiceConfig::load_with_env(Some(path), Some(planted.env_map())).unwrap();
    planted.assert_hidden(&dump, &format!("{config:?}"));
    let settings =
        relay_engine::RelaySettings::from_config(&config.outbox_worker, &config.rocketmq).unwrap();
    assert!(!format!("{settings:?}").contains(testkit::secrets::MARK));
}

#[test]
fn environment_strings_keep_their_text() {
    let env = [
        ("RELAY__ADMIN_TOKEN", "007123"),
        ("RELAY__OUTBOX_WORKER__BATCH_SIZE", "0500"),
        ("RELAY__OUTBOX_WORKER__NUDGE_ENABLED", "false"),
    ]
    .into_iter()
    .map(|(key, value)| (key.to_owned(), value.to_owned()))
    .collect();
    let path = write_config("relay.yaml", "");
    let config = RelayServiceConfig::load_with_env(Some(path), Some(env)).unwrap();
    assert_eq!(config.admin_token.expose(), "007123");
    assert_eq!(config.outbox_worker.batch_size, 500);
    assert!(!config.outbox_worker.nudge_enabled);
}

#[tokio::test]
async fn cli_lists_replays_and_purges() {
    let db = testkit::TestDb::new().await;
    insert(&db.pool, &room_rows("room-cli", 1, 2)).await;
    sqlx::query("UPDATE room_outbox SET status = 'failed', last_error = 'boom', retry_count = 10")
        .execute(&db.pool)
        .await
        .unwrap();
    let path = write_config(
        "cli.yaml",
        &format!("mysql:\n  url: \"{}\"\nlog:\n  level: \"warn\"\n", db.url),
    );
    let config = path.to_str().unwrap();

    let output = relay_binary(&["--config", config, "--json", "status"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let status: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(status["failed"], 2);
    assert_eq!(status["open"], 0);

    let output = relay_binary(&[
        "--config",
        config,
        "--json",
        "dead-letters",
        "list",
        "--room-id",
        "room-cli",
    ]);
    let letters: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(letters.as_array().unwrap().len(), 2);
    assert_eq!(letters[0]["last_error"], "boom");

    let output = relay_binary(&[
        "--config",
        config,
        "--json",
        "dead-letters",
        "replay",
        "--room-id",
        "room-cli",
        "--dry-run",
    ]);
    let dry: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(dry["replayed"].as_array().unwrap().len(), 2);
    assert_eq!(
        statuses(&db.pool, "room-cli").await[0].1,
        "failed",
        "dry run writes nothing"
    );

    let output = relay_binary(&[
        "--config",
        config,
        "dead-letters",
        "replay",
        "--room-id",
        "room-cli",
        "--limit",
        "1",
        "--operator",
        "oncall",
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        statuses(&db.pool, "room-cli").await,
        vec![(1, "pending".into()), (2, "failed".into())],
        "replays the room's dead letters in commit order"
    );

    sqlx::query(
        "UPDATE room_outbox SET status = 'delivered', created_at_ms = 0 WHERE room_event_seq = 1",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let output = relay_binary(&[
        "--config",
        config,
        "--json",
        "purge",
        "--retention",
        "1d",
        "--operator",
        "oncall",
    ]);
    let purged: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(purged["deleted"], 1);
    assert_eq!(
        statuses(&db.pool, "room-cli").await,
        vec![(2, "failed".into())]
    );
}

#[tokio::test]
async fn admin_http_requires_the_token_and_serves_operations() {
    let db = testkit::TestDb::new().await;
    insert(&db.pool, &room_rows("room-http", 1, 1)).await;
    sqlx::query("UPDATE room_outbox SET status = 'failed'")
        .execute(&db.pool)
        .await
        .unwrap();
    let config = RelayServiceConfig {
        admin_token: Secret::new("s3cret-token"),
        rocketmq: mq_config(&testkit::kafka_bootstrap(), &testkit::unique("ns")),
        ..service_config(&db.url, "relay-http")
    };
    let app = App::build(config).await.unwrap();
    let base = format!("http://{}", app.http_addr().unwrap());
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(app.run(shutdown.clone()));
    let client = reqwest::Client::new();

    // Every admin route refuses a missing or wrong token, and refusing does
    // nothing (the dead letter is still failed afterwards). After the
    // throttle's limit of wrong tokens the refusal is 429; the guesses come
    // from 127.0.0.2 so this test's own calls below are not throttled.
    let guesser = reqwest::Client::builder()
        .local_address(std::net::IpAddr::from([127, 0, 0, 2]))
        .build()
        .unwrap();
    let mut attempts = 0;
    let routes = [
        (reqwest::Method::GET, "/admin/status"),
        (
            reqwest::Method::GET,
            "/admin/dead-letters?room_id=room-http",
        ),
        (
            reqwest::Method::POST,
            "/admin/dead-letters/replay?room_id=room-http",
        ),
        (reqwest::Method::POST, "/admin/purge?retention_ms=0"),
    ];
    let credentials: [(&str, Option<&str>); 5] = [
        ("missing", None),
        ("wrong", Some("Bearer nope")),
        ("prefix of the token", Some("Bearer s3cret")),
        ("token plus suffix", Some("Bearer s3cret-token-x")),
        ("not a bearer", Some("Basic s3cret-token")),
    ];
    for (method, path) in &routes {
        for (what, header) in credentials {
            let mut request = guesser.request(method.clone(), format!("{base}{path}"));
            if let Some(header) = header {
                request = request.header("authorization", header);
            }
            let response = request.send().await.unwrap();
            let expected = if attempts < throttle::CLIENT_LIMIT {
                401
            } else {
                429
            };
            attempts += 1;
            assert_eq!(
                response.status(),
                expected,
                "{method} {path} with a {what} token"
            );
            let body = response.text().await.unwrap();
            assert!(!body.contains("s3cret-token"), "{body}");
        }
    }
    assert_eq!(statuses(&db.pool, "room-http").await[0].1, "failed");

    let letters: serde_json::Value = client
        .get(format!("{base}/admin/dead-letters?room_id=room-http"))
        .bearer_auth("s3cret-token")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(letters.as_array().unwrap().len(), 1);
    let replay = client
        .post(format!(
            "{base}/admin/dead-letters/replay?room_id=room-http"
        ))
        .bearer_auth("s3cret-token")
        .header("x-operator", "oncall")
        .send()
        .await
        .unwrap();
    assert_eq!(replay.status(), 200);
    // Back in the pipeline; the running relay may already have claimed or
    // published it, so any state after `pending` counts.
    let status = statuses(&db.pool, "room-http").await[0].1.clone();
    assert!(
        ["pending", "delivering", "delivered"].contains(&status.as_str()),
        "replayed row is {status}"
    );

    let metrics = client
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for name in [
        "room_outbox_publish_success_total",
        "room_outbox_pending",
        "room_outbox_oldest_pending_age_seconds",
        "room_outbox_failed",
    ] {
        assert!(metrics.contains(name), "missing {name} in /metrics");
    }
    // Ready once the producer has the topics' metadata (the shared broker
    // is up, so that comes).
    wait_for_status(&client, &format!("{base}/readyz"), 200).await;
    shutdown.cancel();
    running.await.unwrap().unwrap();
}

/// Polls `url` until it answers `status`, failing after 60 s.
async fn wait_for_status(client: &reqwest::Client, url: &str, status: u16) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let answer = client.get(url).send().await.unwrap().status();
        if answer == status {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{url} still answers {answer}, not {status}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn the_relay_is_ready_only_once_its_producer_has_the_topics_metadata() {
    let db = testkit::TestDb::new().await;
    // A broker that is not there yet, on a port that will be its own.
    let mut broker = testkit::PrivateBroker::start().await;
    broker.stop();
    let config = RelayServiceConfig {
        rocketmq: mq_config(&broker.bootstrap, &testkit::unique("ns")),
        ..service_config(&db.url, "relay-warm")
    };
    let app = App::build(config).await.unwrap();
    let base = format!("http://{}", app.http_addr().unwrap());
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(app.run(shutdown.clone()));
    let client = reqwest::Client::new();

    // The relay runs — it holds its shard leases — but cannot reach the broker.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let held: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM relay_shard_leases WHERE owner = 'relay-warm' AND lease_until_ms > ?",
        )
        .bind(service_kit::time::now_ms())
        .fetch_one(&db.pool)
        .await
        .unwrap();
        if held == 64 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "relay never took its shards"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let status = client
        .get(format!("{base}/readyz"))
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 503, "ready without a connected producer");

    broker.restart().await;
    wait_for_status(&client, &format!("{base}/readyz"), 200).await;
    shutdown.cancel();
    running.await.unwrap().unwrap();
}
