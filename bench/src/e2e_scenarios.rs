//! Scenario 4, `e2e-latency`: SendGift commands at a fixed rate over 100
//! rooms (20 in smoke) through room-service (in-process, embedded relay in mq
//! mode) to activity-consumer (in-process, fake IM), with the relay nudge on
//! and off. Per hop p50/p99: commit → published
//! (`room_outbox.delivered_at_ms - created_at_ms`), published → consumed
//! (`consumer_dedup.processed_at_ms - delivered_at_ms`), and commit → consumed.

use crate::{
    consumers::{self, Kind},
    fixtures::{self, BenchEnv},
    relay_scenarios::{create_topic, mq_config, worker},
    report::{Report, Row},
};
use hdrhistogram::Histogram;
use hyapp_api::room::{
    CommandMeta, CreateRoomRequest, JoinRoomRequest, SendGiftRequest,
    room_service_client::RoomServiceClient,
};
use outbox_schema::names;
use service_kit::{duration::ConfigDuration, time::now_ms};
use sqlx::{MySqlPool, Row as _};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

fn meta(command_id: String) -> Option<CommandMeta> {
    Some(CommandMeta {
        command_id,
        request_id: String::new(),
        app_code: "hyapp".into(),
    })
}

/// Runs scenario 4 with the nudge on, then off.
pub async fn e2e_latency(env: &BenchEnv, report: &mut Report) -> anyhow::Result<()> {
    let (rate, seconds) = if env.smoke {
        (100u64, 2u64)
    } else {
        (1_000, 30)
    };
    let rooms = if env.smoke { 20 } else { 100 };
    println!("e2e-latency: {rate} SendGift/s over {rooms} rooms for {seconds}s, nudge on and off");
    let mut results = Vec::new();
    for nudge in [true, false] {
        results.push((nudge, run(env, nudge, rooms, rate, seconds).await?));
    }
    let off_total = results
        .iter()
        .find(|(nudge, _)| !nudge)
        .map(|(_, hops)| hops.total.value_at_quantile(0.99) as f64);
    for (nudge, hops) in &results {
        let variant = if *nudge { "nudge on" } else { "nudge off" };
        for (hop, histogram) in [
            ("commit->published", &hops.publish),
            ("published->consumed", &hops.consume),
            ("commit->consumed", &hops.total),
        ] {
            let p99 = histogram.value_at_quantile(0.99) as f64;
            let headline = *nudge && hop == "commit->consumed";
            report.add(Row {
                scenario: format!("e2e-latency {hop}, {variant}"),
                metric: "p99 ms".into(),
                measured: p99,
                target: headline.then(|| "<= 50 ms".into()),
                baseline: headline.then_some(off_total).flatten(),
                ratio: headline
                    .then(|| off_total.map(|off| p99 / off.max(1.0)))
                    .flatten(),
                pass: headline.then_some(p99 <= 50.0),
                note: format!(
                    "p50 {} ms, {} events, sent {:.0}/s{}",
                    histogram.value_at_quantile(0.5),
                    histogram.len(),
                    hops.achieved_rate,
                    if headline {
                        "; baseline = nudge off"
                    } else {
                        ""
                    }
                ),
            });
        }
    }
    Ok(())
}

#[derive(Debug)]
struct Hops {
    publish: Histogram<u64>,
    consume: Histogram<u64>,
    total: Histogram<u64>,
    achieved_rate: f64,
}

