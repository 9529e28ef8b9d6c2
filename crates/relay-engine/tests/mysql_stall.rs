//! The relay with its MariaDB behind a proxy that stops forwarding
//! mid-stream (docs/design.md#client-timeouts): a batch and a lease refresh
//! against the stalled database end in an error within
//! `mysql.statement_timeout` instead of hanging, the rows stay open, and
//! once the proxy forwards again every row is published and marked.

mod common;

use common::*;
use outbox_schema::names;
use relay_engine::{
    Relay, RelaySettings,
    metrics::RelayMetrics,
    publish::{MqPublisher, Publishers},
};
use service_kit::db::statement::{BoundedPool, is_timed_out};
use service_kit::time::now_ms;
use std::collections::HashSet;
use std::time::Duration;
use testkit::stall::StallingProxy;

/// The deadline the test gives itself: a relay that hangs fails the test
/// here instead of hanging the suite. Not an assertion about speed.
const TEST_DEADLINE: Duration = Duration::from_secs(90);
const STATEMENT_TIMEOUT: Duration = Duration::from_millis(500);

/// The relay's pool to `db` through `proxy`, with a short statement timeout.
async fn pool_through(proxy: &StallingProxy, db: &testkit::TestDb) -> BoundedPool {
    let bounded = testkit::stall::bounded_pool_via(proxy, &db.name, STATEMENT_TIMEOUT).await;
    assert_eq!(bounded.limit(), STATEMENT_TIMEOUT);
    bounded
}

fn relay_on(pool: BoundedPool, mq: &service_kit::mq::MqConfig) -> Relay {
    let settings =
        RelaySettings::from_config(&worker_config("relay-stall"), mq).expect("valid settings");
    let publishers = Publishers {
        mq: Some(MqPublisher::new(mq, settings.publish_timeout).expect("producer")),
        direct: None,
    };
    let mut registry = prometheus_client::registry::Registry::default();
    Relay::new(
        pool,
        settings,
        publishers,
        RelayMetrics::register(&mut registry),
    )
}

fn timed_out(error: &relay_engine::Error) -> bool {
    matches!(error, relay_engine::Error::Database(error) if is_timed_out(error))
}

#[tokio::test]
async fn a_batch_against_a_stalled_database_fails_and_the_rows_go_out_after() {
    let db = testkit::TestDb::new().await;
    let mq = mq_config(&testkit::kafka_bootstrap(), &testkit::unique("ns"));
    let topic = mq.topic(names::TOPIC_ROOM_OUTBOX);
    testkit::create_topic(&topic, 3).await;
    let mut rows = room_rows("room-a", 1, 3);
    rows.extend(room_rows("room-b", 1, 3));
    insert(&db.pool, &rows).await;
    let proxy = StallingProxy::start(testkit::stall::mysql_server_address()).await;
    let pool = pool_through(&proxy, &db).await;
    let relay = relay_on(pool.clone(), &mq);

    tokio::time::timeout(TEST_DEADLINE, async {
        let shards = own_all_shards(&relay).await;
        // A pooled connection is back and idle, so the batch's first
        // statement is what meets the stall.
        while pool.pool().num_idle() == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }

        proxy.stall();
        let error = relay
            .run_batch(&shards)
            .await
            .expect_err("a batch against a stalled database must fail");
        assert!(timed_out(&error), "{error}");
        assert!(
            relay.leases().refresh(now_ms()).await.is_err(),
            "a lease refresh against a stalled database must fail"
        );
        // Read past the proxy: nothing was marked.
        assert_eq!(open_rows(&db.pool).await, 6);

        proxy.resume();
        own_all_shards(&relay).await;
        drain(&relay, &db.pool, &shards).await;
    })
    .await
    .expect("the relay hung instead of failing");

    let records = read_distinct(&testkit::kafka_bootstrap(), &topic, 6).await;
    let published: HashSet<_> = records
        .iter()
        .map(|record| record.event_id.clone())
        .collect();
    assert_eq!(published.len(), 6, "every row published");
    for (room, sequences) in sequences_by_room(&records) {
        assert_never_backwards(&room, &sequences);
    }
}
