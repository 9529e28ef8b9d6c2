//! What scenarios share: a fresh benchmark database, pre-filled outbox rows
//! shaped exactly like room-service's, relays, and a topic reader.

use outbox_schema::{EnvelopeContext, NewOutboxRow, envelope_for};
use room_core::{EventKind, RoomEvent};
use service_kit::time::now_ms;
use sqlx::{Connection, MySqlConnection, MySqlPool};
use std::time::{Duration, Instant};

/// Where the infrastructure is.
#[derive(Debug, Clone)]
pub struct BenchEnv {
    /// Broker bootstrap.
    pub bootstrap: String,
    /// MariaDB server URL.
    pub mysql: String,
    /// Redis URL.
    pub redis: String,
    /// Tiny sizes.
    pub smoke: bool,
    /// Where results and plots go.
    pub out_dir: std::path::PathBuf,
}

impl BenchEnv {
    /// Path of a plot file; smoke runs get their own names so they never
    /// overwrite a real run's charts.
    pub fn plot_path(&self, name: &str) -> std::path::PathBuf {
        let prefix = if self.smoke { "smoke-" } else { "" };
        self.out_dir.join(format!("{prefix}{name}.svg"))
    }
}

/// A fresh migrated database for one scenario.
pub async fn fresh_database(env: &BenchEnv) -> anyhow::Result<(MySqlPool, String)> {
    let name = format!(
        "hyapp_bench_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..10]
    );
    let mut admin = MySqlConnection::connect(&env.mysql).await?;
    if !env.smoke {
        settle(&mut admin).await?;
    }
    sqlx::query(&format!("CREATE DATABASE `{name}`"))
        .execute(&mut admin)
        .await?;
    let pool = sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(32)
        .connect(&format!("{}/{name}", env.mysql))
        .await?;
    service_kit::db::migrate(&pool).await?;
    Ok((pool, name))
}

/// Longest wait for MariaDB to settle before a scenario.
const SETTLE_AT_MOST: Duration = Duration::from_secs(90);

