//! The workload: many rooms, a seeded random mix of join / leave / mic /
//! gift / kick commands from several concurrent clients, each command sent
//! with a recorded `command_id` and retried with the SAME id while the answer
//! is not definite (the service crashed, MySQL is down, a deadline passed)
//! or the refusal says a retry can succeed, after the refusal's RetryInfo
//! delay when it has one ([`crate::refusal`], the gateway contract).
//! Every call goes to a random room-service instance ([`crate::routing`]),
//! as behind a load balancer, so retries of one command land on different
//! instances.
//! Every command's final outcome, the instances it was sent to, the one
//! that executed it (`x-room-served-by`) and when it was sent and answered
//! go into the ledger the checker reads.

use crate::ledger::{CommandRecord, Outcome};
use crate::refusal::{FIRST_BACKOFF, Refusal, next_backoff};
use crate::routing::{Instance, Router, served_by};
use hyapp_api::room::room_service_client::RoomServiceClient;
use hyapp_api::room::{
    CommandMeta, CommandReply, CreateRoomRequest, JoinRoomRequest, KickUserRequest,
    LeaveMicRequest, LeaveRoomRequest, SendGiftRequest, TakeMicRequest,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// Shape of the workload.
#[derive(Debug, Clone)]
pub struct Shape {
    /// Seed of every random choice.
    pub seed: u64,
    /// How long commands are issued.
    pub duration: Duration,
    /// Rooms created up front.
    pub rooms: u32,
    /// Users per room (user 0 owns it).
    pub users_per_room: u32,
    /// Concurrent clients.
    pub concurrency: u32,
    /// How long one command is retried before its outcome is recorded as unknown.
    pub retry_budget: Duration,
}

/// Mic seats of every room.
const SEATS: u32 = 8;
/// Gift unit values: small ones, and large ones that cross the big-gift and
/// treasure thresholds the stack is configured with.
const UNIT_VALUES: [i64; 5] = [10, 50, 100, 1_000, 3_000];
/// One command to send.
#[derive(Debug, Clone)]
enum Command {
    Create {
        owner: String,
    },
    Join {
        user: String,
    },
    Leave {
        user: String,
    },
    TakeMic {
        user: String,
        seat: u32,
    },
    LeaveMic {
        user: String,
    },
    Gift {
        sender: String,
        receiver: String,
        count: i64,
        unit: i64,
    },
    Kick {
        actor: String,
        target: String,
    },
}

impl Command {
    fn kind(&self) -> &'static str {
        match self {
            Command::Create { .. } => "create",
            Command::Join { .. } => "join",
            Command::Leave { .. } => "leave",
            Command::TakeMic { .. } => "take_mic",
            Command::LeaveMic { .. } => "leave_mic",
            Command::Gift { .. } => "gift",
            Command::Kick { .. } => "kick",
        }
    }

    fn gift_value(&self) -> u64 {
        match self {
            Command::Gift { count, unit, .. } => (count * unit).unsigned_abs(),
            _ => 0,
        }
    }
}

/// Room id `n` of a run.
pub fn room_id(seed: u64, n: u32) -> String {
    format!("chaos-{seed}-r{n:03}")
}

/// User `i` of room `n`.
pub fn user_id(n: u32, i: u32) -> String {
    format!("r{n:03}u{i}")
}

