//! The scenarios: what each breaks (`super::faults` does it) and which
//! alerts it must fire; every other alert must stay quiet in it.

use super::stack::Setup;

/// What a scenario breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    None,
    StopRelay,
    UndiscoverRelay,
    StopNoticeConsumer,
    StopRoomService,
    FailOutboxRow,
    RefuseNotice,
    BridgeImDown,
    ImGroupLimitRefusals,
    MalformedMessages,
    RelayCutOff,
    OldBacklog,
    RejectedCommands,
    SlowWallet,
    IdleRelayInstance,
    DebitRepliesLost,
    RefundsFailing,
    RefundsExhausted,
    ProjectionKeysClobbered,
    ClaimsTakenOver,
}

/// One scenario and the alerts it must fire.
pub struct Scenario {
    pub name: &'static str,
    pub fault: Fault,
    pub fires: &'static [&'static str],
}

impl Scenario {
    /// Whether the relay runs without a reachable broker (its publishes
    /// fail, so the session never reaches the consumers).
    pub fn relay_cut_off(&self) -> bool {
        matches!(self.fault, Fault::RelayCutOff | Fault::ClaimsTakenOver)
    }

    pub fn setup(&self) -> Setup {
        Setup {
            relay_bootstrap: self.relay_cut_off().then(closed_port),
            bridge_retries_forever: self.fault == Fault::BridgeImDown,
            refund_attempts: match self.fault {
                Fault::RefundsFailing => Some(1_000),
                Fault::RefundsExhausted => Some(1),
                _ => None,
            },
        }
    }
}

pub const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "healthy",
        fault: Fault::None,
        fires: &[],
    },
    Scenario {
        name: "relay stopped",
        fault: Fault::StopRelay,
        fires: &["RoomOutboxRelayDown", "RoomOutboxShardOwnershipAbsent"],
    },
    Scenario {
        name: "relay gone from discovery",
        fault: Fault::UndiscoverRelay,
        fires: &["RoomOutboxRelayDown", "RoomOutboxShardOwnershipAbsent"],
    },
    Scenario {
        name: "notice-consumer stopped",
        fault: Fault::StopNoticeConsumer,
        fires: &["ConsumerGroupDown"],
    },
    Scenario {
        name: "room-service stopped",
        fault: Fault::StopRoomService,
        fires: &["RoomServiceDown"],
    },
    Scenario {
        name: "outbox dead letter",
        fault: Fault::FailOutboxRow,
        fires: &["RoomOutboxFailedRows"],
    },
    Scenario {
        name: "notice refused by IM",
        fault: Fault::RefuseNotice,
        fires: &["ConsumerDeliveryFailedRows"],
    },
    Scenario {
        name: "IM down under a backlog (stuck partition)",
        fault: Fault::BridgeImDown,
        fires: &[
            "ConsumerGroupLagHigh",
            "ConsumerPartitionStuck",
            "ConsumerRetryStorm",
            "ConsumerStalled",
        ],
    },
    Scenario {
        name: "IM drops group messages for the per-group limit",
        fault: Fault::ImGroupLimitRefusals,
        fires: &["ImGroupMessagesRefused"],
    },
    Scenario {
        name: "malformed messages",
        fault: Fault::MalformedMessages,
        fires: &["ConsumerDeadLetters"],
    },
    Scenario {
        name: "relay cut off from the broker",
        fault: Fault::RelayCutOff,
        fires: &[
            "RoomOutboxBacklogGrowing",
            "RoomOutboxOldestPendingTooOld",
            "RoomOutboxPublishFailureRate",
        ],
    },
    Scenario {
        name: "old events (occurred 40s, committed 20s ago)",
        fault: Fault::OldBacklog,
        fires: &["ConsumerLagHigh", "RoomOutboxCommitToPublishLagHigh"],
    },
    Scenario {
        name: "commands rejected",
        fault: Fault::RejectedCommands,
        fires: &["RoomCommandErrorRate"],
    },
    Scenario {
        name: "slow wallet",
        fault: Fault::SlowWallet,
        fires: &["RoomCommandLatencyHigh"],
    },
    Scenario {
        name: "relay instance holding no shards",
        fault: Fault::IdleRelayInstance,
        fires: &["RoomOutboxNoShardOwner"],
    },
    Scenario {
        name: "wallet debit replies lost",
        fault: Fault::DebitRepliesLost,
        fires: &["RoomCommandErrorRate", "RoomGiftSagasCompensated"],
    },
    Scenario {
        name: "refunds of crashed sagas failing",
        fault: Fault::RefundsFailing,
        fires: &["RoomGiftSagasUnsettled"],
    },
    Scenario {
        name: "refund budget spent",
        fault: Fault::RefundsExhausted,
        fires: &["RoomGiftSagaFailed"],
    },
    Scenario {
        name: "room list keys clobbered in Redis",
        fault: Fault::ProjectionKeysClobbered,
        fires: &["RoomProjectionFailures"],
    },
    Scenario {
        name: "claims taken over while publishing",
        fault: Fault::ClaimsTakenOver,
        // Nothing is published and rows keep coming: the backlog grows too.
        fires: &[
            "RoomOutboxBacklogGrowing",
            "RoomOutboxFencedMarks",
            "RoomOutboxOldestPendingTooOld",
            "RoomOutboxPublishFailureRate",
        ],
    },
];

fn closed_port() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    addr.to_string()
}