async fn run(
    env: &BenchEnv,
    nudge: bool,
    rooms: usize,
    rate: u64,
    seconds: u64,
) -> anyhow::Result<Hops> {
    let (pool, db) = fixtures::fresh_database(env).await?;
    let mysql_url = format!("{}/{db}", env.mysql);
    let namespace = format!(
        "benche2e{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let mq = mq_config(env, &namespace);
    create_topic(&env.bootstrap, &mq.topic(names::TOPIC_ROOM_OUTBOX)).await?;
    let group = format!(
        "bench-e2e-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    create_topic(&env.bootstrap, &mq.topic(&names::dead_letter_topic(&group))).await?;
    let fake = consumers::fake_im().await?;
    let wallet = fake_wallet::spawn(fake_wallet::FakeWalletConfig::default()).await?;

    let mut config = room_service::Config::default();
    config.mysql.url = mysql_url.clone();
    config.mysql.max_connections = 32;
    config.redis.url = env.redis.clone();
    config.grpc_listen = "127.0.0.1:0".into();
    config.http_listen = "127.0.0.1:0".into();
    config.node_id = format!("bench-{db}");
    config.wallet.endpoint = wallet.endpoint();
    config.tencent_im.enabled = false;
    config.rocketmq = mq.clone();
    config.outbox_worker = worker(
        &format!("bench-e2e-{db}"),
        nudge,
        ConfigDuration::from_secs(1),
        &env.redis,
    );
    config.outbox_worker.enabled = true;
    let app = room_service::App::build(config.validate()?).await?;
    let client = RoomServiceClient::connect(format!("http://{}", app.grpc_addr())).await?;
    let room_shutdown = CancellationToken::new();
    let room_task = tokio::spawn({
        let token = room_shutdown.clone();
        async move {
            if let Err(error) = app.run(token).await {
                eprintln!("room-service stopped: {error}");
            }
        }
    });
    let (consumer_shutdown, consumer_task) =
        consumers::spawn_consumer(Kind::Activity, &mysql_url, &mq, &group, &fake).await?;

    // Room leases live in Redis across runs: fresh room ids per run.
    let run_id = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
    // Rooms, one sender each, and one warm-up gift per room consumed end to end.
    for room in 0..rooms {
        let mut client = client.clone();
        let room_id = format!("e2e-{run_id}-{room}");
        client
            .create_room(CreateRoomRequest {
                meta: meta(format!("create-{room_id}")),
                room_id: room_id.clone(),
                owner_id: "host".into(),
                title: "e2e".into(),
                mic_seat_count: 8,
            })
            .await?;
        client
            .join_room(JoinRoomRequest {
                meta: meta(format!("join-{room_id}")),
                room_id: room_id.clone(),
                user_id: "sender".into(),
            })
            .await?;
        send_gift(&mut client, &room_id, u64::MAX - room as u64).await?;
    }
    wait_consumed(&pool, &group, 0, Duration::from_secs(60)).await?;

    let started_ms = now_ms();
    let started = Instant::now();
    let mut ticker = tokio::time::interval(Duration::from_micros(1_000_000 / rate));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut inflight = Vec::new();
    let total = rate * seconds;
    for index in 0..total {
        ticker.tick().await;
        let mut client = client.clone();
        let room_id = format!("e2e-{run_id}-{}", index as usize % rooms);
        inflight.push(tokio::spawn(async move {
            send_gift(&mut client, &room_id, index).await
        }));
    }
    let mut failed = 0;
    for task in inflight {
        if !matches!(task.await, Ok(Ok(()))) {
            failed += 1;
        }
    }
    let achieved_rate = total as f64 / started.elapsed().as_secs_f64();
    wait_consumed(&pool, &group, started_ms, Duration::from_secs(120)).await?;
    let hops = collect(&pool, &group, started_ms, achieved_rate).await?;
    if failed > 0 {
        println!("  e2e-latency: {failed} commands failed");
    }

    consumer_shutdown.cancel();
    let _ = consumer_task.await;
    room_shutdown.cancel();
    let _ = room_task.await;
    drop(wallet);
    pool.close().await;
    fixtures::drop_database(env, &db).await?;
    Ok(hops)
}

async fn send_gift(
    client: &mut RoomServiceClient<tonic::transport::Channel>,
    room_id: &str,
    index: u64,
) -> anyhow::Result<()> {
    client
        .send_gift(SendGiftRequest {
            meta: meta(format!("gift-{room_id}-{index}")),
            room_id: room_id.into(),
            sender_id: "sender".into(),
            receiver_id: "host".into(),
            gift_id: "rose".into(),
            count: 1,
            unit_value: 1,
        })
        .await?;
    Ok(())
}

/// Waits until every gift row created since `since_ms` has a dedup row of `group`.
async fn wait_consumed(
    pool: &MySqlPool,
    group: &str,
    since_ms: i64,
    limit: Duration,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + limit;
    loop {
        let row = sqlx::query(
            "SELECT COUNT(*) AS total, COUNT(d.event_id) AS consumed FROM room_outbox o \
             LEFT JOIN consumer_dedup d ON d.consumer_group = ? AND d.event_id = o.event_id \
             WHERE o.event_type = 'RoomGiftSent' AND o.created_at_ms >= ?",
        )
        .bind(group)
        .bind(since_ms)
        .fetch_one(pool)
        .await?;
        let total: i64 = row.try_get("total")?;
        let consumed: i64 = row.try_get("consumed")?;
        if total > 0 && consumed >= total {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "only {consumed}/{total} gifts consumed within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn collect(
    pool: &MySqlPool,
    group: &str,
    since_ms: i64,
    achieved_rate: f64,
) -> anyhow::Result<Hops> {
    let rows = sqlx::query(
        "SELECT o.delivered_at_ms - o.created_at_ms AS publish, \
         d.processed_at_ms - o.delivered_at_ms AS consume, \
         d.processed_at_ms - o.created_at_ms AS total \
         FROM room_outbox o JOIN consumer_dedup d ON d.consumer_group = ? AND d.event_id = o.event_id \
         WHERE o.event_type = 'RoomGiftSent' AND o.created_at_ms >= ?",
    )
    .bind(group)
    .bind(since_ms)
    .fetch_all(pool)
    .await?;
    let mut hops = Hops {
        publish: Histogram::new(3)?,
        consume: Histogram::new(3)?,
        total: Histogram::new(3)?,
        achieved_rate,
    };
    for row in rows {
        let publish: i64 = row.try_get("publish")?;
        let consume: i64 = row.try_get("consume")?;
        let total: i64 = row.try_get("total")?;
        hops.publish.record(publish.max(0) as u64)?;
        hops.consume.record(consume.max(0) as u64)?;
        hops.total.record(total.max(0) as u64)?;
    }
    Ok(hops)
}
