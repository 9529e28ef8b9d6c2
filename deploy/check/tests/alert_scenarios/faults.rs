//! What each scenario (`super::scenarios`) breaks and what it waits for
//! before the scrapes: the services' own metrics showing the break.

use super::{
    planted::{clobber_projection_keys, crashed_sagas},
    probe::{keep_doing, total, until, values},
    scenarios::{Fault, Scenario},
    stack::Stack,
};
use consumer_runtime::testing::{TestProducer, envelope};
use fake_tencent_im::FaultRule;
use fake_wallet::{FaultCode, Method};
use hyapp_api::room::{
    CommandMeta, CreateRoomRequest, JoinRoomRequest, SendGiftRequest,
    room_service_client::RoomServiceClient,
};
use outbox_schema::{NewOutboxRow, names, pb, pb::room_outbox_event::Payload};
use service_kit::time::now_ms;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// The longest refresh of an exported gauge (the broker-read lag, the
/// failed-row counts): the second scrape comes at least this long after the
/// first, so every gauge had a reading in between, as over a real scrape
/// interval.
const GAUGE_REFRESH: Duration = Duration::from_secs(16);
/// The room of the healthy session.
pub const ROOM: &str = "alerts-room";

fn meta(prefix: &str) -> Option<CommandMeta> {
    Some(CommandMeta {
        command_id: testkit::unique(prefix),
        request_id: testkit::unique("req-"),
        app_code: String::new(),
    })
}

async fn client(stack: &Stack) -> RoomServiceClient<tonic::transport::Channel> {
    RoomServiceClient::connect(stack.grpc.clone())
        .await
        .unwrap()
}

fn gift() -> SendGiftRequest {
    SendGiftRequest {
        meta: meta("gift-"),
        room_id: ROOM.into(),
        sender_id: "alice".into(),
        receiver_id: "bob".into(),
        gift_id: "rose".into(),
        count: 1,
        unit_value: 10,
    }
}

fn join(room: &str, user: &str) -> JoinRoomRequest {
    JoinRoomRequest {
        meta: meta("join-"),
        room_id: room.into(),
        user_id: user.into(),
    }
}

/// A room session through room-service (create, joins, a gift), then waits
/// until the relay owns every shard and each consumer consumed it and reads
/// no lag from the broker.
pub async fn healthy_session(stack: &Stack, relay_publishes: bool) {
    stack.wallet.set_balance("alice", 1_000_000);
    let mut client = client(stack).await;
    client
        .create_room(CreateRoomRequest {
            meta: meta("create-"),
            room_id: ROOM.into(),
            owner_id: "alice".into(),
            title: "alerts".into(),
            mic_seat_count: 8,
        })
        .await
        .unwrap();
    for user in ["bob", "carol"] {
        client.join_room(join(ROOM, user)).await.unwrap();
    }
    client.send_gift(gift()).await.unwrap();
    until("the relay to own all 64 shards", || async {
        total(stack, "outbox-relay", "room_outbox_owned_shards").await == 64.0
    })
    .await;
    if relay_publishes {
        for job in ["im-bridge", "activity-consumer", "notice-consumer"] {
            until(&format!("{job} to consume the session"), || async {
                total(stack, job, "consumer_messages_consumed_total").await >= 4.0
                    && !values(stack, job, "consumer_partition_lag_messages")
                        .await
                        .is_empty()
                    && total(stack, job, "consumer_partition_lag_messages").await == 0.0
            })
            .await;
        }
    }
}

fn heat_event(room: &str, seq: u64, age_ms: i64) -> pb::RoomOutboxEvent {
    let mut event = envelope(
        &uuid::Uuid::now_v7().to_string(),
        room,
        seq,
        Payload::RoomHeatChanged(pb::RoomHeatChanged {
            heat: seq,
            delta: 1,
        }),
    );
    event.occurred_at_ms = now_ms() - age_ms;
    event
}

/// Inserts `events` as room-service commits them, `age_ms` ago.
async fn insert(stack: &Stack, events: &[pb::RoomOutboxEvent], age_ms: i64) {
    let rows: Vec<NewOutboxRow> = events
        .iter()
        .map(|event| NewOutboxRow::event(event, now_ms() - age_ms))
        .collect();
    let mut tx = stack.db.pool.begin().await.unwrap();
    outbox_store::insert_outbox_rows(&mut tx, &rows)
        .await
        .unwrap();
    tx.commit().await.unwrap();
}

