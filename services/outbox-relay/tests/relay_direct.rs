//! The relay in `direct` mode against the faithful fake of Tencent IM (seed
//! 000/001 acceptance rows): EnsureGroup for RoomCreated, one message per
//! event even when redelivered, IM outages retried until delivered, and a
//! permanent IM error dead-lettering the event while the room moves on.

mod common;

use common::*;
use fake_tencent_im::{FakeImConfig, FaultRule};
use room_core::EventKind;
use std::time::{Duration, Instant};

const SEND_GROUP_MSG: &str = "group_open_http_svc/send_group_msg";

async fn fake_im() -> fake_tencent_im::FakeImHandle {
    fake_tencent_im::spawn(FakeImConfig::new(IM_APP_ID, IM_KEY, "administrator"))
        .await
        .unwrap()
}

fn created(room_id: &str) -> outbox_schema::NewOutboxRow {
    event_row(
        room_id,
        1,
        EventKind::RoomCreated {
            owner_id: "host".into(),
            title: "Lounge".into(),
            mic_seat_count: 8,
        },
    )
}

async fn drain(relay: &outbox_relay::Relay, pool: &sqlx::MySqlPool, shards: &[u16]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while open_rows(pool).await > 0 {
        assert!(Instant::now() < deadline, "relay did not drain");
        relay.run_batch(shards).await.unwrap();
    }
}

#[tokio::test]
async fn ensures_the_group_and_sends_each_event_once_even_when_redelivered() {
    let db = testkit::TestDb::new().await;
    let fake = fake_im().await;
    let relay = direct_relay(&db.pool, &fake.base_url(), &worker_config("relay-direct"));
    let shards = own_all_shards(&relay).await;
    let rows = vec![
        event_row(
            "room-d",
            1,
            EventKind::RoomCreated {
                owner_id: "host".into(),
                title: "Lounge".into(),
                mic_seat_count: 8,
            },
        ),
        event_row(
            "room-d",
            2,
            EventKind::RoomUserJoined {
                user_id: "alice".into(),
            },
        ),
        event_row(
            "room-d",
            3,
            EventKind::RoomUserJoined {
                user_id: "bob".into(),
            },
        ),
    ];
    insert(&db.pool, &rows).await;
    drain(&relay, &db.pool, &shards).await;

    let groups = fake.groups();
    assert!(
        groups
            .iter()
            .any(|group| group.group_id == "room_room-d" && group.group_type == "AVChatRoom"),
        "{groups:?}"
    );
    let messages = fake.group_messages("room_room-d");
    assert_eq!(
        messages.len(),
        2,
        "one message per join, none for RoomCreated"
    );
    let randoms: Vec<u32> = rows[1..]
        .iter()
        .map(|row| tencent_im::random_from_event_id(&row.event_id))
        .collect();
    assert_eq!(
        messages
            .iter()
            .map(|message| message.random)
            .collect::<Vec<_>>(),
        randoms
    );

    // A redelivery (relay crash before mark, replay): no second message.
    sqlx::query("UPDATE room_outbox SET status = 'pending'")
        .execute(&db.pool)
        .await
        .unwrap();
    drain(&relay, &db.pool, &shards).await;
    assert_eq!(fake.group_messages("room_room-d").len(), 2);
}

#[tokio::test]
async fn im_outage_is_retried_with_backoff_until_delivered() {
    let db = testkit::TestDb::new().await;
    let fake = fake_im().await;
    let relay = direct_relay(&db.pool, &fake.base_url(), &worker_config("relay-direct"));
    let shards = own_all_shards(&relay).await;
    insert(&db.pool, &[created("room-outage")]).await;
    drain(&relay, &db.pool, &shards).await;
    fake.inject_fault(FaultRule::http_status(SEND_GROUP_MSG, 503).times(2));
    let rows = room_rows("room-outage", 2, 2);
    insert(&db.pool, &rows).await;

    let first = relay.run_batch(&shards).await.unwrap();
    assert_eq!((first.delivered, first.retried, first.released), (0, 1, 1));
    let (status, retries, error): (String, u32, String) = sqlx::query_as(
        "SELECT status, retry_count, last_error FROM room_outbox WHERE event_id = ?",
    )
    .bind(&rows[0].event_id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!((status.as_str(), retries), ("retryable", 1));
    assert!(error.contains("tencent im"), "{error}");
    assert!(error.len() < 300, "last_error stays short: {error}");

    drain(&relay, &db.pool, &shards).await;
    assert_eq!(
        statuses(&db.pool, "room-outage").await,
        vec![
            (1, "delivered".into()),
            (2, "delivered".into()),
            (3, "delivered".into())
        ]
    );
    assert_eq!(fake.group_messages("room_room-outage").len(), 2);
}

#[tokio::test]
async fn a_permanent_im_error_dead_letters_the_event_and_the_room_moves_on() {
    let db = testkit::TestDb::new().await;
    let fake = fake_im().await;
    let relay = direct_relay(&db.pool, &fake.base_url(), &worker_config("relay-direct"));
    let shards = own_all_shards(&relay).await;
    // 80001: Tencent's content-filter rejection — retrying cannot help.
    insert(&db.pool, &[created("room-poison")]).await;
    drain(&relay, &db.pool, &shards).await;
    fake.inject_fault(FaultRule::error_code(SEND_GROUP_MSG, 80001).times(1));
    insert(&db.pool, &room_rows("room-poison", 2, 2)).await;
    drain(&relay, &db.pool, &shards).await;
    let letters = outbox_relay::ops::list_dead_letters(&db.pool, &Default::default())
        .await
        .unwrap();
    assert_eq!(
        statuses(&db.pool, "room-poison").await,
        vec![
            (1, "delivered".into()),
            (2, "failed".into()),
            (3, "delivered".into())
        ],
        "{letters:?}"
    );
    let letters = outbox_relay::ops::list_dead_letters(&db.pool, &Default::default())
        .await
        .unwrap();
    assert!(
        letters[0].last_error.contains("80001"),
        "{}",
        letters[0].last_error
    );
    assert_eq!(fake.group_messages("room_room-poison").len(), 1);
}
