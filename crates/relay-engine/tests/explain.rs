//! The relay's own statements read only what they must on a million-row
//! `room_outbox` (`explain/fill.rs`: 90 % delivered history, a 9 % open
//! backlog, retrying heads and dead letters). Each statement the relay
//! sends — the chain and delayed scans, the claim, the delivered and
//! failure marks of both fences, the backlog gauges — is built by the
//! relay's own code (`store::push_*`, the `*_SQL` constants), prefixed
//! with `EXPLAIN` and planned with the parameter values the relay uses:
//! every shard of a lone relay, the ids its scan chose, a batch of the
//! default size and of the cap. The plan must use the expected index and
//! estimate at most a ceiling of rows (see [`Ceilings`]); the estimates are
//! printed for review.

#[path = "explain/fill.rs"]
mod fill;

use fill::{ROWS, fill};
use outbox_schema::OUTBOX_SHARDS;
use relay_engine::{backlog, config::OutboxWorkerConfig, store};
use service_kit::time::now_ms;
use sqlx::{Column, MySql, MySqlPool, QueryBuilder, Row, mysql::MySqlRow};

/// The relay's node id in these plans (the lease rows name it).
const NODE: &str = "relay-explain";
/// Every lease in epoch 1.
const EPOCH: u64 = 1;
/// `outbox_worker.batch_size`'s documented cap.
const BATCH_CAP: usize = 5_000;

/// One row of a plan: the table as the statement names it, the access
/// type, the index and the estimated rows.
#[derive(Debug)]
struct PlanRow {
    table: String,
    access: String,
    key: String,
    rows: u64,
    extra: String,
}

fn cell(row: &MySqlRow, name: &str) -> String {
    let Some(index) = row
        .columns()
        .iter()
        .position(|column| column.name() == name)
    else {
        return "NULL".into();
    };
    if let Ok(value) = row.try_get::<Option<String>, _>(index) {
        return value.unwrap_or_else(|| "NULL".into());
    }
    if let Ok(value) = row.try_get::<Option<u64>, _>(index) {
        return value.map_or_else(|| "NULL".into(), |value| value.to_string());
    }
    row.try_get::<Option<i64>, _>(index)
        .ok()
        .flatten()
        .map_or_else(|| "NULL".into(), |value| value.to_string())
}

/// Runs `EXPLAIN …` as built and prints its rows under `name`.
async fn plan(pool: &MySqlPool, name: &str, explain: QueryBuilder<'_, MySql>) -> Vec<PlanRow> {
    plan_bound(pool, name, explain, |query| query).await
}

/// What a plan may read: on `room_outbox` (`o` in the joins) the index it
/// must use and a ceiling on the estimated rows; the lease table is read
/// by primary key, at most one row per shard.
struct Ceilings {
    key: &'static str,
    rows: u64,
}

/// Every way `plan` breaks `ceilings`, named.
fn violations(name: &str, plan: &[PlanRow], ceilings: &Ceilings) -> Vec<String> {
    let mut found = Vec::new();
    for row in plan {
        // A subquery's MIN read off the index end has no table access.
        if row.extra.contains("Select tables optimized away") {
            continue;
        }
        let (key, ceiling) = match row.table.as_str() {
            "room_outbox" | "o" => (ceilings.key, ceilings.rows),
            "relay_shard_leases" | "l" => ("PRIMARY", u64::from(OUTBOX_SHARDS)),
            other => {
                found.push(format!("{name}: reads {other}"));
                continue;
            }
        };
        if row.access == "ALL" || row.access == "index" {
            found.push(format!("{name}: {} scan of {}", row.access, row.table));
        }
        if row.key != key {
            found.push(format!("{name}: {} by {}, not {key}", row.table, row.key));
        }
        if row.rows > ceiling {
            found.push(format!(
                "{name}: {} estimated {} rows, ceiling {ceiling}",
                row.table, row.rows
            ));
        }
        if row.extra.contains("filesort") {
            found.push(format!("{name}: {} sorted, not read in order", row.table));
        }
    }
    found
}

/// Counts what the backlog holds, for the ceilings of the statements that
/// read a range of it.
async fn count(pool: &MySqlPool, mut query: QueryBuilder<'_, MySql>) -> u64 {
    let count: i64 = query.build_query_scalar().fetch_one(pool).await.unwrap();
    u64::try_from(count).unwrap()
}

