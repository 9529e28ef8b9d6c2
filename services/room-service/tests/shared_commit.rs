//! Cross-room group commit: mutations of several rooms in one transaction,
//! each room still all or nothing with its own precise answer when one of
//! them fails a check, and many rooms committing concurrently through the
//! service's commit lanes.

mod common;

use std::sync::Arc;

use common::*;
use outbox_schema::NewOutboxRow;
use room_service::store::saga::{NewSaga, SagaStart};
use room_service::store::{
    Done, Mutation, NewCommandRow, RoomMetaUpdate, SaveError, Store, Work, commit_batch,
};
use sqlx::MySqlPool;
use testkit::TestDb;

/// A mutation moving `room` from `expected_version` by one command per id,
/// with two outbox rows per command.
fn mutation(room: &str, expected_version: u64, command_ids: &[&str]) -> Mutation {
    let now_ms = service_kit::time::now_ms();
    let version = expected_version + command_ids.len() as u64;
    let commands = command_ids
        .iter()
        .enumerate()
        .map(|(index, id)| NewCommandRow {
            command_id: (*id).to_owned(),
            room_version: expected_version + index as u64 + 1,
            command_name: "SendGift",
            fingerprint: [7; 32],
            command: b"{}".to_vec(),
            applied_at_ms: now_ms,
            reply: Vec::new(),
        })
        .collect();
    let outbox = (0..command_ids.len() as u64 * 2)
        .map(|offset| {
            let seq = expected_version * 2 + offset + 1;
            NewOutboxRow {
                event_id: format!("{room}-event-{seq}"),
                app_code: "hyapp".into(),
                room_id: room.to_owned(),
                shard: outbox_schema::shard_of(room),
                lane: outbox_schema::row::LANE_CHAIN,
                room_event_seq: seq,
                event_type: "RoomGiftSent".into(),
                topic: "room.events".into(),
                payload: vec![1, 2, 3],
                traceparent: String::new(),
                next_retry_at_ms: now_ms,
                created_at_ms: now_ms,
            }
        })
        .collect();
    Mutation {
        room_id: room.to_owned(),
        expected_version,
        meta: RoomMetaUpdate {
            app_code: "hyapp".into(),
            status: "open",
            owner_id: format!("{room}-owner"),
            title: format!("{room} at {version}"),
            version,
            event_seq: version * 2,
            heat: version * 10,
        },
        now_ms,
        commands,
        outbox,
        committed_gifts: Vec::new(),
        snapshot: (expected_version == 0).then(|| (version, b"{\"creation\":true}".to_vec())),
    }
}

async fn room_row(pool: &MySqlPool, room: &str) -> Option<(u64, String)> {
    sqlx::query_as("SELECT version, title FROM rooms WHERE room_id = ?")
        .bind(room)
        .fetch_optional(pool)
        .await
        .unwrap()
}

async fn outbox_seqs(pool: &MySqlPool, room: &str) -> Vec<u64> {
    sqlx::query_scalar("SELECT room_event_seq FROM room_outbox WHERE room_id = ? ORDER BY id")
        .bind(room)
        .fetch_all(pool)
        .await
        .unwrap()
}

fn saga(command_id: &str, room: &str) -> NewSaga {
    NewSaga {
        command_id: command_id.into(),
        room_id: room.into(),
        sender_id: "fan".into(),
        amount: 10,
    }
}

fn start(sagas: &[NewSaga]) -> Work {
    Work::StartSagas(sagas.to_vec().into(), service_kit::time::now_ms())
}

/// Commits `work` as one lane batch; each outcome as a short name.
async fn commit(pool: &MySqlPool, work: Vec<Work>) -> Vec<String> {
    commit_batch(pool, &work)
        .await
        .iter()
        .map(|done| match done {
            Done::Saved(Ok(())) => "ok".to_owned(),
            Done::Saved(Err(SaveError::DuplicateCommandId)) => "duplicate".to_owned(),
            Done::Saved(Err(SaveError::VersionConflict)) => "conflict".to_owned(),
            Done::Saved(Err(SaveError::SagaGone)) => "saga gone".to_owned(),
            Done::Saved(Err(SaveError::Database { error, .. })) => format!("database: {error}"),
            Done::Started(Ok(starts)) => starts
                .iter()
                .map(|start| match start {
                    SagaStart::Started => "started".to_owned(),
                    SagaStart::Exists(row) => format!("exists {}", row.status),
                })
                .collect::<Vec<_>>()
                .join(","),
            Done::Started(Err(error)) => format!("saga database: {error}"),
        })
        .collect()
}

async fn save(pool: &MySqlPool, mutations: Vec<Mutation>) -> Vec<String> {
    let work = mutations
        .into_iter()
        .map(|mutation| Work::Save(Arc::new(mutation)))
        .collect();
    commit(pool, work).await
}

