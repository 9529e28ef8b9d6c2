//! The scripted room session: every command goes through room-service's
//! gateway gRPC API exactly as a gateway would send it, and each reply (or
//! rejection) is recorded for the report. A background task heartbeats the
//! users who should stay present, so only the user the script lets go
//! (carol) expires. The gift storm sends its gifts concurrently, a bounded
//! number in flight, and is recorded as one summary rather than a step per
//! gift.

use hyapp_api::room::room_service_client::RoomServiceClient;
use hyapp_api::room::{
    CommandMeta, CommandReply, CreateRoomRequest, GetRoomRequest, HeartbeatRequest,
    JoinRoomRequest, KickUserRequest, RoomSnapshot, SendGiftRequest, TakeMicRequest,
};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// What the script expects room-service to answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// A reply: the command is committed.
    Accepted,
    /// A refusal with exactly this gRPC code and `x-error-reason`: any other
    /// error (`UNAVAILABLE` from a dependency that is down, another rule's
    /// rejection) is not the refusal the script exercises.
    Refused {
        /// gRPC status code.
        code: tonic::Code,
        /// room-service's stable reason (`x-error-reason` metadata).
        reason: &'static str,
    },
}

/// A refusal as room-service sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// gRPC status code.
    pub code: tonic::Code,
    /// `x-error-reason` metadata (empty when absent).
    pub reason: String,
    /// Status message.
    pub message: String,
}

impl From<tonic::Status> for Refusal {
    fn from(status: tonic::Status) -> Self {
        Self {
            code: status.code(),
            reason: status
                .metadata()
                .get("x-error-reason")
                .and_then(|value| value.to_str().ok())
                .unwrap_or_default()
                .to_string(),
            message: status.message().to_string(),
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?} ({}): {}", self.code, self.reason, self.message)
    }
}

/// One command of the session and what came back.
#[derive(Debug)]
pub struct Step {
    /// Human description, e.g. `SendGift carol → alice rose 1×100`.
    pub label: String,
    /// What room-service should answer.
    pub expect: Expect,
    /// The reply, or the refusal.
    pub outcome: Result<CommandReply, Refusal>,
    /// Round trip of the call.
    pub latency: Duration,
}

impl Step {
    /// Accepted when expected, refused with exactly the expected code and
    /// reason when a refusal was expected.
    pub fn as_expected(&self) -> bool {
        match (&self.outcome, self.expect) {
            (Ok(_), Expect::Accepted) => true,
            (Err(refusal), Expect::Refused { code, reason }) => {
                refusal.code == code && refusal.reason == reason
            }
            _ => false,
        }
    }
}

/// A gift the script sent (for the expected leaderboard and wallet totals).
#[derive(Debug, Clone)]
pub struct GiftSent {
    /// Sender.
    pub sender: String,
    /// `count × unit_value`.
    pub total_value: u64,
    /// The `RoomGiftSent` event id from the reply.
    pub event_id: Option<String>,
}

/// The gift storm: many gifts sent at once into the room, so that its IM
/// group's budget of 40 messages a second runs short and im-bridge merges
/// gifts into batches (docs/design.md#hot-rooms).
#[derive(Debug, Clone, Default)]
pub struct Storm {
    /// Gifts sent.
    pub sent: usize,
    /// Most gifts in flight at once.
    pub concurrency: usize,
    /// Every gift's value (`count` 1 × `unit_value`).
    pub unit_value: u64,
    /// The (sender, receiver) pairs, taken in turn.
    pub pairs: Vec<(String, String)>,
    /// `RoomGiftSent` event ids of the accepted gifts.
    pub event_ids: Vec<String>,
    /// Each refused gift: its label and the refusal.
    pub refusals: Vec<String>,
    /// From the first send to the last answer.
    pub elapsed: Duration,
}

/// One storm gift to send, and its description for the report.
#[derive(Debug)]
struct StormGift {
    request: SendGiftRequest,
    label: String,
}

/// What came back for one storm gift.
#[derive(Debug)]
struct StormAnswer {
    sender: String,
    label: String,
    outcome: Result<CommandReply, Refusal>,
}

/// Drives one room.
#[derive(Debug)]
pub struct Driver {
    client: RoomServiceClient<Channel>,
    /// The room of this session.
    pub room_id: String,
    next_command: u32,
    /// Commands in order.
    pub steps: Vec<Step>,
    /// Accepted gifts.
    pub gifts: Vec<GiftSent>,
    present: Arc<Mutex<BTreeSet<String>>>,
}

impl Driver {
    /// Connects to room-service.
    pub async fn connect(grpc: &str, room_id: String) -> anyhow::Result<Self> {
        let client = RoomServiceClient::connect(grpc.to_string()).await?;
        Ok(Self {
            client,
            room_id,
            next_command: 0,
            steps: Vec::new(),
            gifts: Vec::new(),
            present: Arc::new(Mutex::new(BTreeSet::new())),
        })
    }