/// Runs the workload against `instances` and returns every command's record.
pub async fn run(
    instances: &[Instance],
    wallet_admin: &str,
    shape: &Shape,
) -> anyhow::Result<Vec<CommandRecord>> {
    anyhow::ensure!(!instances.is_empty(), "no room-service instance to send to");
    fund_users(wallet_admin, shape).await?;

    let mut records = Vec::new();
    let mut router = Router::new(instances, shape.seed, u64::from(u32::MAX));
    for n in 0..shape.rooms {
        let room = room_id(shape.seed, n);
        let command = Command::Create {
            owner: user_id(n, 0),
        };
        records.push(
            execute(
                &mut router,
                &room,
                format!("{room}-create"),
                &command,
                shape,
            )
            .await,
        );
    }
    let deadline = Instant::now() + shape.duration;
    let mut workers = Vec::new();
    for worker in 0..shape.concurrency {
        let mut router = Router::new(instances, shape.seed, u64::from(worker));
        let shape = shape.clone();
        workers.push(tokio::spawn(async move {
            let mut rng =
                StdRng::seed_from_u64(shape.seed.wrapping_mul(31).wrapping_add(u64::from(worker)));
            let mut records = Vec::new();
            let mut sequence = 0u32;
            while Instant::now() < deadline {
                let n = rng.random_range(0..shape.rooms);
                let room = room_id(shape.seed, n);
                let command = pick(&mut rng, n, shape.users_per_room);
                sequence += 1;
                let command_id = format!("{room}-w{worker}-{sequence}");
                records.push(execute(&mut router, &room, command_id, &command, &shape).await);
            }
            records
        }));
    }
    for worker in workers {
        records.extend(worker.await?);
    }
    Ok(records)
}

/// Gives every user a balance no workload can spend.
async fn fund_users(wallet_admin: &str, shape: &Shape) -> anyhow::Result<()> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()?;
    for n in 0..shape.rooms {
        for i in 0..shape.users_per_room {
            let body =
                serde_json::json!({"user_id": user_id(n, i), "balance": 1_000_000_000_000i64});
            let response = http
                .post(format!("{wallet_admin}/admin/balance"))
                .json(&body)
                .send()
                .await?;
            anyhow::ensure!(
                response.status().is_success(),
                "fake wallet /admin/balance: {}",
                response.status()
            );
        }
    }
    Ok(())
}

/// A random command in room `n`: joins and gifts dominate, as in a live room.
fn pick(rng: &mut StdRng, n: u32, users: u32) -> Command {
    let user = |rng: &mut StdRng| user_id(n, rng.random_range(0..users));
    match rng.random_range(0..100) {
        0..30 => Command::Join { user: user(rng) },
        30..40 => Command::Leave { user: user(rng) },
        40..55 => Command::TakeMic {
            user: user(rng),
            seat: rng.random_range(0..SEATS),
        },
        55..63 => Command::LeaveMic { user: user(rng) },
        63..95 => {
            // Never to oneself: room-core refuses self-gifts, so they would
            // only be refusals taking a gift's place in the mix.
            let sender = rng.random_range(0..users);
            let receiver = (sender + rng.random_range(1..users.max(2))) % users;
            Command::Gift {
                sender: user_id(n, sender),
                receiver: user_id(n, receiver),
                count: rng.random_range(1..=3),
                unit: UNIT_VALUES[rng.random_range(0..UNIT_VALUES.len())],
            }
        }
        _ => Command::Kick {
            actor: user_id(n, 0),
            target: user_id(n, rng.random_range(1..users.max(2))),
        },
    }
}

/// A definite answer, or the last refusal once the retry budget ran out.
struct Answer {
    outcome: Outcome,
    detail: String,
    event_ids: Vec<String>,
    reply_version: u64,
    served_by: String,
}

impl Answer {
    fn acked(response: tonic::Response<CommandReply>) -> Self {
        let served_by = served_by(response.metadata());
        let reply = response.into_inner();
        Self {
            outcome: Outcome::Acked,
            detail: String::new(),
            event_ids: reply.events.into_iter().map(|e| e.event_id).collect(),
            reply_version: reply.room_version,
            served_by,
        }
    }

    fn refused(status: &tonic::Status, refusal: &Refusal) -> Self {
        Self {
            outcome: if refusal.retryable {
                Outcome::Unknown
            } else {
                Outcome::Rejected
            },
            detail: refusal.describe(status),
            event_ids: Vec::new(),
            reply_version: 0,
            served_by: served_by(status.metadata()),
        }
    }
}

/// Unix-epoch milliseconds, the ledger's clock.
fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| {
            u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
        })
}