/// Waits until MariaDB has written back what it will of the previous
/// scenario's dirty pages and purged its undo history, so that its background
/// flushing is not billed to the next scenario (a one-room gift storm right
/// after the mixed scenario ran at about half its speed alone). Settled: at
/// most 5 % of the buffer pool dirty, or no fewer dirty pages for 3 s (an
/// idle server stops flushing at its low-water mark); and little undo
/// history. Gives up after [`SETTLE_AT_MOST`] and says so.
async fn settle(admin: &mut MySqlConnection) -> anyhow::Result<()> {
    const STALLED_FOR: Duration = Duration::from_secs(3);
    let started = Instant::now();
    let mut lowest = u64::MAX;
    let mut lowest_since = Instant::now();
    loop {
        let status: Vec<(String, String)> = sqlx::query_as(
            "SHOW GLOBAL STATUS WHERE Variable_name IN \
             ('Innodb_buffer_pool_pages_dirty', 'Innodb_buffer_pool_pages_total', 'Innodb_history_list_length')",
        )
        .fetch_all(&mut *admin)
        .await?;
        let value = |name: &str| {
            status
                .iter()
                .find(|(variable, _)| variable.eq_ignore_ascii_case(name))
                .and_then(|(_, value)| value.parse::<u64>().ok())
                .unwrap_or(0)
        };
        let dirty = value("Innodb_buffer_pool_pages_dirty");
        let total = value("Innodb_buffer_pool_pages_total").max(1);
        let history = value("Innodb_history_list_length");
        if dirty < lowest {
            lowest = dirty;
            lowest_since = Instant::now();
        }
        let written_back = dirty * 20 <= total || lowest_since.elapsed() >= STALLED_FOR;
        let settled = written_back && history <= 5_000;
        let waited = started.elapsed();
        if settled || waited >= SETTLE_AT_MOST {
            if waited >= Duration::from_secs(1) {
                println!(
                    "  MariaDB {} after {:.1} s ({dirty} of {total} pages dirty, undo history {history})",
                    if settled { "settled" } else { "still busy" },
                    waited.as_secs_f64()
                );
            }
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Drops a scenario's database.
pub async fn drop_database(env: &BenchEnv, name: &str) -> anyhow::Result<()> {
    let mut admin = MySqlConnection::connect(&env.mysql).await?;
    sqlx::query(&format!("DROP DATABASE `{name}`"))
        .execute(&mut admin)
        .await?;
    Ok(())
}

/// One room event row as room-service writes it (a gift, the commonest event).
pub fn gift_row(room_id: &str, seq: u64, now: i64) -> NewOutboxRow {
    event_row(
        room_id,
        seq,
        now,
        EventKind::RoomGiftSent {
            sender_id: format!("user-{}", seq % 97),
            receiver_id: "host".into(),
            gift_id: "rose".into(),
            count: 1,
            unit_value: 10,
            total_value: 10,
        },
    )
}

/// A kick (notice-consumer turns it into a private notice; im-bridge also
/// removes the member from the IM group).
pub fn kick_row(room_id: &str, seq: u64, now: i64) -> NewOutboxRow {
    event_row(
        room_id,
        seq,
        now,
        EventKind::RoomUserKicked {
            actor_id: "host".into(),
            target_id: format!("user-{}", seq % 97),
            ban_until_ms: 0,
        },
    )
}

/// One row of `kind` as room-service writes it.
pub fn event_row(room_id: &str, seq: u64, now: i64, kind: EventKind) -> NewOutboxRow {
    let context = EnvelopeContext {
        app_code: "hyapp".into(),
        room_id: room_id.into(),
        room_version: seq,
        command_id: format!("cmd-{room_id}-{seq}"),
        occurred_at_ms: now,
        traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into(),
        ..EnvelopeContext::default()
    };
    let event = RoomEvent { seq, kind };
    let envelope = envelope_for(&context, uuid::Uuid::now_v7().to_string(), &event);
    NewOutboxRow::event(&envelope, now)
}

/// Inserts `rows_total` rows across `rooms` rooms, interleaved like concurrent commits.
pub async fn prefill(pool: &MySqlPool, rooms: usize, rows_total: usize) -> anyhow::Result<()> {
    let now = now_ms();
    let per_room = rows_total.div_ceil(rooms);
    let mut batch = Vec::with_capacity(2_000);
    let mut written = 0;
    'outer: for seq in 1..=per_room as u64 {
        for room in 0..rooms {
            batch.push(gift_row(&format!("bench-room-{room}"), seq, now));
            written += 1;
            if batch.len() == 2_000 {
                flush(pool, &mut batch).await?;
            }
            if written == rows_total {
                break 'outer;
            }
        }
    }
    flush(pool, &mut batch).await
}

async fn flush(pool: &MySqlPool, batch: &mut Vec<NewOutboxRow>) -> anyhow::Result<()> {
    let mut tx = pool.begin().await?;
    outbox_store::insert_outbox_rows(&mut tx, batch).await?;
    tx.commit().await?;
    batch.clear();
    Ok(())
}

/// The oldest open row of the ordered chain, or `None` once the chain is
/// drained. One dive into idx_claim, so polling it while a relay drains costs
/// MariaDB nothing (a `COUNT(*)` of the open rows walked the whole backlog on
/// every poll and competed with the relay it was measuring).
pub async fn oldest_open_id(pool: &MySqlPool) -> anyhow::Result<Option<u64>> {
    Ok(sqlx::query_scalar(
        "SELECT MIN(id) FROM room_outbox FORCE INDEX (idx_claim) WHERE lane = 0 AND open_flag = 1",
    )
    .fetch_one(pool)
    .await?)
}

/// The newest row id (0 for an empty table).
pub async fn newest_id(pool: &MySqlPool) -> anyhow::Result<u64> {
    Ok(
        sqlx::query_scalar::<_, Option<u64>>("SELECT MAX(id) FROM room_outbox")
            .fetch_one(pool)
            .await?
            .unwrap_or(0),
    )
}
