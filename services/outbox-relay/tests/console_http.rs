//! The console's security at the HTTP level: login refuses a wrong token and
//! issues a strict cookie, no token ever appears in a URL, redirect or log
//! line, mutations need the session's CSRF token and a same-origin request,
//! read-only sessions see pages and are refused every mutation, and hostile
//! room ids, payloads and errors are rendered escaped. Every refusal is
//! checked to have written nothing.

mod common;

use common::console::*;
use common::log::CapturedLog;
use common::operator::{audit_rows, room_with_backed_off_head, snapshot};
use common::*;
use room_core::EventKind;

#[tokio::test]
async fn login_refuses_a_wrong_token_and_never_puts_one_in_a_url_or_log() {
    let log = CapturedLog::default();
    let _guard = tracing::subscriber::set_default(log.subscriber());
    let db = testkit::TestDb::new().await;
    let base = serve_console(&db.pool).await;

    // No session: to the login page, whose form posts the token.
    let response = client()
        .get(format!("{base}/console"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 303);
    assert_eq!(response.headers()["location"], "/console/login");
    let (_, login_page) = get(&base, "/console/login", "").await;
    assert!(login_page.contains("method=\"post\" action=\"/console/login\""));
    assert!(login_page.contains("type=\"password\" name=\"token\""));

    // A wrong token: 401, no cookie.
    let wrong = client()
        .post(format!("{base}/console/login"))
        .form(&[("token", "not-the-token")])
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    assert!(wrong.headers().get("set-cookie").is_none());
    assert!(wrong.text().await.unwrap().contains("Wrong token."));
    // A token in the query string does not log anyone in.
    let in_url = client()
        .get(format!("{base}/console/login?token={ADMIN}"))
        .send()
        .await
        .unwrap();
    assert!(in_url.headers().get("set-cookie").is_none());
    let in_url = client()
        .post(format!("{base}/console/login?token={ADMIN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(in_url.status(), 401);

    // The right token: a strict cookie that does not hold the token, and a
    // redirect to a fixed path.
    let right = client()
        .post(format!("{base}/console/login"))
        .form(&[("token", ADMIN)])
        .send()
        .await
        .unwrap();
    assert_eq!(right.status(), 303);
    assert_eq!(right.headers()["location"], "/console");
    let set_cookie = right.headers()["set-cookie"].to_str().unwrap().to_owned();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/console", "Max-Age="] {
        assert!(set_cookie.contains(attribute), "{set_cookie}");
    }
    assert!(!set_cookie.contains(ADMIN), "{set_cookie}");
    let cookie = set_cookie.split(';').next().unwrap().to_owned();
    let page = client()
        .get(format!("{base}/console"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let csp = page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        csp.contains("default-src 'none'") && !csp.contains("unsafe"),
        "{csp}"
    );
    assert_eq!(page.headers()["cache-control"], "no-store");
    let body = page.text().await.unwrap();
    assert!(
        body.contains("<h1>Overview</h1>") && !body.contains("<script"),
        "{body}"
    );
    assert!(!body.contains(ADMIN));
    // A tampered cookie is no session.
    let tampered = cookie.replace(".rw.", ".ro.");
    assert_eq!(get(&base, "/console", &tampered).await.0, 303);
    // A bearer header works for scripts; a wrong one does not.
    let bearer = |token: &str| {
        client()
            .get(format!("{base}/console/stuck"))
            .bearer_auth(token)
            .send()
    };
    assert_eq!(bearer(ADMIN).await.unwrap().status(), 200);
    assert_eq!(bearer("nope").await.unwrap().status(), 303);

    let logged = log.text();
    assert!(
        logged.contains("console login refused: wrong token"),
        "{logged}"
    );
    assert!(logged.contains("console login"), "{logged}");
    for secret in [ADMIN, READER] {
        assert!(!logged.contains(secret), "token in the log:\n{logged}");
    }
}

#[tokio::test]
async fn mutations_need_the_session_csrf_token_and_a_same_origin_request() {
    let db = testkit::TestDb::new().await;
    let events = room_with_backed_off_head(&db.pool, "room-csrf", 2).await;
    let base = serve_console(&db.pool).await;
    let cookie = login(&base, ADMIN).await;
    let (status, page) = get(&base, "/console/stuck", &cookie).await;
    assert_eq!(status, 200);
    assert!(page.contains(&events[0]), "{page}");
    let csrf = csrf_of(&page);
    let before = snapshot(&db.pool).await;
    let skip = |csrf: String| {
        vec![
            ("csrf", csrf),
            ("room_id", "room-csrf".to_owned()),
            ("operator", "alice".to_owned()),
            ("reason", "payload breaks IM".to_owned()),
        ]
    };
    let host = base.trim_start_matches("http://").to_owned();
    let same_origin = [("origin", base.as_str()), ("sec-fetch-site", "same-origin")];
    // (name, headers, csrf token, expected status)
    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, String, u16);
    let cases: Vec<Case<'_>> = vec![
        ("no csrf token", same_origin.to_vec(), String::new(), 403),
        (
            "a wrong csrf token",
            same_origin.to_vec(),
            "0".repeat(64),
            403,
        ),
        (
            "another site's origin",
            vec![("origin", "http://evil.example")],
            csrf.clone(),
            403,
        ),
        (
            "a cross-site fetch",
            vec![("sec-fetch-site", "cross-site")],
            csrf.clone(),
            403,
        ),
        (
            "a same-site fetch from another port",
            vec![("sec-fetch-site", "same-site")],
            csrf.clone(),
            403,
        ),
    ];
    for (name, headers, token, expected) in cases {
        let form = skip(token);
        let form: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let (status, body) = post(&base, "/console/stuck/skip", &cookie, &headers, &form).await;
        assert_eq!(status, expected, "{name}: {body}");
        assert_eq!(snapshot(&db.pool).await, before, "{name} wrote something");
    }
    // Without a session at all: 401.
    let form = skip(csrf.clone());
    let form: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (status, _) = post(&base, "/console/stuck/skip", "", &same_origin, &form).await;
    assert_eq!(status, 401);
    // No operator: a precise 400, nothing written.
    let (status, body) = post(
        &base,
        "/console/stuck/skip",
        &cookie,
        &same_origin,
        &[
            ("csrf", &csrf),
            ("room_id", "room-csrf"),
            ("operator", ""),
            ("reason", "x"),
        ],
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("operator is required"), "{body}");
    assert_eq!(snapshot(&db.pool).await, before);

    // The real thing: same origin, the session's token.
    let _ = host;
    let (status, body) = post(&base, "/console/stuck/skip", &cookie, &same_origin, &form).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("skip by alice"), "{body}");
    assert_eq!(
        audit_rows(&db.pool).await,
        vec![(
            "alice".into(),
            "skip".into(),
            "room-csrf".into(),
            events[0].clone(),
            1,
            "payload breaks IM".into()
        )]
    );
    assert_eq!(statuses(&db.pool, "room-csrf").await[0].1, "failed");
}