/// Sends `command` (each call to an instance `router` picks) until a
/// definite answer or the retry budget runs out. Refusals are retried as
/// [`crate::refusal`] says, always with the same `command_id`.
async fn execute(
    router: &mut Router,
    room: &str,
    command_id: String,
    command: &Command,
    shape: &Shape,
) -> CommandRecord {
    let started = Instant::now();
    let started_ms = unix_ms();
    let mut backoff = FIRST_BACKOFF;
    let mut sent_to = Vec::new();
    let mut retry_info_waits = 0;
    let answer = loop {
        let instance = router.pick();
        sent_to.push(instance.name.clone());
        let status = match send(instance.client(), room, &command_id, command).await {
            Ok(response) => break Answer::acked(response),
            Err(status) => status,
        };
        let refusal = Refusal::of(&status);
        let (wait, hinted) = refusal.wait(backoff);
        if !refusal.retryable || started.elapsed() + wait >= shape.retry_budget {
            break Answer::refused(&status, &refusal);
        }
        tokio::time::sleep(wait).await;
        if hinted {
            retry_info_waits += 1;
        } else {
            backoff = next_backoff(backoff);
        }
    };
    CommandRecord {
        command_id,
        room_id: room.to_string(),
        kind: command.kind().to_string(),
        outcome: answer.outcome,
        detail: answer.detail,
        attempts: u32::try_from(sent_to.len()).unwrap_or(u32::MAX),
        gift_value: command.gift_value(),
        event_ids: answer.event_ids,
        sent_to,
        served_by: answer.served_by,
        reply_version: answer.reply_version,
        started_ms,
        answered_ms: unix_ms(),
        retry_info_waits,
    }
}

/// One call of `command` (the same request on every retry, so the fingerprint
/// matches); the response keeps its metadata.
async fn send(
    mut client: RoomServiceClient<Channel>,
    room: &str,
    command_id: &str,
    command: &Command,
) -> Result<tonic::Response<CommandReply>, tonic::Status> {
    let meta = Some(CommandMeta {
        command_id: command_id.to_string(),
        request_id: command_id.to_string(),
        app_code: String::new(),
    });
    let room_id = room.to_string();
    match command.clone() {
        Command::Create { owner } => {
            client
                .create_room(CreateRoomRequest {
                    meta,
                    room_id,
                    owner_id: owner,
                    title: "chaos".into(),
                    mic_seat_count: SEATS,
                })
                .await
        }
        Command::Join { user } => {
            client
                .join_room(JoinRoomRequest {
                    meta,
                    room_id,
                    user_id: user,
                })
                .await
        }
        Command::Leave { user } => {
            client
                .leave_room(LeaveRoomRequest {
                    meta,
                    room_id,
                    user_id: user,
                })
                .await
        }
        Command::TakeMic { user, seat } => {
            client
                .take_mic(TakeMicRequest {
                    meta,
                    room_id,
                    user_id: user,
                    seat_index: seat,
                })
                .await
        }
        Command::LeaveMic { user } => {
            client
                .leave_mic(LeaveMicRequest {
                    meta,
                    room_id,
                    user_id: user,
                })
                .await
        }
        Command::Gift {
            sender,
            receiver,
            count,
            unit,
        } => {
            client
                .send_gift(SendGiftRequest {
                    meta,
                    room_id,
                    sender_id: sender,
                    receiver_id: receiver,
                    gift_id: "rose".into(),
                    count,
                    unit_value: unit,
                })
                .await
        }
        Command::Kick { actor, target } => {
            client
                .kick_user(KickUserRequest {
                    meta,
                    room_id,
                    actor_id: actor,
                    target_id: target,
                    ban_seconds: 1,
                })
                .await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_picks_the_same_commands() {
        let sequence = |seed| {
            let mut rng = StdRng::seed_from_u64(seed);
            (0..50)
                .map(|_| format!("{:?}", pick(&mut rng, 3, 6)))
                .collect::<Vec<_>>()
        };
        assert_eq!(sequence(7), sequence(7));
        assert_ne!(sequence(7), sequence(8));
        let kinds: std::collections::BTreeSet<_> = {
            let mut rng = StdRng::seed_from_u64(1);
            (0..500).map(|_| pick(&mut rng, 0, 6).kind()).collect()
        };
        assert_eq!(kinds.len(), 6, "every command kind is drawn: {kinds:?}");
    }
}
