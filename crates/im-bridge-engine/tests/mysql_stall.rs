//! The IM bridge's handler with its MariaDB behind a proxy that stops
//! forwarding mid-stream (docs/design.md#client-timeouts): the dedup check
//! before an IM call against the stalled database fails within
//! `mysql.statement_timeout` instead of waiting until TCP gives up, and
//! nothing reaches Tencent IM; once the proxy forwards again the same event
//! is sent exactly once, and a redelivery is a duplicate. The dedup purge
//! (with the pending gift batches' purge) fails the same way and then runs.

use consumer_runtime::testing::envelope;
use consumer_runtime::{Delivery, Handler, Outcome};
use fake_tencent_im::FakeImConfig;
use im_bridge_engine::{BridgeConfig, bridge_handler};
use outbox_schema::pb::{self, room_outbox_event::Payload};
use std::sync::Arc;
use std::time::Duration;
use testkit::stall::StallingProxy;

/// The test's own deadline: a call that hangs fails the test here instead
/// of hanging the suite. Not an assertion about speed.
const TEST_DEADLINE: Duration = Duration::from_secs(60);
const STATEMENT_TIMEOUT: Duration = Duration::from_millis(500);

/// A delivery of `payload` as event `seq` of `room`.
fn delivery(room: &str, seq: u64, payload: Payload) -> Delivery<pb::RoomOutboxEvent> {
    let event = envelope(&uuid::Uuid::new_v4().to_string(), room, seq, payload);
    Delivery {
        message: Arc::new(event),
        partition: 0,
        offset: i64::try_from(seq).unwrap(),
        attempt: 1,
        traceparent: String::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_database_fails_the_dedup_check_sends_nothing_and_the_retry_sends_once() {
    let db = testkit::TestDb::new().await;
    let fake = fake_tencent_im::spawn(FakeImConfig::new(1_400_000_007, "stall-key", "admin"))
        .await
        .unwrap();
    let im = tencent_im::Client::new(tencent_im::ClientConfig::new(
        fake.base_url(),
        1_400_000_007,
        "admin",
        "stall-key",
    ))
    .unwrap();
    let proxy = StallingProxy::start(testkit::stall::mysql_server_address()).await;
    let pool = testkit::stall::bounded_pool_via(&proxy, &db.name, STATEMENT_TIMEOUT).await;
    let group = testkit::unique("stall_bridge_");
    let handler = bridge_handler(
        BridgeConfig::default(),
        "room_{room_id}".into(),
        im,
        pool.clone(),
        &group,
    )
    .unwrap();
    let room = testkit::unique("room-");
    let im_group = format!("room_{room}");
    let created = delivery(
        &room,
        1,
        Payload::RoomCreated(pb::RoomCreated {
            owner_id: "owner".into(),
            title: "stall".into(),
            mic_seat_count: 8,
        }),
    );
    let outcomes = handler
        .handle_batch(&[created])
        .await
        .expect("the room's group");
    assert_eq!(outcomes, vec![Outcome::Applied]);
    let delivery = delivery(
        &room,
        2,
        Payload::RoomUserJoined(pb::RoomUserJoined {
            user_id: "user-2".into(),
        }),
    );

    proxy.stall();
    let stalled = tokio::time::timeout(
        TEST_DEADLINE,
        handler.handle_batch(std::slice::from_ref(&delivery)),
    )
    .await
    .expect("the handler ends instead of waiting on the stalled database");
    let error = format!("{:?}", stalled.expect_err("a stalled database is an error"));
    assert!(
        error.contains("mysql.statement_timeout"),
        "the error names the timeout: {error}"
    );
    assert!(
        fake.group_messages(&im_group).is_empty(),
        "nothing sent while the dedup state is unknown"
    );
    let purge = tokio::time::timeout(
        TEST_DEADLINE,
        consumer_runtime::dedup::purge_older_than(&pool, &group, Duration::from_secs(60), 100),
    )
    .await
    .expect("the purge ends instead of waiting on the stalled database");
    assert!(purge.is_err(), "a stalled purge is an error: {purge:?}");

    proxy.resume();
    let outcomes = tokio::time::timeout(
        TEST_DEADLINE,
        handler.handle_batch(std::slice::from_ref(&delivery)),
    )
    .await
    .expect("handled once the database answers")
    .expect("the retry succeeds");
    assert_eq!(outcomes, vec![Outcome::Applied]);
    let again = handler
        .handle_batch(std::slice::from_ref(&delivery))
        .await
        .expect("a redelivery");
    assert_eq!(again, vec![Outcome::Duplicate]);
    assert_eq!(fake.group_messages(&im_group).len(), 1, "sent exactly once");
    consumer_runtime::dedup::purge_older_than(&pool, &group, Duration::from_secs(60), 100)
        .await
        .expect("the purge runs once the database answers");
}
