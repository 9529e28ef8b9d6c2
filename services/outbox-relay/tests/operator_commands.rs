//! The operator commands end to end: `room`, `retry-now`, `skip`, `leases`,
//! `audit` and `purge` through the real binary and through the real admin
//! router, with a real relay publishing to the broker to show that a
//! released room flows, and exactly one audit row per mutation.

mod common;

use common::operator::*;
use common::*;
use outbox_relay::admin;
use serde_json::Value;

#[tokio::test]
async fn room_shows_the_retrying_head_and_retry_now_releases_it() {
    let db = testkit::TestDb::new().await;
    let events = room_with_backed_off_head(&db.pool, "room-a", 3).await;
    let worker = worker_config("relay-ops-a");
    let mq = mq_config(&testkit::kafka_bootstrap(), &testkit::unique("ns"));
    let topic = mq.topic(outbox_schema::names::TOPIC_ROOM_OUTBOX);
    testkit::create_topic(&topic, 1).await;
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
async fn leases_audit_and_purge_through_both_surfaces() {
    let db = testkit::TestDb::new().await;
    // A relay instance's lease round, as its lease loop runs it when alone.
    let instance =
        relay_engine::leases::ShardLeases::new(db.pool.clone(), "relay-leases".into(), 60_000);
    instance.ensure_shards().await.unwrap();
    assert_eq!(
        instance
            .refresh(service_kit::time::now_ms())
            .await
            .unwrap()
            .len(),
        64
    );
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
