//! The console's searches on a million-row outbox (`million::fill`): every
//! statement of the listings and the overview's counts EXPLAINed (each
//! table read through the index it names, never scanned), and every
//! listing's page — stuck rooms, dead letters, a room's timeline, the audit
//! trail — with and without filters, first and later pages, reads a
//! bounded number of rows however large the table (the server's own count,
//! `Handler_read_*`, on a connection of its own; a room filter on the stuck
//! rooms or dead letters is bounded by that status's rows, printed), and a
//! page's cursor is keyset: a page read again after inserts shows the same
//! rows, and the next page starts exactly after it (no OFFSET). A search
//! for an event type no row has stops at the window and says how far it
//! searched instead of walking the table.

mod million;

use million::{EPOCH_MS, fill};
use outbox_relay::console::audit_search::{self, AUDIT_QUERIES, AuditForm};
use outbox_relay::console::counts::COUNT_QUERIES;
use outbox_relay::console::search::{self, PAGE, Page, SEARCH_QUERIES, Scope, SearchForm, WINDOW};
use sqlx::{MySqlPool, Row, mysql::MySqlPoolOptions};

/// Rows the server read while `run` ran on `pool`'s one connection.
async fn rows_read<T>(pool: &MySqlPool, run: impl std::future::Future<Output = T>) -> (u64, T) {
    sqlx::raw_sql("FLUSH STATUS").execute(pool).await.unwrap();
    let value = run.await;
    let status = sqlx::raw_sql("SHOW SESSION STATUS LIKE 'Handler_read%'")
        .fetch_all(pool)
        .await
        .unwrap();
    let read = status
        .iter()
        .map(|row| row.get::<String, _>(1).parse::<u64>().unwrap())
        .sum();
    (read, value)
}

