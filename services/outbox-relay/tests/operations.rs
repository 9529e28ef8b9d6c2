//! The operator surface: the `outbox-relay` binary's subcommands and config
//! checks, and the token-protected admin HTTP endpoints of a running relay.

mod common;

use common::*;
use outbox_relay::{app::App, config::RelayServiceConfig};
use service_kit::{Secret, db::MysqlConfig};
use std::process::Command;
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

#[test]
fn mq_mode_without_the_mq_publisher_refuses_to_start() {
    let path = write_config(
        "bad.yaml",
        "outbox_worker:\n  publish_mode: \"mq\"\nmysql:\n  url: \"mysql://root@127.0.0.1:1/x\"\n",
    );
    let output = relay_binary(&["--config", path.to_str().unwrap()]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("rocketmq.room_outbox.enabled"), "{stderr}");
}

#[test]
fn direct_mode_without_any_sink_refuses_to_start() {
    let path = write_config(
        "nosink.yaml",
        "outbox_worker:\n  publish_mode: \"direct\"\nmysql:\n  url: \"mysql://root@127.0.0.1:1/x\"\n",
    );
    let output = relay_binary(&["--config", path.to_str().unwrap()]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("needs a direct sink"), "{stderr}");
}

#[test]
fn unknown_keys_and_strategies_are_named() {
    let path = write_config("typo.yaml", "outbox_worker:\n  batch_sise: 5\n");
    let output = relay_binary(&["--config", path.to_str().unwrap(), "--dump-config"]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("batch_sise"));
}

#[test]
fn dump_config_redacts_secrets() {
    let path = write_config(
        "secrets.yaml",
        "admin_token: \"tok-SECRET-1\"\nmysql:\n  password: \"pw-SECRET-2\"\nrocketmq:\n  secret_key: \"sasl-SECRET-3\"\n",
    );
    let output = relay_binary(&["--config", path.to_str().unwrap(), "--dump-config"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("\"admin_token\": \"***\""), "{stdout}");
    assert!(!stdout.contains("SECRET"), "{stdout}");
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

    let output = relay_binary(&["--config", config, "status"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let status: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(status["counts"], serde_json::json!([["failed", 2]]));

    let output = relay_binary(&[
        "--config",
        config,
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
    ]);
    assert!(output.status.success());
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
    let output = relay_binary(&["--config", config, "purge", "--retention", "1d"]);
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
    let mut config = RelayServiceConfig {
        mysql: MysqlConfig {
            url: db.url.clone(),
            ..MysqlConfig::default()
        },
        http_listen: "127.0.0.1:0".into(),
        admin_token: Secret::new("s3cret-token"),
        ..RelayServiceConfig::default()
    };
    config.outbox_worker = worker_config("relay-http");
    config.rocketmq = mq_config(&testkit::kafka_bootstrap(), &testkit::unique("ns"));
    let app = App::build(config).await.unwrap();
    let base = format!("http://{}", app.http_addr().unwrap());
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(app.run(shutdown.clone()));
    let client = reqwest::Client::new();

    let anonymous = client
        .get(format!("{base}/admin/status"))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
    let wrong = client
        .get(format!("{base}/admin/status"))
        .bearer_auth("nope")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);

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
        .send()
        .await
        .unwrap();
    assert_eq!(replay.status(), 200);
    assert_eq!(statuses(&db.pool, "room-http").await[0].1, "pending");

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
        "room_outbox_pending_total",
        "room_outbox_oldest_pending_age_ms",
    ] {
        assert!(metrics.contains(name), "missing {name} in /metrics");
    }
    assert_eq!(
        client
            .get(format!("{base}/readyz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    shutdown.cancel();
    running.await.unwrap().unwrap();
}
