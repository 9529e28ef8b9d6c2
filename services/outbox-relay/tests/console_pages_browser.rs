//! The console's searchable pages in headless Chromium (`testkit::browser`),
//! driven as an on-call person would: the dead letters' second page through
//! the Next link and a search by event id in the page's form; a room's
//! timeline with each group's applied (ms and lags), pending and not
//! consumed by design; the audit trail filtered through its form. Each
//! step is saved as a screenshot under `target/console-screenshots/`.

mod browser;
mod common;

use browser::{DEADLINE, Row, applied, column, insert, log_in, screenshots};
use common::console::{ADMIN, serve_console};
use outbox_relay::console::html::utc_ms;
use outbox_schema::names;
use testkit::browser::Browser;

const MINUTE: i64 = 60_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dead_letters_page_on_and_are_found_by_event_id_in_a_browser() {
    let db = testkit::TestDb::new().await;
    let now = service_kit::time::now_ms();
    let ids: Vec<String> = (0..55).map(|n| format!("dl-{n:03}")).collect();
    for (n, id) in ids.iter().enumerate() {
        let n = i64::try_from(n).unwrap();
        let room = format!("room-{}", n % 5);
        insert(
            &db.pool,
            &Row {
                event_id: id,
                room_id: &room,
                seq: n,
                event_type: "RoomGiftSent",
                status: "failed",
                created_at_ms: now - 10 * MINUTE + n,
                delivered_at_ms: 0,
                next_retry_at_ms: now,
            },
        )
        .await;
    }
    let base = serve_console(&db.pool).await;
    let shots = screenshots();
    let browser = Browser::start().await;
    log_in(&browser, &base, ADMIN).await;

    // The first page: 50 in commit order, and a link to the rest.
    browser.goto(&format!("{base}/console/dead-letters")).await;
    browser
        .wait_for_page_text("50 dead letters on this page", DEADLINE)
        .await;
    assert_eq!(column(&browser, "dead-letters", 3).await, ids[..50]);
    browser.click(&browser.find("#next-page").await).await;
    let second = browser
        .wait_for_page_text("5 dead letters on this page", DEADLINE)
        .await;
    assert_eq!(column(&browser, "dead-letters", 3).await, ids[50..]);
    assert!(
        browser.find_all("#next-page").await.is_empty(),
        "the last page has no next: {second}"
    );
    browser
        .screenshot(&shots.join("dead-letters-page-2.png"))
        .await;

    // One event by its id, typed into the page's search form.
    browser
        .type_into(
            &browser.find("#search input[name=event_id]").await,
            "dl-007",
        )
        .await;
    browser
        .click(&browser.find("#search button[type=submit]").await)
        .await;
    browser
        .wait_for_page_text("1 dead letters on this page", DEADLINE)
        .await;
    assert_eq!(column(&browser, "dead-letters", 3).await, ["dl-007"]);
    assert!(browser.url().await.contains("event_id=dl-007"));
    browser
        .screenshot(&shots.join("dead-letters-by-event-id.png"))
        .await;
    browser.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_timeline_tells_applied_pending_and_not_consumed_by_design_in_a_browser() {
    let db = testkit::TestDb::new().await;
    let pool = &db.pool;
    let now = service_kit::time::now_ms();
    let committed = now - 5 * MINUTE;
    let row = |event_id, seq, event_type, status, delivered_at_ms| Row {
        event_id,
        room_id: "room-t",
        seq,
        event_type,
        status,
        created_at_ms: committed + seq * 1_000,
        delivered_at_ms,
        next_retry_at_ms: committed,
    };
    // A gift, delivered 40 ms after commit; im-bridge applied it 65 ms and
    // activity 1,300 ms after commit. Notice does not take gifts.
    insert(
        pool,
        &row("e-gift", 1, "RoomGiftSent", "delivered", committed + 1_040),
    )
    .await;
    applied(pool, names::GROUP_IM_BRIDGE, "e-gift", committed + 1_065).await;
    applied(pool, names::GROUP_ACTIVITY, "e-gift", committed + 2_300).await;
    // Heat: nobody applies it, by design.
    insert(
        pool,
        &row(
            "e-heat",
            2,
            "RoomHeatChanged",
            "delivered",
            committed + 2_030,
        ),
    )
    .await;
    // A kick not yet published: im-bridge and notice have it pending.
    insert(pool, &row("e-kick", 3, "RoomUserKicked", "pending", 0)).await;

    let base = serve_console(pool).await;
    let shots = screenshots();
    let browser = Browser::start().await;
    log_in(&browser, &base, ADMIN).await;
    browser.goto(&format!("{base}/console/rooms")).await;
    browser
        .type_into(&browser.find("#room-id").await, "room-t")
        .await;
    browser
        .click(&browser.find("form[action='/console/rooms'] button").await)
        .await;
    browser
        .wait_for_page_text("3 events on this page", DEADLINE)
        .await;
    // Columns: seq, type, event, status, …, commit → publish (7), trace
    // (8), then im-bridge, activity, notice.
    assert_eq!(
        column(&browser, "timeline", 2).await,
        ["e-gift", "e-heat", "e-kick"]
    );
    let publish = column(&browser, "timeline", 7).await;
    assert!(publish[0].starts_with("40 ms"), "{publish:?}");
    assert_eq!(publish[2], "not published");
    let bridge = column(&browser, "timeline", 9).await;
    assert!(
        bridge[0].starts_with(&format!("applied {}", utc_ms(committed + 1_065))),
        "to the millisecond: {bridge:?}"
    );
    assert!(
        bridge[0].contains("65 ms after commit, 25 ms after publish"),
        "{bridge:?}"
    );
    assert_eq!(bridge[1..], ["not consumed by design", "pending"]);
    let activity = column(&browser, "timeline", 10).await;
    assert!(activity[0].contains("1.3 s after commit"), "{activity:?}");
    assert_eq!(activity[1..], ["not consumed by design"; 2]);
    let notice = column(&browser, "timeline", 11).await;
    assert_eq!(
        notice,
        [
            "not consumed by design",
            "not consumed by design",
            "pending"
        ]
    );
    assert_eq!(
        column(&browser, "timeline", 8).await,
        ["4bf92f3577b34da6a3ce929d0e0e4736"; 3],
        "the trace id of each row (no trace URL configured)"
    );
    browser.screenshot(&shots.join("timeline-groups.png")).await;
    browser.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_trail_is_filtered_through_its_form_in_a_browser() {
    let db = testkit::TestDb::new().await;
    let now = service_kit::time::now_ms();
    let entries = [
        ("alice", "skip", "room-a", "e-1"),
        ("bob", "retry_now", "room-a", "e-2"),
        ("alice", "replay", "room-b", ""),
        ("carol", "skip", "room-b", "e-3"),
        ("alice", "skip", "room-c", "e-4"),
    ];
    for (n, (operator, action, room, event)) in entries.iter().enumerate() {
        sqlx::query(
            "INSERT INTO relay_operator_audit (at_ms, operator, action, room_id, event_id, \
             row_count, reason, detail) VALUES (?, ?, ?, ?, ?, 1, 'ticket 7', '')",
        )
        .bind(now - MINUTE + i64::try_from(n).unwrap() * 1_000)
        .bind(operator)
        .bind(action)
        .bind(room)
        .bind(event)
        .execute(&db.pool)
        .await
        .unwrap();
    }
    let base = serve_console(&db.pool).await;
    let shots = screenshots();
    let browser = Browser::start().await;
    log_in(&browser, &base, ADMIN).await;
    browser.goto(&format!("{base}/console/audit")).await;
    browser
        .wait_for_page_text("5 audit rows on this page", DEADLINE)
        .await;
    // Columns: id, at, operator (2), action (3), room (4), event (5).
    browser
        .click(
            &browser
                .find("#search select[name=action] option[value=skip]")
                .await,
        )
        .await;
    browser
        .type_into(&browser.find("#search input[name=operator]").await, "alice")
        .await;
    browser
        .click(&browser.find("#search button[type=submit]").await)
        .await;
    browser
        .wait_for_page_text("2 audit rows on this page", DEADLINE)
        .await;
    assert_eq!(column(&browser, "audit", 3).await, ["skip", "skip"]);
    assert_eq!(column(&browser, "audit", 2).await, ["alice", "alice"]);
    assert_eq!(
        column(&browser, "audit", 5).await,
        ["e-4", "e-1"],
        "newest first"
    );
    let url = browser.url().await;
    assert!(
        url.contains("action=skip") && url.contains("operator=alice"),
        "{url}"
    );
    browser.screenshot(&shots.join("audit-filtered.png")).await;
    // The form keeps the filter; a room narrows it further.
    browser
        .type_into(&browser.find("#search input[name=room_id]").await, "room-c")
        .await;
    browser
        .click(&browser.find("#search button[type=submit]").await)
        .await;
    browser
        .wait_for_page_text("1 audit rows on this page", DEADLINE)
        .await;
    assert_eq!(column(&browser, "audit", 5).await, ["e-4"]);
    browser.quit().await;
}