    fn meta(&mut self) -> Option<CommandMeta> {
        self.next_command += 1;
        Some(CommandMeta {
            command_id: format!("{}-cmd-{:02}", self.room_id, self.next_command),
            request_id: format!("demo-{:02}", self.next_command),
            app_code: String::new(),
        })
    }

    fn record(
        &mut self,
        label: String,
        expect: Expect,
        started: Instant,
        result: Result<tonic::Response<CommandReply>, tonic::Status>,
    ) -> Option<CommandReply> {
        let outcome = result
            .map(tonic::Response::into_inner)
            .map_err(Refusal::from);
        let reply = outcome.as_ref().ok().cloned();
        self.steps.push(Step {
            label,
            expect,
            outcome,
            latency: started.elapsed(),
        });
        reply
    }

    /// CreateRoom.
    pub async fn create_room(&mut self, owner: &str, title: &str, seats: u32) {
        let request = CreateRoomRequest {
            meta: self.meta(),
            room_id: self.room_id.clone(),
            owner_id: owner.into(),
            title: title.into(),
            mic_seat_count: seats,
        };
        let started = Instant::now();
        let result = self.client.create_room(request).await;
        self.record(
            format!("CreateRoom owner={owner} \"{title}\" seats={seats}"),
            Expect::Accepted,
            started,
            result,
        );
        self.stay_present(owner);
    }

    /// JoinRoom, expecting `expect` (a banned user is refused).
    pub async fn join(&mut self, user: &str, expect: Expect) {
        let request = JoinRoomRequest {
            meta: self.meta(),
            room_id: self.room_id.clone(),
            user_id: user.into(),
        };
        let started = Instant::now();
        let result = self.client.join_room(request).await;
        let label = match expect {
            Expect::Accepted => format!("JoinRoom {user}"),
            Expect::Refused { code, reason } => {
                format!("JoinRoom {user} (must be refused: {code:?} {reason})")
            }
        };
        if self.record(label, expect, started, result).is_some() {
            self.stay_present(user);
        }
    }

    /// TakeMic.
    pub async fn take_mic(&mut self, user: &str, seat: u32) {
        let request = TakeMicRequest {
            meta: self.meta(),
            room_id: self.room_id.clone(),
            user_id: user.into(),
            seat_index: seat,
        };
        let started = Instant::now();
        let result = self.client.take_mic(request).await;
        self.record(
            format!("TakeMic {user} seat {seat}"),
            Expect::Accepted,
            started,
            result,
        );
    }

    /// SendGift.
    pub async fn gift(&mut self, sender: &str, receiver: &str, gift: &str, count: i64, unit: i64) {
        let request = SendGiftRequest {
            meta: self.meta(),
            room_id: self.room_id.clone(),
            sender_id: sender.into(),
            receiver_id: receiver.into(),
            gift_id: gift.into(),
            count,
            unit_value: unit,
        };
        let started = Instant::now();
        let result = self.client.send_gift(request).await;
        let label = format!(
            "SendGift {sender} → {receiver} {gift} {count}×{unit} = {}",
            count * unit
        );
        if let Some(reply) = self.record(label, Expect::Accepted, started, result) {
            self.gifts.push(GiftSent {
                sender: sender.into(),
                total_value: u64::try_from(count * unit).unwrap_or(0),
                event_id: gift_event_id(&reply),
            });
        }
    }

    /// Sends `gifts` gifts of `unit_value` (count 1, gift `star`) at once, at
    /// most `concurrency` in flight, taking `pairs` (sender, receiver) in
    /// turn; the accepted ones join [`Driver::gifts`].
    pub async fn gift_storm(
        &mut self,
        pairs: &[(&str, &str)],
        gifts: usize,
        unit_value: u64,
        concurrency: usize,
    ) -> Storm {
        let concurrency = concurrency.clamp(1, gifts.max(1));
        let requests: Vec<StormGift> = pairs
            .iter()
            .cycle()
            .take(gifts)
            .map(|(sender, receiver)| self.storm_gift(sender, receiver, unit_value))
            .collect();
        let started = Instant::now();
        let answers = send_concurrently(&self.client, requests, concurrency).await;
        let mut storm = Storm {
            sent: gifts,
            concurrency,
            unit_value,
            pairs: pairs
                .iter()
                .map(|(sender, receiver)| (sender.to_string(), receiver.to_string()))
                .collect(),
            elapsed: started.elapsed(),
            ..Storm::default()
        };
        for answer in answers {
            match answer.outcome {
                Ok(reply) => {
                    let event_id = gift_event_id(&reply);
                    storm.event_ids.extend(event_id.clone());
                    self.gifts.push(GiftSent {
                        sender: answer.sender,
                        total_value: unit_value,
                        event_id,
                    });
                }
                Err(refusal) => storm.refusals.push(format!("{} → {refusal}", answer.label)),
            }
        }
        storm
    }