/// Breaks what `scenario` breaks and waits until the services show it;
/// what must go on between the scrapes runs until the token is cancelled.
pub async fn induce(scenario: &Scenario, stack: &mut Stack) -> CancellationToken {
    let producer = TestProducer::new(&testkit::kafka_bootstrap()).unwrap();
    let topic = stack.mq.topic(names::TOPIC_ROOM_OUTBOX);
    match scenario.fault {
        Fault::None
        | Fault::StopRelay
        | Fault::UndiscoverRelay
        | Fault::StopNoticeConsumer
        | Fault::StopRoomService
        | Fault::FailOutboxRow
        | Fault::RefuseNotice => induce_stops(scenario, stack, producer, topic).await,
        Fault::BridgeImDown | Fault::ImGroupLimitRefusals | Fault::MalformedMessages => {
            induce_consumer_faults(scenario, stack, producer, topic).await
        }
        Fault::OldBacklog => induce_old_backlog(scenario, stack).await,
        Fault::RelayCutOff | Fault::ClaimsTakenOver => induce_relay_backlogs(scenario, stack).await,
        Fault::RejectedCommands | Fault::SlowWallet | Fault::DebitRepliesLost => {
            induce_command_faults(scenario, stack).await
        }
        Fault::RefundsFailing
        | Fault::RefundsExhausted
        | Fault::ProjectionKeysClobbered
        | Fault::IdleRelayInstance => induce_state_faults(scenario, stack).await,
    }
}

/// A service stopped or gone, a failed outbox row, a notice IM refuses.
async fn induce_stops(
    scenario: &Scenario,
    stack: &mut Stack,
    producer: TestProducer,
    topic: String,
) -> CancellationToken {
    match scenario.fault {
        Fault::None => CancellationToken::new(),
        Fault::StopRelay => {
            stack.stop("outbox-relay").await;
            CancellationToken::new()
        }
        Fault::UndiscoverRelay => {
            stack.stop("outbox-relay").await;
            stack.targets.remove("outbox-relay");
            CancellationToken::new()
        }
        Fault::StopNoticeConsumer => {
            stack.stop("notice-consumer").await;
            CancellationToken::new()
        }
        Fault::StopRoomService => {
            stack.stop("room-service").await;
            CancellationToken::new()
        }
        Fault::FailOutboxRow => {
            // A row as the relay leaves it once it gives up on it.
            sqlx::query(
                "UPDATE room_outbox SET status = 'failed', last_error = 'publish refused' \
                 ORDER BY id LIMIT 1",
            )
            .execute(&stack.db.pool)
            .await
            .unwrap();
            until("room_outbox_failed", || async {
                total(stack, "outbox-relay", "room_outbox_failed").await == 1.0
            })
            .await;
            CancellationToken::new()
        }
        Fault::RefuseNotice => {
            stack.im.inject_fault(
                FaultRule::error_code("openim/sendmsg", tencent_im::codes::OPENIM_TO_ACCOUNT)
                    .times(1_000),
            );
            let opened = envelope(
                &uuid::Uuid::now_v7().to_string(),
                ROOM,
                100,
                Payload::RoomTreasureOpened(pb::RoomTreasureOpened {
                    box_id: "box-1".into(),
                    level: 1,
                    opened_at_ms: now_ms(),
                    rewarded_user_ids: vec!["dave".into()],
                }),
            );
            producer.send_event(&topic, &opened).await.unwrap();
            until("a failed notice row counted", || async {
                total(stack, "notice-consumer", "consumer_delivery_failed_rows").await >= 1.0
            })
            .await;
            CancellationToken::new()
        }
        other => unreachable!("{other:?} is induced elsewhere"),
    }
}