/// A bound value of an EXPLAINed statement.
#[derive(Debug, Clone, Copy)]
enum Bind {
    Text(&'static str),
    Number(i64),
}

use Bind::{Number, Text};

/// Representative binds of each named console statement, in order; a
/// statement added to the lists without them fails the test.
fn binds_of(name: &str) -> Vec<Bind> {
    let window = Number(i64::try_from(WINDOW).unwrap());
    let page = Number(i64::try_from(PAGE).unwrap() + 1);
    let any = Text("");
    let audit = [
        Number(0),
        Number(i64::MAX),
        Number(i64::MAX),
        Number(i64::MAX),
        Number(i64::MAX),
        window,
    ];
    let filters = [any, any, any, any, any, any, page];
    match name {
        "failing_page" => vec![
            Text("failed"),
            Number(0),
            any,
            any,
            window,
            any,
            any,
            any,
            any,
            Number(0),
            Number(i64::MAX),
            page,
        ],
        "failing_window" => vec![Text("failed"), Number(0), any, any, window],
        "room_page" => vec![
            Text("room-7"),
            Number(i64::MAX),
            window,
            any,
            any,
            any,
            any,
            Number(0),
            Number(i64::MAX),
            page,
        ],
        "room_window" => vec![Text("room-7"), Number(i64::MAX), window],
        "by_event" => vec![Text("000000000000000000000000000000004202")],
        "audit_page" => [&audit[..], &filters[..]].concat(),
        "audit_room_page" => [&[Text("room-2")], &audit[..], &filters[..]].concat(),
        "audit_window" => audit.to_vec(),
        "audit_room_window" => [&[Text("room-2")], &audit[..]].concat(),
        "open_capped" => vec![Number(10_001)],
        "failing_capped" => vec![Text("failed"), Number(10_001)],
        other => panic!("no binds for the console statement {other}"),
    }
}

/// Every named console statement's plan: each table of the outbox or the
/// audit trail read through the index the statement names, never scanned
/// (a derived table, bounded by its LIMIT, may be read whole).
async fn check_plans(pool: &MySqlPool) {
    let named = SEARCH_QUERIES
        .iter()
        .chain(AUDIT_QUERIES)
        .chain(COUNT_QUERIES);
    for (name, sql) in named {
        let mut explain = sqlx::QueryBuilder::new("EXPLAIN ");
        explain.push(*sql);
        let mut query = explain.build();
        for bind in binds_of(name) {
            query = match bind {
                Text(text) => query.bind(text),
                Number(number) => query.bind(number),
            };
        }
        let steps = query.fetch_all(pool).await.unwrap();
        let mut tables = 0;
        for step in &steps {
            let text = |column: &str| {
                step.try_get::<Option<String>, _>(column)
                    .ok()
                    .flatten()
                    .unwrap_or_default()
            };
            let (table, kind, key) = (text("table"), text("type"), text("key"));
            if table.starts_with("<derived") {
                continue;
            }
            tables += 1;
            assert!(
                kind != "ALL" && kind != "index" && !key.is_empty(),
                "{name}: {table} read by {kind} on `{key}`"
            );
        }
        assert!(tables > 0, "{name}: no table in its plan");
    }
}

/// A page of `scope` for `form`, and the rows it read.
async fn page_of(pool: &MySqlPool, scope: Scope<'_>, form: &SearchForm) -> (u64, Page) {
    let search = form.checked().unwrap();
    rows_read(pool, async {
        search::page(pool, scope, &search, PAGE).await.unwrap()
    })
    .await
}

/// The ceiling of one page's reads: its two statements (the page, and the
/// window's reach when the page is not full), each at most the window's
/// index entries, read back once from the derived table, and their rows;
/// never the table.
const CEILING: u64 = 6 * WINDOW + 4 * PAGE as u64;
/// Retrying rows in the fill (1 in 100). A room filter walks its status's
/// range of idx_failing (the room is the index's last column, the window
/// counts matches), so it is bounded by the failing rows, not the table.
const RETRYABLE: u64 = million::ROWS / 100;

#[tokio::test]
async fn every_listing_reads_a_bounded_window_and_pages_by_keyset_on_a_million() {
    let db = testkit::TestDb::new().await;
    fill(&db.pool).await;
    let pool = MySqlPoolOptions::new()
        .max_connections(1)
        .connect(&db.url)
        .await
        .unwrap();
    let pool = &pool;
    check_plans(pool).await;
    let failed = Scope::Failing("failed");
    let mut measured = Vec::new();

    // Dead letters, first page and the next: keyset, in commit order.
    let (read, first) = page_of(pool, failed, &SearchForm::default()).await;
    measured.push(("dead letters, first page", read));
    assert_eq!(first.rows.len(), PAGE);
    let after = first.next_after.expect("a next page");
    assert_eq!(after, first.rows.last().unwrap().row.id);
    let next_form = SearchForm {
        after: after.to_string(),
        ..SearchForm::default()
    };
    let (read, second) = page_of(pool, failed, &next_form).await;
    measured.push(("dead letters, second page", read));
    assert!(second.rows[0].row.id > after, "starts after the cursor");
    // Dead letters are 1 row in 100: the second page's first is the next.
    assert_eq!(second.rows[0].row.id, after + 100);

    // Inserts do not move a page: the same cursor, the same rows.
    sqlx::query(
        "INSERT INTO room_outbox (event_id, app_code, room_id, shard, lane, room_event_seq, \
         event_type, topic, payload, status, retry_count, next_retry_at_ms, created_at_ms) \
         VALUES ('inserted-meanwhile', 'hyapp', 'room-1', 1, 0, 1, 'RoomGiftSent', \
         'hyapp_room_outbox', 'x', 'failed', 3, ?, ?)",
    )
    .bind(EPOCH_MS)
    .bind(EPOCH_MS)
    .execute(pool)
    .await
    .unwrap();
    let (_, again) = page_of(pool, failed, &next_form).await;
    assert_eq!(again.rows, second.rows, "a page is stable under inserts");

    // Filters: a room, a type, a time range — bounded the same way.
    let searches = [
        (
            "stuck rooms of one room",
            Scope::Failing("retryable"),
            SearchForm {
                room_id: "room-1".into(),
                ..SearchForm::default()
            },
        ),
        (
            "dead letters of a type since a time",
            failed,
            SearchForm {
                event_type: "RoomGiftSent".into(),
                from: "2023-11-14 22:13:30".into(),
                ..SearchForm::default()
            },
        ),
        (
            "a room's timeline, delivered only",
            Scope::Room("room-7"),
            SearchForm {
                status: "delivered".into(),
                ..SearchForm::default()
            },
        ),
    ];
    for (what, scope, form) in &searches {
        let (read, page) = page_of(pool, *scope, form).await;
        assert!(!page.rows.is_empty(), "{what}: found something");
        measured.push((*what, read));
    }

    // A type no row has: the window ends the search and says where.
    let rare = SearchForm {
        event_type: "RoomNeverSent".into(),
        ..SearchForm::default()
    };
    let (read, none) = page_of(pool, failed, &rare).await;
    measured.push(("dead letters of a type no row has", read));
    assert!(none.rows.is_empty());
    let searched_to = none.searched_to.expect("the window ended the search");
    assert_eq!(none.next_after, Some(searched_to));
    // 10,000 dead letters in the table; the page read one window of them.
    assert!(searched_to < 1_000_000, "{searched_to}");

    // One event by id: one lookup of the unique key.
    let by_id = SearchForm {
        event_id: format!("{:0>36}", 4_202),
        ..SearchForm::default()
    };
    let (read, found) = page_of(pool, failed, &by_id).await;
    measured.push(("dead letter by event id", read));
    assert_eq!(found.rows.len(), 1);
    assert!(read < 10, "by event id read {read} rows");

    // The audit trail (50,000 rows), whole and of one room.
    for (what, form) in [
        ("audit, whole trail", AuditForm::default()),
        (
            "audit, one room's skips",
            AuditForm {
                room_id: "room-2".into(),
                action: "skip".into(),
                ..AuditForm::default()
            },
        ),
    ] {
        let (read, page) = rows_read(pool, async {
            audit_search::page(pool, &form, PAGE).await.unwrap()
        })
        .await;
        assert!(!page.records.is_empty(), "{what}");
        measured.push((what, read));
    }

    for (what, read) in &measured {
        println!("{what}: {read} rows read");
    }
    for (what, read) in &measured {
        let ceiling = if what.contains("of one room") {
            RETRYABLE + 2 * WINDOW
        } else {
            CEILING
        };
        assert!(*read <= ceiling, "{what} read {read} rows, over {ceiling}");
    }
}
