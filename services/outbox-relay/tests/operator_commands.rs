//! The operator commands end to end: `room`, `retry-now`, `skip`, `leases`,
//! `audit` through the real binary and through the real admin router, with
//! a real relay publishing to the broker to show a released room flows — and
//! every refusal (missing reason or operator, wrong row state, unknown room
//! or event, hostile ids) answered precisely with nothing written.

mod common;

use common::*;
use outbox_relay::admin;
use serde_json::Value;
use service_kit::{Secret, time::now_ms};
use sqlx::MySqlPool;
use std::process::Command;

const TOKEN: &str = "operator-test-token";
const FIVE_MINUTES: i64 = 300_000;

/// The real binary against `db`, with `args` after `--config`.
fn cli(db: &testkit::TestDb, args: &[&std::ffi::OsStr]) -> std::process::Output {
    let dir = std::env::temp_dir().join(testkit::unique("relay-ops-"));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("relay.yaml");
    std::fs::write(
        &config,
        format!("mysql:\n  url: \"{}\"\nlog:\n  level: \"warn\"\n", db.url),
    )
    .unwrap();
    Command::new(env!("CARGO_BIN_EXE_outbox-relay"))
        .arg("--config")
        .arg(&config)
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

fn run(db: &testkit::TestDb, args: &[&str]) -> std::process::Output {
    let args: Vec<&std::ffi::OsStr> = args.iter().map(std::ffi::OsStr::new).collect();
    cli(db, &args)
}

/// Runs a `--json` command that must succeed and parses its output.
fn run_json(db: &testkit::TestDb, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let output = run(db, &all);
    assert!(
        output.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// Runs a command that must fail; returns its stderr.
fn run_refused(db: &testkit::TestDb, args: &[&str]) -> String {
    let output = run(db, args);
    assert!(!output.status.success(), "{args:?} succeeded");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The admin router served on a loopback port; returns its base URL.
async fn serve_admin(pool: &MySqlPool) -> String {
    let router = admin::router(pool.clone(), Secret::new(TOKEN), 7 * 86_400_000);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    base
}

/// `count` rows of `room`; the head is made retryable, backed off five minutes.
async fn room_with_backed_off_head(pool: &MySqlPool, room: &str, count: u64) -> Vec<String> {
    let rows = room_rows(room, 1, count);
    insert(pool, &rows).await;
    sqlx::query(
        "UPDATE room_outbox SET status = 'retryable', retry_count = 2, last_error = 'broker down', \
         next_retry_at_ms = ? WHERE event_id = ?",
    )
    .bind(now_ms() + FIVE_MINUTES)
    .bind(&rows[0].event_id)
    .execute(pool)
    .await
    .unwrap();
    rows.into_iter().map(|row| row.event_id).collect()
}

/// Every row and audit row, to compare before and after a refusal.
async fn snapshot(pool: &MySqlPool) -> (Vec<(u64, String, u32, i64, String)>, i64) {
    let rows = sqlx::query_as(
        "SELECT id, status, retry_count, next_retry_at_ms, last_error FROM room_outbox ORDER BY id",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    let audits = sqlx::query_scalar("SELECT COUNT(*) FROM relay_operator_audit")
        .fetch_one(pool)
        .await
        .unwrap();
    (rows, audits)
}

async fn audit_rows(pool: &MySqlPool) -> Vec<(String, String, String, String, u64, String)> {
    sqlx::query_as(
        "SELECT CAST(operator AS CHAR), action, CAST(room_id AS CHAR), CAST(event_id AS CHAR), row_count, reason \
         FROM relay_operator_audit ORDER BY id",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn room_shows_the_retrying_head_and_retry_now_releases_it() {
    let db = testkit::TestDb::new().await;
    let events = room_with_backed_off_head(&db.pool, "room-a", 3).await;
    let worker = worker_config("relay-ops-a");
    let mq = mq_config(&testkit::kafka_bootstrap(), &testkit::unique("ns"));
    let relay = mq_relay(&db.pool, &mq, &worker);
    let shards = own_all_shards(&relay).await;

    // The room view: the head decoded, its schedule and error, the queue behind it.
    let view = run_json(&db, &["room", "room-a"]);
    assert_eq!(view["head"]["event_id"], events[0]);
    assert_eq!(view["head"]["status"], "retryable");
    assert_eq!(view["head"]["attempts"], 2);
    assert_eq!(view["head"]["last_error"], "broker down");
    assert_eq!(view["head"]["event_type"], "RoomUserJoined");
    assert_eq!(view["head"]["room_event_seq"], 1);
    assert!(view["head"]["due_in_ms"].as_i64().unwrap() > FIVE_MINUTES - 60_000);
    let payload = view["head"]["payload"].as_str().unwrap();
    assert!(
        payload.contains("RoomUserJoined") && payload.contains("u1"),
        "{payload}"
    );
    assert_eq!(view["queued_behind"], 2);
    assert_eq!(view["queued"][1]["event_id"], events[2]);
    let table = String::from_utf8(run(&db, &["room", "room-a"]).stdout).unwrap();
    assert!(
        table.contains("Queued behind the head: 2") && table.contains("retryable"),
        "{table}"
    );
    // `status` lists the retrying head too.
    let status = run_json(&db, &["status"]);
    assert_eq!(
        (status["open"].as_i64(), status["retryable"].as_i64()),
        (Some(3), Some(1))
    );
    assert_eq!(status["retrying"][0]["event_id"], events[0]);

    // Held by its backoff: the relay publishes nothing of the room.
    assert_eq!(relay.run_batch(&shards).await.unwrap().claimed, 0);

    let done = run_json(
        &db,
        &[
            "retry-now",
            "--room-id",
            "room-a",
            "--operator",
            "alice",
            "--reason",
            "broker is back",
        ],
    );
    assert_eq!(done["before"]["status"], "retryable");
    assert_eq!(
        done["after"]["status"], "retryable",
        "only the schedule moved"
    );
    assert_eq!(
        done["after"]["attempts"], 2,
        "the retry budget is unchanged"
    );
    assert_eq!(done["after"]["due_in_ms"], 0);
    assert_eq!(
        audit_rows(&db.pool).await,
        vec![(
            "alice".into(),
            "retry_now".into(),
            "room-a".into(),
            events[0].clone(),
            1,
            "broker is back".into()
        )]
    );

    // Released now: the relay's own fenced claim takes the whole chain.
    let report = relay.run_batch(&shards).await.unwrap();
    assert_eq!(report.delivered, 3, "{report:?}");
    let topic = mq.topic(outbox_schema::names::TOPIC_ROOM_OUTBOX);
    let records = read_topic(&testkit::kafka_bootstrap(), &topic, 3).await;
    assert_eq!(sequences_by_room(&records)["room-a"], vec![1, 2, 3]);

    // retry-now of a delivered row is refused, and writes nothing.
    let before = snapshot(&db.pool).await;
    let error = run_refused(
        &db,
        &["retry-now", "--event-id", &events[1], "--operator", "alice"],
    );
    assert!(
        error.contains("is delivered") && error.contains("retryable"),
        "{error}"
    );
    assert_eq!(snapshot(&db.pool).await, before);
}

#[tokio::test]
async fn skip_dead_letters_the_head_over_http_and_the_room_flows() {
    let db = testkit::TestDb::new().await;
    let events = room_with_backed_off_head(&db.pool, "room-b", 3).await;
    let base = serve_admin(&db.pool).await;
    let client = reqwest::Client::new();
    let post = |path: &str, operator: Option<&str>| {
        let mut request = client.post(format!("{base}{path}")).bearer_auth(TOKEN);
        if let Some(operator) = operator {
            request = request.header(admin::OPERATOR_HEADER, operator);
        }
        request
    };

    // Refused: no reason, no operator, no token. Nothing changes.
    let before = snapshot(&db.pool).await;
    for (request, status, names) in [
        (
            post("/admin/rooms/room-b/skip", Some("bob")),
            400,
            "reason is required",
        ),
        (
            post("/admin/rooms/room-b/skip?reason=im+outage", None),
            400,
            "operator is required",
        ),
        (
            client
                .post(format!("{base}/admin/rooms/room-b/skip?reason=x"))
                .header(admin::OPERATOR_HEADER, "bob"),
            401,
            "admin token",
        ),
    ] {
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), status);
        let body = response.text().await.unwrap();
        assert!(body.contains(names), "{body}");
    }
    assert_eq!(snapshot(&db.pool).await, before);

    let response = post(
        "/admin/rooms/room-b/skip?reason=payload+breaks+IM",
        Some("bob"),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(response.status(), 200);
    let done: Value = response.json().await.unwrap();
    assert_eq!(done["after"]["status"], "failed");
    assert_eq!(
        done["after"]["last_error"],
        "skipped by bob: payload breaks IM"
    );
    assert_eq!(
        audit_rows(&db.pool).await,
        vec![(
            "bob".into(),
            "skip".into(),
            "room-b".into(),
            events[0].clone(),
            1,
            "payload breaks IM".into()
        )]
    );
    // The room is released: its new head is the next row, due now.
    let view: Value = client
        .get(format!("{base}/admin/rooms/room-b"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(view["head"]["event_id"], events[1]);
    assert_eq!(view["head"]["status"], "pending");
    assert_eq!(view["queued_behind"], 1);
    // The skipped head is a dead letter, replayable with an audit row.
    let letters: Value = client
        .get(format!("{base}/admin/dead-letters?limit=5"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(letters[0]["event_id"], events[0]);
    let replay = post(
        "/admin/dead-letters/replay?room_id=room-b&reason=fixed",
        Some("carol"),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(replay.status(), 200);
    let audit: Value = client
        .get(format!("{base}/admin/audit?since=2h&room_id=room-b"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(audit.as_array().unwrap().len(), 2);
    assert_eq!(
        (audit[0]["action"].as_str(), audit[0]["operator"].as_str()),
        (Some("replay"), Some("carol"))
    );
    assert_eq!(audit[0]["row_count"], 1);
    assert_eq!(audit[1]["action"], "skip");
}

#[tokio::test]
async fn refusals_are_precise_and_write_nothing() {
    let db = testkit::TestDb::new().await;
    let events = room_with_backed_off_head(&db.pool, "room-c", 2).await;
    // A second room whose head a relay holds mid-publish.
    let held = room_rows("room-held", 1, 1);
    insert(&db.pool, &held).await;
    sqlx::query(
        "UPDATE room_outbox SET status = 'delivering', retry_count = 1, claimed_by = 'relay-x', \
         claim_token = 7, lock_until_ms = ? WHERE event_id = ?",
    )
    .bind(now_ms() + 30_000)
    .bind(&held[0].event_id)
    .execute(&db.pool)
    .await
    .unwrap();
    let base = serve_admin(&db.pool).await;
    let client = reqwest::Client::new();
    let before = snapshot(&db.pool).await;

    let long_room = "r".repeat(65);
    let http_cases: Vec<(reqwest::RequestBuilder, u16, &str)> = vec![
        (
            client.get(format!("{base}/admin/rooms/no-such-room")),
            404,
            "no rows",
        ),
        (
            client.get(format!("{base}/admin/rooms/{long_room}")),
            400,
            "65 characters, more than 64",
        ),
        (
            client.get(format!("{base}/admin/rooms/room%3Bdrop")),
            400,
            "position 4",
        ),
        (
            client.get(format!("{base}/admin/rooms/%FF%FE")),
            400,
            "UTF-8",
        ),
        (
            client.post(format!("{base}/admin/rooms/room-held/skip?reason=x")),
            409,
            "relay-x holds this one",
        ),
        (
            client.post(format!("{base}/admin/events/{}/skip?reason=x", events[1])),
            409,
            "never attempted",
        ),
        (
            client.post(format!(
                "{base}/admin/events/{}/retry-now",
                held[0].event_id
            )),
            409,
            "mid-publish",
        ),
        (
            client.post(format!("{base}/admin/events/{}/retry-now", "e".repeat(37))),
            400,
            "more than 36",
        ),
        (
            client.post(format!(
                "{base}/admin/events/00000000-0000-0000-0000-000000000000/skip?reason=x"
            )),
            404,
            "not in room_outbox",
        ),
        (
            client.post(format!("{base}/admin/rooms/no-such-room/retry-now")),
            404,
            "no rows",
        ),
        (
            client.post(format!(
                "{base}/admin/rooms/room-c/skip?reason={}",
                "x".repeat(513)
            )),
            400,
            "more than 512",
        ),
        (
            client.post(format!("{base}/admin/rooms/room-c/skip?reason=a%0Ab")),
            400,
            "control character",
        ),
        (
            client.post(format!("{base}/admin/rooms/room-c/skip?reason=x&sneaky=1")),
            400,
            "sneaky",
        ),
        (
            client.get(format!("{base}/admin/audit?since=soon")),
            400,
            "soon",
        ),
        (
            client.get(format!("{base}/admin/audit?action=drop")),
            400,
            "not one of",
        ),
    ];
    for (request, status, names) in http_cases {
        let response = request
            .bearer_auth(TOKEN)
            .header(admin::OPERATOR_HEADER, "dave")
            .send()
            .await
            .unwrap();
        let code = response.status().as_u16();
        let body = response.text().await.unwrap();
        assert_eq!(code, status, "{body}");
        assert!(body.contains(names), "expected {names:?} in {body}");
    }
    let response = client
        .post(format!("{base}/admin/rooms/room-c/retry-now"))
        .bearer_auth(TOKEN)
        .header(
            admin::OPERATOR_HEADER,
            reqwest::header::HeaderValue::from_bytes(b"d\xffve").unwrap(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    assert!(
        response
            .text()
            .await
            .unwrap()
            .contains("x-operator is not visible ASCII")
    );

    for (args, names) in [
        (
            vec!["skip", "--room-id", "room-c", "--operator", "dave"],
            "reason is required",
        ),
        (
            vec!["skip", "--room-id", "room-c", "--reason", "x"],
            "operator is required",
        ),
        (
            vec![
                "retry-now",
                "--room-id",
                "room-c",
                "--event-id",
                &events[0],
                "--operator",
                "dave",
            ],
            "exactly one",
        ),
        (
            vec!["retry-now", "--room-id", &long_room, "--operator", "dave"],
            "more than 64",
        ),
        (
            vec!["retry-now", "--room-id", "room-c", "--operator", "da ve"],
            "position 2",
        ),
        (vec!["room", "no-such-room"], "no rows"),
        (vec!["audit", "--since=-2h"], "not a positive duration"),
        (vec!["purge", "--retention", "1d"], "operator is required"),
        (
            vec!["dead-letters", "replay", "--room-id", "room-c"],
            "operator is required",
        ),
    ] {
        let error = run_refused(&db, &args);
        assert!(
            error.contains(names),
            "{args:?}: expected {names:?} in {error}"
        );
    }
    // A non-UTF-8 argument never reaches the database.
    use std::os::unix::ffi::OsStrExt as _;
    let output = cli(
        &db,
        &[
            std::ffi::OsStr::new("room"),
            std::ffi::OsStr::from_bytes(b"room-\xff"),
        ],
    );
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("invalid UTF-8"));

    assert_eq!(
        snapshot(&db.pool).await,
        before,
        "no refusal wrote anything"
    );
}

#[tokio::test]
async fn leases_audit_and_purge_through_both_surfaces() {
    let db = testkit::TestDb::new().await;
    let relay = mq_relay(
        &db.pool,
        &mq_config(&testkit::kafka_bootstrap(), &testkit::unique("ns")),
        &worker_config("relay-leases"),
    );
    own_all_shards(&relay).await;
    let leases = run_json(&db, &["leases"]);
    assert_eq!(leases["shards"].as_array().unwrap().len(), 64);
    assert_eq!(leases["shards"][5]["owner"], "relay-leases");
    assert_eq!(leases["shards"][5]["live"], true);
    assert_eq!(leases["instances"][0]["instance_id"], "relay-leases");
    assert_eq!(leases["instances"][0]["live_shards"], 64);
    assert_eq!(leases["uncovered_shards"], serde_json::json!([]));
    let table = String::from_utf8(run(&db, &["leases"]).stdout).unwrap();
    assert!(
        table.contains("relay-leases") && table.contains("live"),
        "{table}"
    );
    let base = serve_admin(&db.pool).await;
    let http: Value = reqwest::Client::new()
        .get(format!("{base}/admin/leases"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(http["shards"], leases["shards"]);
    assert_eq!(http["instances"][0]["live_shards"], 64);

    // Purge: one audit row carrying exactly the rows it deleted.
    insert(&db.pool, &room_rows("room-old", 1, 3)).await;
    sqlx::query(
        "UPDATE room_outbox SET status = 'delivered', created_at_ms = 1 WHERE room_event_seq < 3",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let purged = run_json(
        &db,
        &[
            "purge",
            "--retention",
            "1d",
            "--operator",
            "erin",
            "--reason",
            "weekly",
        ],
    );
    assert_eq!(purged["deleted"], 2);
    let audit = run_json(&db, &["audit", "--since", "2h", "--action", "purge"]);
    assert_eq!(audit.as_array().unwrap().len(), 1);
    assert_eq!(
        (
            audit[0]["operator"].as_str(),
            audit[0]["row_count"].as_u64()
        ),
        (Some("erin"), Some(2))
    );
    assert_eq!(audit[0]["reason"], "weekly");
    assert_eq!(
        run_json(&db, &["audit", "--action", "skip"]),
        serde_json::json!([])
    );
    assert_eq!(
        run_json(&db, &["audit", "--room-id", "room-old"]),
        serde_json::json!([])
    );
    let table = String::from_utf8(run(&db, &["audit"]).stdout).unwrap();
    assert!(table.contains("erin") && table.contains("purge"), "{table}");
}
