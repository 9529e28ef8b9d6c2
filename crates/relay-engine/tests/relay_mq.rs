//! The relay in `mq` mode against real MariaDB and the real broker: order,
//! headers, fencing, several relays at once, a relay that dies between
//! publish and mark, and the chain scan. (Dead letters and their replay go
//! through the operator commands: the relay service's `dead_letters.rs`.)

mod common;

use common::*;
use outbox_schema::names;
use relay_engine::store;
use service_kit::db::IdText;
use service_kit::time::now_ms;
use std::{collections::HashSet, time::Duration};
use tokio_util::sync::CancellationToken;

#[tokio::test]
async fn publishes_every_row_in_room_order_with_key_and_headers() {
    let db = testkit::TestDb::new().await;
    let namespace = testkit::unique("ns");
    let mq = mq_config(&testkit::kafka_bootstrap(), &namespace);
    let topic = mq.topic(names::TOPIC_ROOM_OUTBOX);
    testkit::create_topic(&topic, 3).await;
    // Interleave three rooms' events the way concurrent commits would.
    let mut rows = Vec::new();
    for seq in 1..=5 {
        for room in ["room-a", "room-b", "room-c"] {
            rows.extend(room_rows(room, seq, 1));
        }
    }
    insert(&db.pool, &rows).await;

    let relay = mq_relay(&db.pool, &mq, &worker_config("relay-1"));
    let shards = own_all_shards(&relay).await;
    let report = relay.run_batch(&shards).await.unwrap();
    assert_eq!(report.delivered, 15);
    assert_eq!(open_rows(&db.pool).await, 0);

    let records = read_topic(&testkit::kafka_bootstrap(), &topic, 15).await;
    let by_room = sequences_by_room(&records);
    for room in ["room-a", "room-b", "room-c"] {
        assert_eq!(
            by_room[room],
            vec![1, 2, 3, 4, 5],
            "room {room} in commit order"
        );
    }
    assert!(
        records
            .iter()
            .all(|record| record.event_type == "RoomUserJoined")
    );
    assert!(
        records
            .iter()
            .all(|record| record.traceparent.starts_with("00-0af765"))
    );
    let ids: HashSet<_> = records
        .iter()
        .map(|record| record.event_id.clone())
        .collect();
    let expected: HashSet<_> = rows.iter().map(|row| row.event_id.clone()).collect();
    assert_eq!(ids, expected);
}

#[tokio::test]
async fn a_stale_claim_token_cannot_mark_over_a_newer_claim() {
    let db = testkit::TestDb::new().await;
    let mq = mq_config(&testkit::kafka_bootstrap(), &testkit::unique("ns"));
    let relay = mq_relay(&db.pool, &mq, &worker_config("relay-1"));
    own_all_shards(&relay).await;
    let rows = room_rows("room-fence", 1, 3);
    insert(&db.pool, &rows).await;
    let ids: Vec<u64> = sqlx::query_scalar("SELECT id FROM room_outbox ORDER BY id")
        .fetch_all(&db.pool)
        .await
        .unwrap();

    let now = now_ms();
    let old_token = 11;
    assert_eq!(
        store::claim(&db.pool, &ids, "relay-1", old_token, now, now + 1)
            .await
            .unwrap(),
        ids
    );
    // The first claim's lock expires (its relay stalled); a newer claim takes the rows.
    let later = now + 10;
    let new_token = 22;
    assert_eq!(
        store::claim(&db.pool, &ids, "relay-1", new_token, later, later + 30_000)
            .await
            .unwrap(),
        ids
    );

    assert_eq!(
        store::mark_delivered(&db.pool, &ids, old_token, later)
            .await
            .unwrap(),
        0
    );
    assert!(
        !store::mark_failure(&db.pool, ids[0], old_token, true, later, "stale")
            .await
            .unwrap()
    );
    assert_eq!(store::release(&db.pool, &ids, old_token).await.unwrap(), 0);
    assert!(
        statuses(&db.pool, "room-fence")
            .await
            .iter()
            .all(|(_, status)| status == "delivering")
    );

    assert_eq!(
        store::mark_delivered(&db.pool, &ids, new_token, later)
            .await
            .unwrap(),
        3
    );
    assert!(
        statuses(&db.pool, "room-fence")
            .await
            .iter()
            .all(|(_, status)| status == "delivered")
    );
}

