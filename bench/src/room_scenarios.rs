//! room-service scenarios through the real gRPC server: a mixed command load
//! over many rooms against a same-run baseline of the equivalent raw SQL
//! writes, and a one-room gift storm with per-room group commit on and off
//! (the fake wallet in the path). The workload itself is `room_load`'s,
//! shared with the scale-out scenarios.

use crate::{
    fixtures::{self, BenchEnv},
    report::{Report, Row},
    room_load::{
        CONCURRENCY, MIXED_SEED, Routing, Serving, bench_config, meta, millis_at, mixed_workload,
    },
};
use hdrhistogram::Histogram;
use hyapp_api::room::{CreateRoomRequest, JoinRoomRequest, SendGiftRequest};
use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

struct RunningRoomService {
    serving: Serving,
    _wallet: fake_wallet::FakeWalletHandle,
    db: String,
}

async fn start_room_service(
    env: &BenchEnv,
    group_commit: bool,
    shared_commits: bool,
) -> anyhow::Result<RunningRoomService> {
    let (pool, db) = fixtures::fresh_database(env).await?;
    pool.close().await;
    let wallet = fake_wallet::spawn(fake_wallet::FakeWalletConfig::default()).await?;
    let mut config = bench_config(env, &db, wallet.endpoint());
    config.room.group_commit = group_commit;
    if !shared_commits {
        config.room.shared_commit_lanes = 0;
    }
    Ok(RunningRoomService {
        serving: Serving::start(config).await?,
        _wallet: wallet,
        db,
    })
}

impl RunningRoomService {
    async fn stop(self, env: &BenchEnv) -> anyhow::Result<()> {
        self.serving.stop().await;
        fixtures::drop_database(env, &self.db).await
    }
}

/// Scenario 1: mixed commands over many rooms with cross-room group commit
/// (shared commit lanes) on and off, and the raw-SQL baseline.
pub async fn mixed_commands(env: &BenchEnv, report: &mut Report) -> anyhow::Result<()> {
    let (rooms, seconds) = if env.smoke { (64, 2) } else { (1_000, 30) };
    println!(
        "room-mixed: {rooms} rooms, concurrency {CONCURRENCY}, {seconds}s, shared commits on and off"
    );
    let (rate, histogram) = mixed_through_grpc(env, rooms, seconds, true).await?;
    let (rate_unshared, histogram_unshared) =
        mixed_through_grpc(env, rooms, seconds, false).await?;
    let baseline = raw_sql_commands(env, rooms, seconds).await?;
    let latency = |histogram: &Histogram<u64>| {
        format!(
            "p50 {:.1} ms, p99 {:.1} ms, p999 {:.1} ms",
            millis_at(histogram, 0.5),
            millis_at(histogram, 0.99),
            millis_at(histogram, 0.999)
        )
    };
    report.add(Row {
        scenario: "room-mixed baseline: raw SQL".into(),
        metric: "commands/s".into(),
        measured: baseline,
        target: None,
        baseline: None,
        ratio: None,
        pass: None,
        note: "command log + 2 outbox rows + meta CAS per txn, sqlx, same concurrency".into(),
    });
    report.add(Row {
        scenario: "room-mixed (gRPC), shared commits off".into(),
        metric: "commands/s".into(),
        measured: rate_unshared,
        target: None,
        baseline: Some(baseline),
        ratio: Some(rate_unshared / baseline),
        pass: None,
        note: format!(
            "{}; every room's batch its own transaction",
            latency(&histogram_unshared)
        ),
    });
    report.add(Row {
        scenario: "room-mixed (gRPC)".into(),
        metric: "commands/s".into(),
        measured: rate,
        target: Some(">= 5000, >= 0.8x".into()),
        baseline: Some(baseline),
        ratio: Some(rate / baseline),
        pass: Some(rate >= 5_000.0 && rate / baseline >= 0.8),
        note: format!(
            "{}; {:.2}x shared commits off",
            latency(&histogram),
            rate / rate_unshared.max(1.0)
        ),
    });
    Ok(())
}

/// The mixed command load through one real gRPC server for `seconds`:
/// commands/s and the latency histogram (µs).
async fn mixed_through_grpc(
    env: &BenchEnv,
    rooms: usize,
    seconds: u64,
    shared_commits: bool,
) -> anyhow::Result<(f64, Histogram<u64>)> {
    let service = start_room_service(env, true, shared_commits).await?;
    let outcome = mixed_workload(
        std::slice::from_ref(&service.serving.target),
        rooms,
        seconds,
        MIXED_SEED,
        Routing::Random,
    )
    .await;
    service.stop(env).await?;
    let outcome = outcome?;
    Ok((outcome.rate, outcome.all))
}