/// IM refusing im-bridge or limiting its group, malformed messages.
async fn induce_consumer_faults(
    scenario: &Scenario,
    stack: &mut Stack,
    producer: TestProducer,
    topic: String,
) -> CancellationToken {
    match scenario.fault {
        Fault::BridgeImDown => {
            stack
                .im
                .inject_fault(FaultRule::http_status("*", 500).times(u32::MAX));
            // One room: one partition, held by the message IM refuses.
            let backlog: Vec<pb::RoomOutboxEvent> = (0..1_100)
                .map(|seq| heat_event(ROOM, 1_000 + seq, 0))
                .collect();
            let joined = envelope(
                &uuid::Uuid::now_v7().to_string(),
                ROOM,
                999,
                Payload::RoomUserJoined(pb::RoomUserJoined {
                    user_id: "erin".into(),
                }),
            );
            producer.send_event(&topic, &joined).await.unwrap();
            producer.send_events(&topic, &backlog).await.unwrap();
            until("im-bridge's broker-read lag above 1000", || async {
                total(stack, "im-bridge", "consumer_partition_lag_messages").await > 1_000.0
                    && total(stack, "im-bridge", "consumer_messages_retried_total").await > 0.0
            })
            .await;
            CancellationToken::new()
        }
        Fault::ImGroupLimitRefusals => {
            // Tencent's answer to a group over its 40 messages a second, as
            // a second sender into the room's group would cause, once per
            // new event, until the scrapes are taken.
            let faults = format!("{}/admin/faults", stack.im.base_url());
            let http = reqwest::Client::new();
            let send = move || {
                let (producer, topic) = (producer.clone(), topic.clone());
                let (http, faults) = (http.clone(), faults.clone());
                async move {
                    let rule = serde_json::json!({
                        "api": "group_open_http_svc/send_group_msg",
                        "msg_drop_reason": "MsgFreqCtrl",
                    });
                    http.post(&faults)
                        .json(&rule)
                        .send()
                        .await
                        .unwrap()
                        .error_for_status()
                        .unwrap();
                    let joined = envelope(
                        &uuid::Uuid::now_v7().to_string(),
                        ROOM,
                        998,
                        Payload::RoomUserJoined(pb::RoomUserJoined {
                            user_id: "frank".into(),
                        }),
                    );
                    producer.send_event(&topic, &joined).await.unwrap();
                }
            };
            let token = keep_doing(Duration::from_millis(500), send);
            until("im-bridge counted a refusal", || async {
                total(stack, "im-bridge", "im_freq_limit_refusals_total").await >= 1.0
            })
            .await;
            token
        }
        Fault::MalformedMessages => {
            let send = move || {
                let (producer, topic) = (producer.clone(), topic.clone());
                async move {
                    producer
                        .send_raw(&topic, ROOM, b"\xffnot protobuf", None)
                        .await
                        .unwrap();
                }
            };
            let token = keep_doing(Duration::from_millis(500), send);
            until("a dead letter", || async {
                total(stack, "im-bridge", "consumer_messages_dead_lettered_total").await >= 1.0
            })
            .await;
            token
        }
        other => unreachable!("{other:?} is induced elsewhere"),
    }
}

/// The relay cut off, its claims taken over, old events in the outbox.
async fn induce_relay_backlogs(scenario: &Scenario, stack: &mut Stack) -> CancellationToken {
    match scenario.fault {
        Fault::RelayCutOff => {
            for batch in 0..21 {
                let events: Vec<pb::RoomOutboxEvent> = (0..500)
                    .map(|index| heat_event(&format!("cut-{}", index % 50), batch * 500 + index, 0))
                    .collect();
                insert(stack, &events, 0).await;
            }
            let pool_stack = (stack.db.pool.clone(), 20_000u64);
            let token = keep_doing(Duration::from_millis(250), move || {
                let (pool, _) = pool_stack.clone();
                async move {
                    let events: Vec<pb::RoomOutboxEvent> = (0..20)
                        .map(|index| heat_event("cut-more", index, 0))
                        .collect();
                    let rows: Vec<NewOutboxRow> = events
                        .iter()
                        .map(|event| NewOutboxRow::event(event, now_ms()))
                        .collect();
                    let mut tx = pool.begin().await.unwrap();
                    outbox_store::insert_outbox_rows(&mut tx, &rows)
                        .await
                        .unwrap();
                    tx.commit().await.unwrap();
                }
            });
            until("a backlog above 10000 and failed publishes", || async {
                total(stack, "outbox-relay", "room_outbox_pending").await > 10_000.0
                    && total(stack, "outbox-relay", "room_outbox_publish_failure_total").await > 0.0
            })
            .await;
            token
        }
        Fault::ClaimsTakenOver => {
            // Rows keep coming; each publish fails after a second (no
            // broker), and meanwhile the shards' lease epochs move on, as a
            // takeover by another relay bumps them: the failure marks of the
            // relay, fenced by the epoch it published under, are refused.
            let pool = stack.db.pool.clone();
            let token = keep_doing(Duration::from_millis(100), move || {
                let pool = pool.clone();
                async move {
                    // A room per batch, so every batch has rows to fail.
                    let room = testkit::unique("taken-");
                    let events: Vec<pb::RoomOutboxEvent> =
                        (0..8).map(|index| heat_event(&room, index, 0)).collect();
                    let rows: Vec<NewOutboxRow> = events
                        .iter()
                        .map(|event| NewOutboxRow::event(event, now_ms()))
                        .collect();
                    let mut tx = pool.begin().await.unwrap();
                    outbox_store::insert_outbox_rows(&mut tx, &rows)
                        .await
                        .unwrap();
                    tx.commit().await.unwrap();
                    sqlx::query("UPDATE relay_shard_leases SET epoch = epoch + 1")
                        .execute(&pool)
                        .await
                        .unwrap();
                }
            });
            until("fenced marks", || async {
                total(stack, "outbox-relay", "room_outbox_fenced_marks_total").await >= 1.0
            })
            .await;
            token
        }
        other => unreachable!("{other:?} is induced elsewhere"),
    }
}