#[tokio::test]
async fn read_only_sessions_see_every_page_and_are_refused_every_mutation() {
    let db = testkit::TestDb::new().await;
    let events = room_with_backed_off_head(&db.pool, "room-ro", 2).await;
    sqlx::query("UPDATE room_outbox SET status = 'failed' WHERE event_id = ?")
        .bind(&events[1])
        .execute(&db.pool)
        .await
        .unwrap();
    let base = serve_console(&db.pool).await;
    let cookie = login(&base, READER).await;
    for path in [
        "/console",
        "/console/stuck",
        "/console/dead-letters",
        "/console/dead-letters/dry-run",
        "/console/audit",
        "/console/rooms?room_id=room-ro",
    ] {
        let (status, body) = get(&base, path, &cookie).await;
        assert_eq!(status, 200, "{path}: {body}");
        assert!(body.contains("read-only"), "{path}");
    }
    let (_, stuck) = get(&base, "/console/stuck", &cookie).await;
    assert!(stuck.contains("Read-only session: no actions."), "{stuck}");
    assert!(!stuck.contains("/console/stuck/skip\""), "no action forms");
    let csrf = csrf_of(&stuck);
    let before = snapshot(&db.pool).await;
    let same_origin = [("origin", base.as_str())];
    for (path, form) in [
        (
            "/console/stuck/skip",
            vec![
                ("csrf", csrf.as_str()),
                ("room_id", "room-ro"),
                ("operator", "eve"),
                ("reason", "x"),
            ],
        ),
        (
            "/console/stuck/retry-now",
            vec![
                ("csrf", csrf.as_str()),
                ("room_id", "room-ro"),
                ("operator", "eve"),
            ],
        ),
        (
            "/console/dead-letters/replay",
            vec![
                ("csrf", csrf.as_str()),
                ("room_id", "room-ro"),
                ("operator", "eve"),
            ],
        ),
    ] {
        let (status, body) = post(&base, path, &cookie, &same_origin, &form).await;
        assert_eq!(status, 403, "{path}: {body}");
        assert!(
            body.contains("read-only session may not change anything"),
            "{body}"
        );
        // The read-only token as a bearer header is refused the same way.
        let bearer = client()
            .post(format!("{base}{path}"))
            .bearer_auth(READER)
            .form(&form)
            .send()
            .await
            .unwrap();
        assert_eq!(bearer.status(), 403, "{path} by bearer");
    }
    assert_eq!(
        snapshot(&db.pool).await,
        before,
        "a refused mutation wrote something"
    );
}