    fn storm_gift(&mut self, sender: &str, receiver: &str, unit_value: u64) -> StormGift {
        let request = SendGiftRequest {
            meta: self.meta(),
            room_id: self.room_id.clone(),
            sender_id: sender.into(),
            receiver_id: receiver.into(),
            gift_id: "star".into(),
            count: 1,
            unit_value: i64::try_from(unit_value).unwrap_or(i64::MAX),
        };
        StormGift {
            request,
            label: format!("SendGift {sender} → {receiver} star 1×{unit_value}"),
        }
    }

    /// KickUser with a ban.
    pub async fn kick(&mut self, actor: &str, target: &str, ban_seconds: u32) {
        let request = KickUserRequest {
            meta: self.meta(),
            room_id: self.room_id.clone(),
            actor_id: actor.into(),
            target_id: target.into(),
            ban_seconds,
        };
        let started = Instant::now();
        let result = self.client.kick_user(request).await;
        self.record(
            format!("KickUser {actor} kicks {target}, ban {ban_seconds}s"),
            Expect::Accepted,
            started,
            result,
        );
        self.let_go(target);
    }

    /// GetRoom.
    pub async fn get_room(&mut self) -> Result<RoomSnapshot, String> {
        self.client
            .get_room(GetRoomRequest {
                room_id: self.room_id.clone(),
            })
            .await
            .map(tonic::Response::into_inner)
            .map_err(|status| format!("{:?}: {}", status.code(), status.message()))
    }

    /// Keeps heartbeating `user`.
    pub fn stay_present(&self, user: &str) {
        self.present
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .insert(user.to_string());
    }

    /// Stops heartbeating `user`.
    pub fn let_go(&self, user: &str) {
        self.present
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .remove(user);
    }

    /// Heartbeats every present user every `every` until the returned handle is aborted.
    pub fn spawn_heartbeats(&self, every: Duration) -> tokio::task::JoinHandle<()> {
        let mut client = self.client.clone();
        let present = Arc::clone(&self.present);
        let room_id = self.room_id.clone();
        tokio::spawn(async move {
            loop {
                let users: Vec<String> = present
                    .lock()
                    .unwrap_or_else(|poison| poison.into_inner())
                    .iter()
                    .cloned()
                    .collect();
                for user_id in users {
                    let request = HeartbeatRequest {
                        room_id: room_id.clone(),
                        user_id,
                    };
                    // A refused heartbeat (user already gone) is simply not repeated by anyone.
                    let _ = client.heartbeat(request).await;
                }
                tokio::time::sleep(every).await;
            }
        })
    }
}

/// The `RoomGiftSent` event id in a SendGift reply.
fn gift_event_id(reply: &CommandReply) -> Option<String> {
    reply
        .events
        .iter()
        .find(|event| event.event_type == "RoomGiftSent")
        .map(|event| event.event_id.clone())
}

/// Sends every request, `concurrency` at a time: each of `concurrency` tasks
/// takes every `concurrency`-th request in turn on its own clone of the
/// client (one HTTP/2 connection, many streams). Answers come back in no
/// particular order.
async fn send_concurrently(
    client: &RoomServiceClient<Channel>,
    requests: Vec<StormGift>,
    concurrency: usize,
) -> Vec<StormAnswer> {
    let mut shares: Vec<Vec<StormGift>> = (0..concurrency).map(|_| Vec::new()).collect();
    for (index, request) in requests.into_iter().enumerate() {
        shares[index % concurrency].push(request);
    }
    let mut tasks = tokio::task::JoinSet::new();
    for share in shares {
        let mut client = client.clone();
        tasks.spawn(async move {
            let mut answers = Vec::with_capacity(share.len());
            for StormGift { request, label } in share {
                let sender = request.sender_id.clone();
                let outcome = client
                    .send_gift(request)
                    .await
                    .map(tonic::Response::into_inner)
                    .map_err(Refusal::from);
                answers.push(StormAnswer {
                    sender,
                    label,
                    outcome,
                });
            }
            answers
        });
    }
    let mut answers = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok(share) => answers.extend(share),
            // A task that panicked lost its share's answers: say so rather than drop them.
            Err(error) => answers.push(StormAnswer {
                sender: String::new(),
                label: "a storm sender task".to_string(),
                outcome: Err(Refusal {
                    code: tonic::Code::Internal,
                    reason: String::new(),
                    message: error.to_string(),
                }),
            }),
        }
    }
    answers
}