/// The same writes per command as room-service makes, with no service.
async fn raw_sql_commands(env: &BenchEnv, rooms: usize, seconds: u64) -> anyhow::Result<f64> {
    let (pool, db) = fixtures::fresh_database(env).await?;
    let now = service_kit::time::now_ms();
    for room in 0..rooms {
        sqlx::query(
            "INSERT INTO rooms (room_id, app_code, status, owner_id, title, version, event_seq, created_at_ms, updated_at_ms) \
             VALUES (?, 'hyapp', 'open', 'host', 'bench', 0, 0, ?, ?)",
        )
        .bind(format!("raw-{room}"))
        .bind(now)
        .bind(now)
        .execute(&pool)
        .await?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let mut workers = Vec::new();
    for task in 0..CONCURRENCY {
        let pool = pool.clone();
        let stop = Arc::clone(&stop);
        workers.push(tokio::spawn(async move {
            let owned: Vec<usize> = (task..rooms).step_by(CONCURRENCY).collect();
            let mut versions = vec![0u64; owned.len()];
            let mut done = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for (slot, room) in owned.iter().enumerate() {
                    let room_id = format!("raw-{room}");
                    let version = versions[slot];
                    let now = service_kit::time::now_ms();
                    let rows: Vec<_> = (0..2).map(|seq| fixtures::gift_row(&room_id, version * 2 + seq + 1, now)).collect();
                    let mut tx = pool.begin().await?;
                    sqlx::query(
                        "INSERT INTO room_command_log (command_id, room_id, room_version, command_name, request_fingerprint, command, applied_at_ms, reply) \
                         VALUES (?, ?, ?, 'SendGift', ?, ?, ?, ?)",
                    )
                    .bind(format!("raw-{room_id}-{version}"))
                    .bind(&room_id)
                    .bind(version + 1)
                    .bind(vec![0u8; 32])
                    .bind(br#"{"type":"SendGift","sender_id":"u","receiver_id":"host","gift_id":"rose","count":1,"unit_value":1}"#.to_vec())
                    .bind(now)
                    .bind(vec![0u8; 120])
                    .execute(&mut *tx)
                    .await?;
                    outbox_store::insert_outbox_rows(&mut tx, &rows).await?;
                    let updated = sqlx::query(
                        "UPDATE rooms SET version = version + 1, event_seq = event_seq + 2, updated_at_ms = ? WHERE room_id = ? AND version = ?",
                    )
                    .bind(now)
                    .bind(&room_id)
                    .bind(version)
                    .execute(&mut *tx)
                    .await?;
                    anyhow::ensure!(updated.rows_affected() == 1, "version CAS failed");
                    tx.commit().await?;
                    versions[slot] += 1;
                    done += 1;
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                }
            }
            anyhow::Ok(done)
        }));
    }
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let mut total = 0;
    for worker in workers {
        total += worker.await??;
    }
    let rate = total as f64 / started.elapsed().as_secs_f64();
    pool.close().await;
    fixtures::drop_database(env, &db).await?;
    Ok(rate)
}

/// Scenario 2: one hot room, 64 concurrent senders, group commit on vs off.
pub async fn gift_storm(env: &BenchEnv, report: &mut Report) -> anyhow::Result<()> {
    let seconds = if env.smoke { 2 } else { 20 };
    let mut rates = Vec::new();
    for group_commit in [false, true] {
        let service = start_room_service(env, group_commit, true).await?;
        let mut client = service.serving.target.client.clone();
        client
            .create_room(CreateRoomRequest {
                meta: meta("create-hot".into()),
                room_id: "hot".into(),
                owner_id: "host".into(),
                title: "storm".into(),
                mic_seat_count: 8,
            })
            .await?;
        for sender in 0..CONCURRENCY {
            client
                .join_room(JoinRoomRequest {
                    meta: meta(format!("join-{sender}")),
                    room_id: "hot".into(),
                    user_id: format!("s{sender}"),
                })
                .await?;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let histogram = Arc::new(std::sync::Mutex::new(Histogram::<u64>::new(3)?));
        let started = Instant::now();
        let mut workers = Vec::new();
        for sender in 0..CONCURRENCY {
            let mut client = service.serving.target.client.clone();
            let stop = Arc::clone(&stop);
            let histogram = Arc::clone(&histogram);
            workers.push(tokio::spawn(async move {
                let mut done = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let at = Instant::now();
                    client
                        .send_gift(SendGiftRequest {
                            meta: meta(format!("g-{sender}-{done}")),
                            room_id: "hot".into(),
                            sender_id: format!("s{sender}"),
                            receiver_id: "host".into(),
                            gift_id: "rose".into(),
                            count: 1,
                            unit_value: 1,
                        })
                        .await?;
                    let _ = histogram
                        .lock()
                        .map(|mut h| h.record(at.elapsed().as_micros() as u64));
                    done += 1;
                }
                anyhow::Ok(done)
            }));
        }
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        stop.store(true, Ordering::Relaxed);
        let mut total = 0;
        for worker in workers {
            total += worker.await??;
        }
        let rate = total as f64 / started.elapsed().as_secs_f64();
        service.stop(env).await?;
        let histogram = histogram
            .lock()
            .map_err(|_| anyhow::anyhow!("poisoned"))?
            .clone();
        rates.push((rate, histogram));
    }
    let (off, off_histogram) = &rates[0];
    let (on, on_histogram) = &rates[1];
    let latency = |histogram: &Histogram<u64>| {
        format!(
            "p50 {:.1} ms, p99 {:.1} ms",
            millis_at(histogram, 0.5),
            millis_at(histogram, 0.99)
        )
    };
    report.add(Row {
        scenario: "gift-storm, group commit off".into(),
        metric: "gifts/s".into(),
        measured: *off,
        target: None,
        baseline: None,
        ratio: None,
        pass: None,
        note: latency(off_histogram),
    });
    report.add(Row {
        scenario: "gift-storm, group commit on".into(),
        metric: "gifts/s".into(),
        measured: *on,
        target: Some(">= 3000, >= 3x".into()),
        baseline: Some(*off),
        ratio: Some(on / off),
        pass: Some(*on >= 3_000.0 && on / off >= 3.0),
        note: latency(on_histogram),
    });
    Ok(())
}