#[tokio::test]
async fn hostile_payloads_errors_and_room_ids_are_rendered_escaped() {
    let db = testkit::TestDb::new().await;
    let hostile = "<script>alert(1)</script>";
    let row = event_row(
        "room-xss",
        1,
        EventKind::RoomUserJoined {
            user_id: hostile.into(),
        },
    );
    insert(&db.pool, std::slice::from_ref(&row)).await;
    sqlx::query(
        "UPDATE room_outbox SET status = 'retryable', retry_count = 1, next_retry_at_ms = ?, \
         last_error = '<img src=x onerror=alert(2)>' WHERE event_id = ?",
    )
    .bind(service_kit::time::now_ms() + 600_000)
    .bind(&row.event_id)
    .execute(&db.pool)
    .await
    .unwrap();
    let base = serve_console(&db.pool).await;
    let cookie = login(&base, ADMIN).await;
    let (status, page) = get(&base, "/console/stuck", &cookie).await;
    assert_eq!(status, 200);
    assert!(
        page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{page}"
    );
    assert!(
        page.contains("&lt;img src=x onerror=alert(2)&gt;"),
        "{page}"
    );
    assert!(!page.contains(hostile) && !page.contains("<img"), "{page}");
    // The payload is decoded to JSON: the field names are there.
    assert!(page.contains("&quot;user_id&quot;"), "{page}");

    // A hostile room id is refused precisely, and echoed escaped.
    let (status, page) = get(
        &base,
        "/console/rooms?room_id=%3Cscript%3Ealert(3)%3C%2Fscript%3E",
        &cookie,
    )
    .await;
    assert_eq!(status, 400, "{page}");
    assert!(page.contains("room_id has"), "{page}");
    assert!(!page.contains("<script>alert(3)"), "{page}");
    assert!(
        page.contains("&lt;script&gt;alert(3)&lt;/script&gt;"),
        "{page}"
    );
    let (status, page) = get(
        &base,
        "/console/dead-letters?room_id=%22%3E%3Cb%3Ex&since=2h",
        &cookie,
    )
    .await;
    assert_eq!(status, 400, "{page}");
    assert!(!page.contains("\"><b>x"), "{page}");
}

#[tokio::test]
async fn the_timeline_shows_when_each_group_applied_each_event() {
    let db = testkit::TestDb::new().await;
    let rows = room_rows("room-tl", 1, 2);
    insert(&db.pool, &rows).await;
    sqlx::query(
        "UPDATE room_outbox SET status = 'delivered', delivered_at_ms = ? WHERE event_id = ?",
    )
    .bind(1_764_633_600_000_i64)
    .bind(&rows[0].event_id)
    .execute(&db.pool)
    .await
    .unwrap();
    // The notice group applied the first event; nobody the second.
    sqlx::query(
        "INSERT INTO consumer_dedup (consumer_group, event_id, processed_at_ms) VALUES (?, ?, ?)",
    )
    .bind(outbox_schema::names::GROUP_NOTICE)
    .bind(&rows[0].event_id)
    .bind(1_764_633_601_000_i64)
    .execute(&db.pool)
    .await
    .unwrap();
    let base = serve_console(&db.pool).await;
    let cookie = login(&base, ADMIN).await;
    let (status, page) = get(&base, "/console/rooms?room_id=room-tl", &cookie).await;
    assert_eq!(status, 200, "{page}");
    let first = page.find(&rows[0].event_id).expect("first event listed");
    let second = page.find(&rows[1].event_id).expect("second event listed");
    assert!(first < second, "commit order");
    let first_row = &page[first..second];
    assert!(
        first_row.contains("2025-12-02 00:00:00"),
        "delivered: {first_row}"
    );
    assert!(
        first_row.contains("applied 2025-12-02 00:00:01.000"),
        "applied by notice, to the millisecond: {first_row}"
    );
    assert!(first_row.contains("1.0 s after publish"), "{first_row}");
    let second_row = &page[second..];
    assert!(!second_row.contains("applied 20"), "{second_row}");
    // Each group is pending or, for a type it does not handle, not
    // consumed by design; never a bare "not yet".
    assert!(!page.contains("not yet"), "{page}");
    assert!(
        second_row.contains("class=\"pending\"") || second_row.contains("not consumed by design"),
        "{second_row}"
    );
    // A room with no rows: a precise 404.
    let (status, page) = get(&base, "/console/rooms?room_id=room-none", &cookie).await;
    assert_eq!(status, 404, "{page}");
    assert!(
        page.contains("room `room-none` has no chain rows"),
        "{page}"
    );
}