/// Leases of every shard held by [`NODE`], as a lone relay holds them.
async fn lease_every_shard(pool: &MySqlPool) {
    for shard in 0..OUTBOX_SHARDS {
        sqlx::query(
            "INSERT INTO relay_shard_leases (shard, owner, epoch, lease_until_ms) VALUES (?, ?, ?, ?)",
        )
        .bind(shard)
        .bind(NODE)
        .bind(EPOCH)
        .bind(now_ms() + 60_000)
        .execute(pool)
        .await
        .unwrap();
    }
}

fn explain<'a>() -> QueryBuilder<'a, MySql> {
    QueryBuilder::new("EXPLAIN ")
}

/// The id-addressed statements for one batch of `ids`: the claim and every
/// mark. Each reads its rows by primary key, so the ceiling is the batch
/// itself (2× for the estimator's rounding), whatever the table holds.
async fn batch_statements(pool: &MySqlPool, ids: &[u64], epochs: &[(u16, u64)]) -> Vec<String> {
    let now = now_ms();
    let by_id = Ceilings {
        key: "PRIMARY",
        rows: 2 * ids.len() as u64,
    };
    let one_row = Ceilings {
        key: "PRIMARY",
        rows: 2,
    };
    let batch = ids.len();
    let mut found = Vec::new();

    let mut claim = explain();
    store::push_claim(&mut claim, ids, NODE, 42, now, now + 30_000);
    let name = format!("claim ({batch} ids)");
    found.extend(violations(&name, &plan(pool, &name, claim).await, &by_id));

    let mut delivered = explain();
    store::push_mark_delivered(&mut delivered, ids, 42, now);
    let name = format!("mark_delivered ({batch} ids)");
    found.extend(violations(
        &name,
        &plan(pool, &name, delivered).await,
        &by_id,
    ));

    let mut leased = explain();
    store::push_mark_delivered_leased(&mut leased, ids, NODE, epochs, now);
    let name = format!("mark_delivered_leased ({batch} ids)");
    found.extend(violations(&name, &plan(pool, &name, leased).await, &by_id));

    let mut failure = explain();
    failure.push(store::MARK_FAILURE_SQL);
    let failure = plan_bound(pool, "mark_failure", failure, |query| {
        query
            .bind("retryable")
            .bind(now + 1_000)
            .bind("broker down")
            .bind(ids[0])
            .bind(42_u64)
    })
    .await;
    found.extend(violations("mark_failure", &failure, &one_row));

    let mut failure_leased = explain();
    failure_leased.push(store::MARK_FAILURE_LEASED_SQL);
    let failure_leased = plan_bound(pool, "mark_failure_leased", failure_leased, |query| {
        query
            .bind("retryable")
            .bind(now + 1_000)
            .bind("broker down")
            .bind(NODE)
            .bind(ids[0])
            .bind(NODE)
            .bind(EPOCH)
    })
    .await;
    found.extend(violations("mark_failure_leased", &failure_leased, &one_row));
    found
}

type Query<'q> = sqlx::query::Query<'q, MySql, sqlx::mysql::MySqlArguments>;

/// [`plan`] of a constant statement whose values `bind` binds in order.
async fn plan_bound<'q>(
    pool: &MySqlPool,
    name: &str,
    mut explain: QueryBuilder<'q, MySql>,
    bind: impl FnOnce(Query<'_>) -> Query<'_>,
) -> Vec<PlanRow> {
    let sql = explain.sql().to_owned();
    let rows = bind(explain.build())
        .fetch_all(pool)
        .await
        .unwrap_or_else(|error| panic!("{name}: {error}\n{sql}"));
    println!("== {name}");
    rows.iter()
        .map(|row| {
            let row = PlanRow {
                table: cell(row, "table"),
                access: cell(row, "type"),
                key: cell(row, "key"),
                rows: cell(row, "rows").parse().unwrap_or(0),
                extra: cell(row, "Extra"),
            };
            println!("   {row:?}");
            row
        })
        .collect()
}

