//! The activity processor with its MariaDB behind a proxy that stops
//! forwarding mid-stream (docs/design.md#client-timeouts): the dedup claim
//! and effect transaction against the stalled database fails within
//! `mysql.statement_timeout` instead of waiting until TCP gives up, writes
//! nothing, and the same gift applied once the proxy forwards again counts
//! exactly once.

use activity_consumer::{
    broadcast::{Broadcaster, Broadcasts},
    config::{ActivityConfig, ActivityRule, Config, RankBy},
    processor::ActivityProcessor,
};
use consumer_runtime::testing::envelope;
use consumer_runtime::{ConsumerMetrics, Outcome};
use fake_tencent_im::FakeImConfig;
use outbox_schema::pb::{self, room_outbox_event::Payload};
use service_kit::db::statement::BoundedPool;
use std::time::Duration;
use testkit::stall::StallingProxy;

/// The deadline the test gives itself: a transaction that hangs fails the
/// test here instead of hanging the suite. Not an assertion about speed.
const TEST_DEADLINE: Duration = Duration::from_secs(60);

/// The processor's pool to `db` through `proxy`, with a short statement
/// timeout.
async fn pool_through(proxy: &StallingProxy, db: &testkit::TestDb) -> BoundedPool {
    testkit::stall::bounded_pool_via(proxy, &db.name, Duration::from_millis(500)).await
}

async fn processor(pool: BoundedPool, group: &str) -> ActivityProcessor {
    let fake = fake_tencent_im::spawn(FakeImConfig::new(1_400_000_003, "stall-key", "admin"))
        .await
        .unwrap();
    let mut im = Config::default().tencent_im;
    im.base_url = fake.base_url();
    im.sdk_app_id = 1_400_000_003;
    im.admin_identifier = "admin".into();
    im.secret_key = service_kit::Secret::new("stall-key");
    let config = ActivityConfig {
        activities: vec![ActivityRule {
            id: "wealth".into(),
            gift_ids: Vec::new(),
            rank_by: RankBy::Sender,
            starts_at_ms: 0,
            ends_at_ms: 0,
        }],
        big_gift_threshold: 0,
        ..ActivityConfig::default()
    };
    let broadcaster = Broadcaster::new(
        Broadcasts::new(im.client().unwrap(), "global".into()),
        pool.clone(),
        config.broadcast.clone(),
        &ConsumerMetrics::unregistered(),
    );
    ActivityProcessor::new(pool, group.to_string(), config, broadcaster)
}

fn gift(total_value: u64) -> pb::RoomOutboxEvent {
    envelope(
        &uuid::Uuid::new_v4().to_string(),
        "room-stall",
        1,
        Payload::RoomGiftSent(pb::RoomGiftSent {
            sender_id: "sender".into(),
            receiver_id: "receiver".into(),
            gift_id: "rose".into(),
            count: 1,
            unit_value: total_value,
            total_value,
        }),
    )
}

async fn rows(db: &testkit::TestDb, group: &str) -> (i64, i64) {
    let dedup: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM consumer_dedup WHERE consumer_group = ?")
            .bind(group)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    let scores: i64 = sqlx::query_scalar(
        "SELECT CAST(COALESCE(SUM(score), 0) AS SIGNED) FROM activity_gift_leaderboard WHERE user_id = 'sender'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    (dedup, scores)
}

#[tokio::test]
async fn a_stalled_database_fails_the_batch_writes_nothing_and_the_retry_counts_once() {
    let db = testkit::TestDb::new().await;
    let proxy = StallingProxy::start(testkit::stall::mysql_server_address()).await;
    let group = testkit::unique("stall_group_");
    let processor = processor(pool_through(&proxy, &db).await, &group).await;
    let event = gift(700);

    proxy.stall();
    let stalled = tokio::time::timeout(TEST_DEADLINE, processor.apply(&[&event]))
        .await
        .expect("the transaction ends instead of waiting on the stalled database");
    let error = stalled.expect_err("a stalled database is an error");
    assert!(
        error.to_string().contains("mysql.statement_timeout"),
        "the error names the timeout: {error}"
    );
    assert_eq!(rows(&db, &group).await, (0, 0), "nothing written");

    proxy.resume();
    let outcomes = tokio::time::timeout(TEST_DEADLINE, processor.apply(&[&event]))
        .await
        .expect("applied once the database answers")
        .expect("the retry succeeds");
    assert_eq!(outcomes, vec![Outcome::Applied]);
    let again = processor.apply(&[&event]).await.expect("a redelivery");
    assert_eq!(again, vec![Outcome::Duplicate]);
    assert_eq!(rows(&db, &group).await, (1, 700), "counted exactly once");
}