async fn saga_status(pool: &MySqlPool, command_id: &str) -> Option<String> {
    sqlx::query_scalar("SELECT status FROM room_gift_saga WHERE command_id = ?")
        .bind(command_id)
        .fetch_optional(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn rooms_created_and_updated_together_each_get_their_own_rows() {
    let db = TestDb::new().await;
    let rooms = ["a", "b", "c"];
    let mut work: Vec<Work> = rooms
        .iter()
        .map(|room| Work::Save(Arc::new(mutation(room, 0, &[&format!("{room}-1")]))))
        .collect();
    work.push(start(&[saga("gift-1", "a"), saga("gift-2", "a")]));
    work.push(start(&[saga("gift-3", "b")]));
    let created = commit(&db.pool, work).await;
    assert_eq!(created, ["ok", "ok", "ok", "started,started", "started"]);
    for gift in ["gift-1", "gift-2", "gift-3"] {
        assert_eq!(
            saga_status(&db.pool, gift).await.as_deref(),
            Some("debiting")
        );
    }
    let updated = save(
        &db.pool,
        rooms
            .iter()
            .map(|room| mutation(room, 1, &[&format!("{room}-2"), &format!("{room}-3")]))
            .collect(),
    )
    .await;
    assert_eq!(updated, ["ok", "ok", "ok"]);

    for room in rooms {
        assert_eq!(
            room_row(&db.pool, room).await,
            Some((3, format!("{room} at 3"))),
            "room {room}"
        );
        // The rows of each room, in commit order, none of another room's.
        assert_eq!(outbox_seqs(&db.pool, room).await, [1, 2, 3, 4, 5, 6]);
        assert_eq!(
            count(&db.pool, "room_command_log", "room_id", room).await,
            3
        );
        assert_eq!(count(&db.pool, "room_snapshots", "room_id", room).await, 1);
    }
}

#[tokio::test]
async fn a_failed_check_in_a_shared_commit_costs_only_its_own_room() {
    let db = TestDb::new().await;
    let setup = save(
        &db.pool,
        ["ok", "stale", "reused", "refunded", "paid"]
            .iter()
            .map(|room| mutation(room, 0, &[&format!("{room}-1")]))
            .collect(),
    )
    .await;
    assert!(setup.iter().all(|done| done == "ok"), "{setup:?}");
    // Two gifts: one with a live saga, one whose saga is gone (never started
    // here; the sweep's compensation looks the same to the commit).
    let store = Store::new(db.pool.clone());
    let started = store
        .start_sagas(
            &[saga("paid-2", "paid"), saga("old-gift", "paid")],
            service_kit::time::now_ms(),
        )
        .await
        .unwrap();
    assert_eq!(started.len(), 2);
    let mut refunded = mutation("refunded", 1, &["refunded-2"]);
    refunded.committed_gifts = vec!["refunded-2".into()];
    let mut paid = mutation("paid", 1, &["paid-2"]);
    paid.committed_gifts = vec!["paid-2".into()];

    let results = commit(
        &db.pool,
        [
            mutation("ok", 1, &["ok-2"]),
            // Another owner moved this room on: the compare-and-set fails.
            mutation("stale", 4, &["stale-2"]),
            // A command id already in the log (room "ok"'s first command).
            mutation("reused", 1, &["ok-1"]),
            refunded,
            paid,
            mutation("new", 0, &["new-1"]),
        ]
        .into_iter()
        .map(|mutation| Work::Save(Arc::new(mutation)))
        // A saga that already exists, beside a new one of another room.
        .chain([
            start(&[saga("old-gift", "paid")]),
            start(&[saga("new-gift", "new")]),
        ])
        .collect(),
    )
    .await;
    assert_eq!(
        results,
        [
            "ok",
            "conflict",
            "duplicate",
            "saga gone",
            "ok",
            "ok",
            "exists debiting",
            "started"
        ]
    );
    assert_eq!(
        saga_status(&db.pool, "new-gift").await.as_deref(),
        Some("debiting")
    );

    assert_eq!(room_row(&db.pool, "ok").await.map(|row| row.0), Some(2));
    assert_eq!(room_row(&db.pool, "paid").await.map(|row| row.0), Some(2));
    assert_eq!(room_row(&db.pool, "new").await.map(|row| row.0), Some(1));
    assert_eq!(
        saga_status(&db.pool, "paid-2").await.as_deref(),
        Some("committed")
    );
    // The rooms that failed kept nothing of the attempt.
    for room in ["stale", "reused", "refunded"] {
        assert_eq!(
            room_row(&db.pool, room).await.map(|row| row.0),
            Some(1),
            "{room}"
        );
        assert_eq!(outbox_seqs(&db.pool, room).await, [1, 2], "{room}");
        assert_eq!(
            count(&db.pool, "room_command_log", "room_id", room).await,
            1,
            "{room}"
        );
    }
}

#[tokio::test]
async fn many_rooms_commit_concurrently_through_one_lane() {
    // One lane, so concurrent commands of different rooms queue behind each
    // other and go out together.
    let mut harness = Harness::start_with(|config| {
        config.room.shared_commit_lanes = 1;
        config.room.shared_commit_max_rooms = 8;
    })
    .await;
    let rooms: Vec<String> = (0..24)
        .map(|index| testkit::unique(&format!("lane-{index}-")))
        .collect();
    let creates = rooms.iter().map(|room| {
        let mut client = harness.client.clone();
        let request = create(room, "owner");
        async move { client.create_room(request).await }
    });
    for result in futures::future::join_all(creates).await {
        result.expect("create");
    }
    let joins = rooms.iter().flat_map(|room| {
        (0..3).map(|user| {
            let mut client = harness.client.clone();
            let request = join(room, &format!("user-{user}"));
            async move { client.join_room(request).await }
        })
    });
    for result in futures::future::join_all(joins).await {
        result.expect("join");
    }
    for room in &rooms {
        let state = room_state(&mut harness.client, room).await;
        assert_eq!(state.version, 4, "{room}: created and joined three times");
        assert_eq!(
            count(&harness.pool, "room_command_log", "room_id", room).await,
            4
        );
    }
    // The lane did share: some transaction carried more than one room.
    let rooms_committed = harness.metric("room_shared_commit_rooms_sum").await;
    let transactions = harness.metric("room_shared_commit_rooms_count").await;
    assert!(
        rooms_committed > transactions,
        "{rooms_committed} room writes in {transactions} transactions: never shared"
    );
    harness.stop().await;
}
