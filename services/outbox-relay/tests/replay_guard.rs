//! The dead-letter replay's retention guard (`ops.replay_max_age`): a dead
//! letter committed longer ago than consumers deduplicate is refused by
//! every surface — admin HTTP, the console, the CLI — with nothing changed
//! and the setting named; a dry run says which rows and why; a forced
//! replay goes through and its audit row says it was forced.

mod common;

use common::console::*;
use common::operator::{TOKEN, run, run_refused, serve_admin, snapshot};
use common::*;
use service_kit::time::now_ms;
use sqlx::MySqlPool;

const DAY_MS: i64 = 86_400_000;

/// One dead letter of `room`, committed `age_ms` ago; its event id.
async fn dead_letter(pool: &MySqlPool, room: &str, age_ms: i64) -> String {
    let rows = room_rows(room, 1, 1);
    insert(pool, &rows).await;
    sqlx::query(
        "UPDATE room_outbox SET status = 'failed', retry_count = 10, last_error = 'bad payload', \
         created_at_ms = ? WHERE event_id = ?",
    )
    .bind(now_ms() - age_ms)
    .bind(&rows[0].event_id)
    .execute(pool)
    .await
    .unwrap();
    rows[0].event_id.clone()
}

async fn status_of(pool: &MySqlPool, event_id: &str) -> String {
    sqlx::query_scalar("SELECT status FROM room_outbox WHERE event_id = ?")
        .bind(event_id)
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn replay_details(pool: &MySqlPool) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT detail FROM relay_operator_audit WHERE action = 'replay' ORDER BY id",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn admin_http_refuses_an_old_dead_letter_unless_forced() {
    let db = testkit::TestDb::new().await;
    let old = dead_letter(&db.pool, "room-old", 8 * DAY_MS).await;
    let young = dead_letter(&db.pool, "room-young", DAY_MS).await;
    let base = serve_admin(&db.pool).await;
    let replay = |query: &str| {
        client()
            .post(format!("{base}/admin/dead-letters/replay?{query}"))
            .bearer_auth(TOKEN)
            .header("x-operator", "oncall")
            .send()
    };

    // The dry run names the old row and why.
    let dry: serde_json::Value = replay("dry_run=true").await.unwrap().json().await.unwrap();
    assert_eq!(dry["replayed"].as_array().unwrap().len(), 2);
    let too_old = dry["too_old"].as_array().unwrap();
    assert_eq!(too_old.len(), 1, "{dry}");
    assert_eq!(too_old[0]["event_id"], old.as_str());
    assert!(
        too_old[0]["why"]
            .as_str()
            .unwrap()
            .contains("ops.replay_max_age")
    );

    // Refused whole: nothing changed, nothing audited.
    let before = snapshot(&db.pool).await;
    let refused = replay("").await.unwrap();
    assert_eq!(refused.status(), 409);
    let error = refused.text().await.unwrap();
    assert!(
        error.contains("ops.replay_max_age") && error.contains(&old),
        "{error}"
    );
    assert_eq!(snapshot(&db.pool).await, before);

    // Narrowed to the young row: replayed.
    assert_eq!(replay("room_id=room-young").await.unwrap().status(), 200);
    assert_eq!(status_of(&db.pool, &young).await, "pending");
    assert_eq!(status_of(&db.pool, &old).await, "failed");

    // Forced: replayed, and the audit says so.
    let forced: serde_json::Value = replay("force=true").await.unwrap().json().await.unwrap();
    assert_eq!(forced["forced"], true, "{forced}");
    assert_eq!(status_of(&db.pool, &old).await, "pending");
    let details = replay_details(&db.pool).await;
    assert_eq!(details.len(), 2);
    assert!(!details[0].contains("forced"), "{}", details[0]);
    assert!(
        details[1].starts_with("forced past ops.replay_max_age=7d"),
        "{}",
        details[1]
    );
}

#[tokio::test]
async fn the_console_refuses_an_old_dead_letter_until_the_force_box_is_ticked() {
    let db = testkit::TestDb::new().await;
    let old = dead_letter(&db.pool, "room-old", 8 * DAY_MS).await;
    let base = serve_console(&db.pool).await;
    let cookie = login(&base, ADMIN).await;
    let (status, page) = get(
        &base,
        "/console/dead-letters/dry-run?room_id=room-old",
        &cookie,
    )
    .await;
    assert_eq!(status, 200);
    assert!(
        page.contains("id=\"too-old\"") && page.contains("ops.replay_max_age"),
        "{page}"
    );
    assert!(page.contains("name=\"force\""), "{page}");
    let csrf = csrf_of(&page);
    let form = |force: &'static str| {
        vec![
            ("csrf", csrf.clone()),
            ("room_id", "room-old".to_owned()),
            ("operator", "oncall".to_owned()),
            ("force", force.to_owned()),
        ]
    };
    let send = |form: Vec<(&'static str, String)>| {
        let base = base.clone();
        let cookie = cookie.clone();
        async move {
            let form: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
            post(&base, "/console/dead-letters/replay", &cookie, &[], &form).await
        }
    };
    let (status, body) = send(form("")).await;
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("ops.replay_max_age"), "{body}");
    assert_eq!(status_of(&db.pool, &old).await, "failed");
    let (status, body) = send(form("true")).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("forced past ops.replay_max_age"), "{body}");
    assert_eq!(status_of(&db.pool, &old).await, "pending");
    assert!(replay_details(&db.pool).await[0].starts_with("forced"));
}

#[tokio::test]
async fn the_cli_refuses_an_old_dead_letter_unless_forced() {
    let db = testkit::TestDb::new().await;
    let old = dead_letter(&db.pool, "room-old", 8 * DAY_MS).await;
    let dry = run(&db, &["dead-letters", "replay", "--dry-run"]);
    let text = String::from_utf8_lossy(&dry.stdout);
    assert!(
        text.contains("refused unless --force") && text.contains(&old),
        "{text}"
    );
    let refused = run_refused(&db, &["dead-letters", "replay", "--operator", "oncall"]);
    assert!(refused.contains("ops.replay_max_age"), "{refused}");
    assert_eq!(status_of(&db.pool, &old).await, "failed");
    let forced = run(
        &db,
        &["dead-letters", "replay", "--operator", "oncall", "--force"],
    );
    assert!(
        forced.status.success(),
        "{}",
        String::from_utf8_lossy(&forced.stderr)
    );
    assert_eq!(status_of(&db.pool, &old).await, "pending");
    assert!(replay_details(&db.pool).await[0].starts_with("forced"));
}