/// Old events keep arriving in the outbox, as a slow relay would leave them.
async fn induce_old_backlog(scenario: &Scenario, stack: &mut Stack) -> CancellationToken {
    match scenario.fault {
        Fault::OldBacklog => {
            // The events occurred 40 s ago (consumer lag, read from the
            // envelope, passes ConsumerLagHigh's 30 s) and were committed 20 s
            // ago (commit → publish passes its 5 s). The commit age stays
            // well under RoomOutboxOldestPendingTooOld's 60 s, which must stay
            // quiet here: a relay slowed by a loaded machine would otherwise
            // push rows committed 40 s ago past it within seconds.
            let pool = stack.db.pool.clone();
            let token = keep_doing(Duration::from_millis(300), move || {
                let pool = pool.clone();
                async move {
                    let events: Vec<pb::RoomOutboxEvent> = (0..5)
                        .map(|index| heat_event(ROOM, 5_000 + index, 40_000))
                        .collect();
                    let rows: Vec<NewOutboxRow> = events
                        .iter()
                        .map(|event| NewOutboxRow::event(event, now_ms() - 20_000))
                        .collect();
                    let mut tx = pool.begin().await.unwrap();
                    outbox_store::insert_outbox_rows(&mut tx, &rows)
                        .await
                        .unwrap();
                    tx.commit().await.unwrap();
                }
            });
            until("old events consumed by every group", || async {
                let mut all = true;
                for job in ["im-bridge", "activity-consumer", "notice-consumer"] {
                    all &= total(stack, job, "consumer_lag_seconds_sum").await > 40.0;
                }
                all
            })
            .await;
            token
        }
        other => unreachable!("{other:?} is induced elsewhere"),
    }
}

/// Commands rejected, a slow or failing wallet, clobbered projections, an idle relay instance.
async fn induce_command_faults(scenario: &Scenario, stack: &mut Stack) -> CancellationToken {
    match scenario.fault {
        Fault::RejectedCommands => {
            let grpc = stack.grpc.clone();
            let token = keep_doing(Duration::from_millis(200), move || {
                let grpc = grpc.clone();
                async move {
                    let mut client = RoomServiceClient::connect(grpc).await.unwrap();
                    let refused = client.join_room(join("no-such-room", "mallory")).await;
                    assert!(refused.is_err(), "a join of a missing room is refused");
                }
            });
            until("rejected commands counted", || async {
                values(stack, "room-service", "room_commands_total")
                    .await
                    .len()
                    >= 4
            })
            .await;
            token
        }
        Fault::SlowWallet => {
            stack.wallet.set_latency(Duration::from_millis(700));
            let grpc = stack.grpc.clone();
            keep_doing(Duration::from_millis(10), move || {
                let grpc = grpc.clone();
                async move {
                    let mut client = RoomServiceClient::connect(grpc).await.unwrap();
                    client.send_gift(gift()).await.unwrap();
                }
            })
        }
        Fault::DebitRepliesLost => {
            // The wallet applies each debit but its reply is lost.
            stack.wallet.inject(fake_wallet::FaultRule {
                method: Method::Debit,
                count: u32::MAX,
                code: FaultCode::DeadlineExceeded,
                after_apply: true,
            });
            let grpc = stack.grpc.clone();
            let token = keep_doing(Duration::from_millis(100), move || {
                let grpc = grpc.clone();
                async move {
                    let mut client = RoomServiceClient::connect(grpc).await.unwrap();
                    let lost = client.send_gift(gift()).await;
                    assert!(lost.is_err(), "a gift without a debit reply fails");
                }
            });
            until("a compensated saga", || async {
                total(stack, "room-service", "room_gift_sagas_compensated_total").await >= 1.0
            })
            .await;
            token
        }
        other => unreachable!("{other:?} is induced elsewhere"),
    }
}

