//! Refusals of the operator commands, through the admin router and the real
//! binary: missing reason or operator, rows in a state a command does not
//! apply to, unknown rooms and events, hostile ids and values — each a
//! precise error (400/404/409, or a non-zero exit naming the rule), and not
//! one row or audit row written.

mod common;

use common::operator::*;
use common::*;
use outbox_relay::admin;
use service_kit::time::now_ms;

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
            // The body is JSON, so the refusal's `'\n'` arrives escaped.
            "unprintable character '\\\\n' at position 1",
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