#[tokio::test]
async fn claims_need_a_live_shard_lease() {
    let db = testkit::TestDb::new().await;
    let mq = mq_config(&testkit::kafka_bootstrap(), &testkit::unique("ns"));
    let owner = mq_relay(&db.pool, &mq, &worker_config("relay-owner"));
    own_all_shards(&owner).await;
    insert(&db.pool, &room_rows("room-lease", 1, 2)).await;
    let ids: Vec<u64> = sqlx::query_scalar("SELECT id FROM room_outbox ORDER BY id")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    let now = now_ms();
    // Another instance that does not hold the shard claims nothing.
    assert!(
        store::claim(&db.pool, &ids, "relay-intruder", 5, now, now + 30_000)
            .await
            .unwrap()
            .is_empty()
    );
    // Nor does the owner once its lease has lapsed.
    let after_lease = now + 60_000;
    assert!(
        store::claim(
            &db.pool,
            &ids,
            "relay-owner",
            6,
            after_lease,
            after_lease + 1
        )
        .await
        .unwrap()
        .is_empty()
    );
}

#[tokio::test]
async fn two_relays_publish_each_row_exactly_once_in_room_order() {
    let db = testkit::TestDb::new().await;
    let namespace = testkit::unique("ns");
    let mq = mq_config(&testkit::kafka_bootstrap(), &namespace);
    let topic = mq.topic(names::TOPIC_ROOM_OUTBOX);
    testkit::create_topic(&topic, 4).await;
    let shutdown = CancellationToken::new();
    let mut worker_a = worker_config("relay-a");
    let mut worker_b = worker_config("relay-b");
    for worker in [&mut worker_a, &mut worker_b] {
        worker.batch_size = 7;
        // Short leases so the two instances rebalance within a test's
        // patience, yet long enough that a busy machine (the suite runs
        // tests side by side) does not delay a renewal past one: a lapsed
        // lease hands rows published but not yet marked to the other
        // relay, which publishes them again (at least once, by design).
        worker.shard_lease = service_kit::duration::ConfigDuration::from_millis(2_000);
    }
    let relay_a = tokio::spawn(mq_relay(&db.pool, &mq, &worker_a).run(shutdown.clone()));
    let relay_b = tokio::spawn(mq_relay(&db.pool, &mq, &worker_b).run(shutdown.clone()));
    // Wait until the shards are split between both instances, none held twice.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        // `owner` is an id column (byte-exact), read through IdText.
        let owners: Vec<(String, i64)> = sqlx::query_as::<_, (IdText, i64)>(
            "SELECT owner, COUNT(*) FROM relay_shard_leases WHERE lease_until_ms > ? GROUP BY owner ORDER BY owner",
        )
        .bind(now_ms())
        .fetch_all(&db.pool)
        .await
        .unwrap()
        .into_iter()
        .map(|(owner, count)| (owner.into(), count))
        .collect();
        if owners.len() == 2 && owners.iter().map(|(_, count)| count).sum::<i64>() == 64 {
            assert_eq!(
                owners,
                vec![("relay-a".to_string(), 32), ("relay-b".to_string(), 32)]
            );
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "shards never split: {owners:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let rooms: Vec<String> = (0..20).map(|index| format!("room-{index}")).collect();
    let mut expected = 0;
    for seq in 1..=10 {
        let rows: Vec<_> = rooms
            .iter()
            .flat_map(|room| room_rows(room, seq, 1))
            .collect();
        expected += rows.len();
        insert(&db.pool, &rows).await;
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while open_rows(&db.pool).await > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "relays did not drain the outbox"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    shutdown.cancel();
    relay_a.await.unwrap().unwrap();
    relay_b.await.unwrap().unwrap();

    let claimed_by: Vec<IdText> = sqlx::query_scalar("SELECT DISTINCT claimed_by FROM room_outbox")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(claimed_by.len(), 2, "both relays took part: {claimed_by:?}");

    let records = read_topic(&testkit::kafka_bootstrap(), &topic, expected).await;
    let unique: HashSet<_> = records
        .iter()
        .map(|record| record.event_id.clone())
        .collect();
    assert_eq!(unique.len(), expected, "no row published twice");
    for (room, sequences) in sequences_by_room(&records) {
        assert_eq!(
            sequences,
            (1..=10).collect::<Vec<u64>>(),
            "room {room} in commit order"
        );
    }
}

#[tokio::test]
async fn a_relay_dying_between_publish_and_mark_is_redelivered_once_with_the_same_event_id() {
    let db = testkit::TestDb::new().await;
    let namespace = testkit::unique("ns");
    let mq = mq_config(&testkit::kafka_bootstrap(), &namespace);
    let topic = mq.topic(names::TOPIC_ROOM_OUTBOX);
    testkit::create_topic(&topic, 1).await;
    let rows = room_rows("room-crash", 1, 2);
    insert(&db.pool, &rows).await;

    // Relay A claims and publishes the first row, then "dies" before marking it.
    let mut short_claim = worker_config("relay-a");
    short_claim.claim_lease = service_kit::duration::ConfigDuration::from_millis(1);
    let relay_a = mq_relay(&db.pool, &mq, &short_claim);
    own_all_shards(&relay_a).await;
    let now = now_ms();
    let scanned = store::scan_chain(
        &db.pool,
        &[outbox_schema::shard_of("room-crash")],
        0,
        &[],
        1,
    )
    .await
    .unwrap();
    assert_eq!(
        store::claim(&db.pool, &[scanned[0].id], "relay-a", 99, now, now + 1)
            .await
            .unwrap()
            .len(),
        1
    );
    relay_engine::publish::MqPublisher::new(&mq, Duration::from_secs(5))
        .unwrap()
        .publish(&scanned[0], &scanned[0].traceparent, Duration::from_secs(5))
        .await
        .unwrap();
    relay_a.leases().leave().await.unwrap();

    // Relay B takes over once A's claim has expired and delivers both rows.
    let relay_b = mq_relay(&db.pool, &mq, &worker_config("relay-b"));
    let shards = own_all_shards(&relay_b).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while open_rows(&db.pool).await > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "relay b never delivered"
        );
        relay_b.run_batch(&shards).await.unwrap();
    }
    let records = read_topic(&testkit::kafka_bootstrap(), &topic, 3).await;
    let first: Vec<_> = records
        .iter()
        .filter(|record| record.event_id == rows[0].event_id)
        .collect();
    assert_eq!(first.len(), 2, "redelivered once, with the same event_id");
    assert_eq!(
        sequences_by_room(&records)["room-crash"],
        vec![1, 1, 2],
        "order holds across the takeover"
    );
}

/// The next batch's scan leaves out the rows the previous batch published
/// but has not marked yet, and still returns a full page of the rest.
#[tokio::test]
async fn the_chain_scan_skips_the_rows_it_is_told_to() {
    let db = testkit::TestDb::new().await;
    let rows = room_rows("room-skip", 1, 5);
    insert(&db.pool, &rows).await;
    let shard = [outbox_schema::shard_of("room-skip")];
    let all = store::scan_chain(&db.pool, &shard, 0, &[], 10)
        .await
        .unwrap();
    let ids: Vec<u64> = all.iter().map(|row| row.id).collect();
    assert_eq!(ids.len(), 5);

    let skipped = [ids[0], ids[2]];
    let page = store::scan_chain(&db.pool, &shard, 0, &skipped, 2)
        .await
        .unwrap();
    assert_eq!(
        page.iter().map(|row| row.id).collect::<Vec<_>>(),
        vec![ids[1], ids[3]],
        "a full page of the rows not skipped, in commit order"
    );
    let rest = store::scan_chain(&db.pool, &shard, ids[3], &skipped, 10)
        .await
        .unwrap();
    assert_eq!(
        rest.iter().map(|row| row.id).collect::<Vec<_>>(),
        vec![ids[4]]
    );
}