#[tokio::test]
async fn the_relays_statements_read_their_batch_or_the_backlog_never_the_history() {
    let db = testkit::TestDb::new().await;
    fill(&db.pool).await;
    lease_every_shard(&db.pool).await;
    let pool = &db.pool;
    let shards: Vec<u16> = (0..OUTBOX_SHARDS).collect();
    let default_batch = usize::try_from(OutboxWorkerConfig::default().batch_size).unwrap();

    // What the ranges legitimately cover, counted directly.
    let open_chain = count(
        pool,
        QueryBuilder::new("SELECT COUNT(*) FROM room_outbox WHERE lane = 0 AND open_flag = 1"),
    )
    .await;
    let open_delayed = count(
        pool,
        QueryBuilder::new("SELECT COUNT(*) FROM room_outbox WHERE delayed_due_ms IS NOT NULL"),
    )
    .await;
    let open = count(pool, QueryBuilder::new(backlog::OPEN_COUNT_SQL)).await;
    let failed = count(pool, QueryBuilder::new(backlog::FAILED_COUNT_SQL)).await;
    println!(
        "{ROWS} rows: {open} open ({open_chain} chain, {open_delayed} delayed), {failed} failed"
    );
    assert!(open_chain > 0 && open_delayed > 0 && failed > 0);
    // A range of the backlog is estimated by its size (EXPLAIN's `rows`
    // ignores LIMIT; the read itself stops at the LIMIT, as no filesort
    // means rows come in index order). Its ceiling is that size, doubled
    // for the estimator's sampling error: far below the million rows, and
    // exceeded by any plan that walks the delivered history.
    let backlog_range = |key, size: u64| Ceilings {
        key,
        rows: 2 * size,
    };
    assert!(2 * open < ROWS / 4, "the ceilings are far below the table");

    let mut found = Vec::new();
    for batch in [default_batch, BATCH_CAP] {
        // The ids the relay's scan chooses for one batch, read by it.
        let chosen = store::scan_chain(pool, &shards, 0, &[], batch)
            .await
            .unwrap();
        assert_eq!(chosen.len(), batch);
        let ids: Vec<u64> = chosen.iter().map(|row| row.id).collect();
        let mut epochs: Vec<(u16, u64)> = chosen.iter().map(|row| (row.shard, EPOCH)).collect();
        epochs.sort_unstable();
        epochs.dedup();

        // The first page of a batch, and the next batch's, which leaves
        // the previous batch's rows out in the index.
        for (after, skip) in [(0, &[][..]), (0, &ids[..])] {
            let mut scan = explain();
            store::push_scan_chain(&mut scan, &shards, after, skip, batch);
            let name = format!("scan_chain (limit {batch}, skipping {})", skip.len());
            let scanned = plan(pool, &name, scan).await;
            found.extend(violations(
                &name,
                &scanned,
                &backlog_range("idx_claim", open_chain),
            ));
        }
        let mut delayed = explain();
        store::push_scan_delayed(&mut delayed, &shards, now_ms(), batch);
        let name = format!("scan_delayed (limit {batch})");
        let delayed = plan(pool, &name, delayed).await;
        found.extend(violations(
            &name,
            &delayed,
            &backlog_range("idx_delayed", open_delayed),
        ));
        found.extend(batch_statements(pool, &ids, &epochs).await);
    }

    for (name, statement, ceilings) in [
        (
            "open_count",
            backlog::OPEN_COUNT_SQL,
            backlog_range("idx_claim", open),
        ),
        (
            "failed_count",
            backlog::FAILED_COUNT_SQL,
            backlog_range("idx_failing", failed),
        ),
        (
            "oldest_open",
            backlog::OLDEST_OPEN_SQL,
            Ceilings {
                key: "PRIMARY",
                rows: 1,
            },
        ),
    ] {
        let mut explained = explain();
        explained.push(statement);
        found.extend(violations(
            name,
            &plan(pool, name, explained).await,
            &ceilings,
        ));
    }
    assert!(found.is_empty(), "see the plans above: {found:#?}");

    // The check can fail: a read of the delivered history blows the
    // backlog's ceiling, and a sorted read of it is named.
    let mut history = explain();
    history
        .push("SELECT id FROM room_outbox FORCE INDEX (idx_claim) WHERE lane = 0 AND open_flag = 0 AND id > ")
        .push_bind(0_u64)
        .push(" ORDER BY created_at_ms LIMIT 100");
    let history = plan(pool, "delivered history", history).await;
    let caught = violations(
        "delivered history",
        &history,
        &backlog_range("idx_claim", open_chain),
    );
    assert!(
        caught.iter().any(|violation| violation.contains("ceiling"))
            && caught.iter().any(|violation| violation.contains("sorted")),
        "{caught:?}"
    );
}