/// Refunds failing or spent, clobbered projections, an idle relay instance.
async fn induce_state_faults(scenario: &Scenario, stack: &mut Stack) -> CancellationToken {
    match scenario.fault {
        Fault::RefundsFailing | Fault::RefundsExhausted => {
            stack
                .wallet
                .fail_next(Method::Refund, u32::MAX, FaultCode::Unavailable);
            crashed_sagas(stack, 3).await;
            let (name, want) = if scenario.fault == Fault::RefundsFailing {
                ("room_gift_sagas_unsettled", 3.0)
            } else {
                ("room_gift_sagas_failed_open", 3.0)
            };
            until(name, || async {
                total(stack, "room-service", name).await == want
            })
            .await;
            CancellationToken::new()
        }
        Fault::ProjectionKeysClobbered => {
            clobber_projection_keys(stack).await;
            let grpc = stack.grpc.clone();
            let token = keep_doing(Duration::from_millis(100), move || {
                let grpc = grpc.clone();
                async move {
                    let mut client = RoomServiceClient::connect(grpc).await.unwrap();
                    let user = testkit::unique("guest-");
                    client.join_room(join(ROOM, &user)).await.unwrap();
                }
            });
            until("failed projections", || async {
                total(stack, "room-service", "room_projection_failures_total").await >= 1.0
            })
            .await;
            token
        }
        Fault::IdleRelayInstance => {
            // Another relay that heartbeats but never takes its shards.
            let pool = stack.db.pool.clone();
            let token = keep_doing(Duration::from_millis(500), move || {
                let pool = pool.clone();
                async move {
                    sqlx::query(
                        "INSERT INTO relay_instances (instance_id, heartbeat_at_ms, started_at_ms) \
                         VALUES ('idle-relay', ?, ?) \
                         ON DUPLICATE KEY UPDATE heartbeat_at_ms = VALUES(heartbeat_at_ms)",
                    )
                    .bind(now_ms())
                    .bind(now_ms())
                    .execute(&pool)
                    .await
                    .unwrap();
                }
            });
            until("the relay to give up half its shards", || async {
                total(stack, "outbox-relay", "room_outbox_owned_shards").await < 64.0
            })
            .await;
            token
        }
        other => unreachable!("{other:?} is induced elsewhere"),
    }
}

/// Waits for the second scrape: one gauge refresh after the first; for a
/// growing backlog, until the backlog gauge moved; for old events, until the
/// oldest-pending gauge is no higher than at the first scrape. Old events
/// keep being inserted 20 s "after" their commit, so any gauge reading can
/// catch one in the milliseconds before the relay delivers it and read ~20 s;
/// the rule test extends the move between the two scrapes over its whole
/// window, so such a reading would look like a backlog ageing without end,
/// which it is not (the relay keeps up: its backlog gauge stays at 0 between
/// such readings).
pub async fn await_second_scrape(scenario: &Scenario, stack: &Stack, first: &Backlog) {
    let started = Instant::now();
    until("the second scrape's moment", || async {
        started.elapsed() >= GAUGE_REFRESH
            && match scenario.fault {
                Fault::RelayCutOff => backlog(stack).await.pending > first.pending,
                Fault::OldBacklog => backlog(stack).await.oldest_age <= first.oldest_age,
                _ => true,
            }
    })
    .await;
}

/// The relay's backlog gauges (for [`await_second_scrape`]).
pub struct Backlog {
    /// `room_outbox_pending`.
    pub pending: f64,
    /// `room_outbox_oldest_pending_age_seconds`.
    pub oldest_age: f64,
}

/// The relay's backlog gauges now.
pub async fn backlog(stack: &Stack) -> Backlog {
    Backlog {
        pending: total(stack, "outbox-relay", "room_outbox_pending").await,
        oldest_age: total(
            stack,
            "outbox-relay",
            "room_outbox_oldest_pending_age_seconds",
        )
        .await,
    }
}
