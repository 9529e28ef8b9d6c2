//! [`Rejection`]: why a command was refused. A rejected command changes
//! nothing; the service maps [`Rejection::kind`] to a gRPC/HTTP status and
//! returns [`Rejection::code`] to the caller as a stable machine-readable code.

use serde::{Deserialize, Serialize};

/// Coarse class of a rejection, one per gRPC status the service uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RejectionKind {
    /// The command itself is malformed, whatever the room state.
    InvalidArgument,
    /// The room or the addressed object does not exist.
    NotFound,
    /// The command is well-formed but the room is not in a state that allows it.
    FailedPrecondition,
    /// The actor is not allowed to do this.
    PermissionDenied,
}

/// Why a command was refused.
///
/// Serialized with the stable code as tag, so the service can store a
/// rejection as the idempotent result of a `command_id`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[serde(tag = "code", rename_all = "snake_case")]
pub enum Rejection {
    #[error("room does not exist")]
    RoomNotFound,
    #[error("room already exists")]
    RoomAlreadyExists,
    #[error("room is closed")]
    RoomClosed,
    #[error("user {user_id} is not a member of the room")]
    NotAMember { user_id: String },
    #[error("user is already a member of the room")]
    AlreadyMember,
    #[error("user is banned from the room until {until_ms}")]
    Banned { until_ms: i64 },
    #[error("user {actor_id} is not allowed to do this")]
    PermissionDenied { actor_id: String },
    #[error("the room owner cannot be kicked")]
    CannotKickOwner,
    #[error("seat_index {seat_index} does not exist (the room has {seats} seats)")]
    SeatOutOfRange { seat_index: u32, seats: u32 },
    #[error("seat is taken")]
    SeatTaken,
    #[error("seat is locked")]
    SeatLocked,
    #[error("seat is not locked")]
    SeatNotLocked,
    #[error("seat is already locked")]
    SeatAlreadyLocked,
    #[error("user already holds seat {seat_index}")]
    AlreadySeated { seat_index: u32 },
    #[error("user does not hold a seat")]
    NotSeated,
    #[error("invalid gift amount: {reason}")]
    InvalidAmount { reason: String },
    #[error("gift amount overflows")]
    AmountOverflow,
    #[error("user {user_id} cannot send a gift to themselves")]
    SelfGift { user_id: String },
    #[error("the room is full: it holds at most {max_members} members")]
    RoomFull { max_members: usize },
    #[error("the room already has its maximum of {max_admins} admins")]
    TooManyAdmins { max_admins: usize },
    #[error("the room already holds its maximum of {max_bans} active bans")]
    TooManyBans { max_bans: usize },
    #[error("the room already has its maximum of {max_contributors} contributors today")]
    TooManyContributors { max_contributors: usize },
    #[error("invalid argument: {reason}")]
    InvalidArgument { reason: String },
    #[error("user {target_id} already has admin={admin}")]
    AdminUnchanged { target_id: String, admin: bool },
    #[error("no treasure box is counting down")]
    NoTreasureBox,
    #[error("treasure box id or level does not match the current box")]
    TreasureMismatch,
    #[error("treasure box cannot be opened before {open_at_ms}")]
    TreasureNotDue { open_at_ms: i64 },
    #[error("treasure box expired with the daily reset")]
    TreasureExpired,
    #[error("room version or event sequence is exhausted")]
    SequenceExhausted,
}

impl Rejection {
    /// Every [`Rejection::code`], in declaration order: the list a caller's
    /// documentation of refusals is checked against. A test proves it is the
    /// variant list serde derives, so a new variant cannot be left out.
    pub const ALL_CODES: [&'static str; 29] = [
        "room_not_found",
        "room_already_exists",
        "room_closed",
        "not_a_member",
        "already_member",
        "banned",
        "permission_denied",
        "cannot_kick_owner",
        "seat_out_of_range",
        "seat_taken",
        "seat_locked",
        "seat_not_locked",
        "seat_already_locked",
        "already_seated",
        "not_seated",
        "invalid_amount",
        "amount_overflow",
        "self_gift",
        "room_full",
        "too_many_admins",
        "too_many_bans",
        "too_many_contributors",
        "invalid_argument",
        "admin_unchanged",
        "no_treasure_box",
        "treasure_mismatch",
        "treasure_not_due",
        "treasure_expired",
        "sequence_exhausted",
    ];

    /// Stable snake_case code (also the serde tag).
    #[must_use]
    pub fn code(&self) -> &'static str {
        match self {
            Rejection::RoomNotFound => "room_not_found",
            Rejection::RoomAlreadyExists => "room_already_exists",
            Rejection::RoomClosed => "room_closed",
            Rejection::NotAMember { .. } => "not_a_member",
            Rejection::AlreadyMember => "already_member",
            Rejection::Banned { .. } => "banned",
            Rejection::PermissionDenied { .. } => "permission_denied",
            Rejection::CannotKickOwner => "cannot_kick_owner",
            Rejection::SeatOutOfRange { .. } => "seat_out_of_range",
            Rejection::SeatTaken => "seat_taken",
            Rejection::SeatLocked => "seat_locked",
            Rejection::SeatNotLocked => "seat_not_locked",
            Rejection::SeatAlreadyLocked => "seat_already_locked",
            Rejection::AlreadySeated { .. } => "already_seated",
            Rejection::NotSeated => "not_seated",
            Rejection::InvalidAmount { .. } => "invalid_amount",
            Rejection::AmountOverflow => "amount_overflow",
            Rejection::SelfGift { .. } => "self_gift",
            Rejection::RoomFull { .. } => "room_full",
            Rejection::TooManyAdmins { .. } => "too_many_admins",
            Rejection::TooManyBans { .. } => "too_many_bans",
            Rejection::TooManyContributors { .. } => "too_many_contributors",
            Rejection::InvalidArgument { .. } => "invalid_argument",
            Rejection::AdminUnchanged { .. } => "admin_unchanged",
            Rejection::NoTreasureBox => "no_treasure_box",
            Rejection::TreasureMismatch => "treasure_mismatch",
            Rejection::TreasureNotDue { .. } => "treasure_not_due",
            Rejection::TreasureExpired => "treasure_expired",
            Rejection::SequenceExhausted => "sequence_exhausted",
        }
    }

    /// Status class for the transport layer.
    #[must_use]
    pub fn kind(&self) -> RejectionKind {
        match self {
            // A self-gift is refused whatever the room holds: the request
            // itself is wrong, like an amount out of range.
            Rejection::InvalidAmount { .. }
            | Rejection::AmountOverflow
            | Rejection::InvalidArgument { .. }
            | Rejection::SeatOutOfRange { .. }
            | Rejection::SelfGift { .. } => RejectionKind::InvalidArgument,
            // The wake-up addressed a box that is not (or no longer) there.
            Rejection::RoomNotFound | Rejection::NoTreasureBox | Rejection::TreasureMismatch => {
                RejectionKind::NotFound
            }
            Rejection::PermissionDenied { .. }
            | Rejection::CannotKickOwner
            | Rejection::Banned { .. } => RejectionKind::PermissionDenied,
            Rejection::RoomAlreadyExists
            | Rejection::RoomClosed
            | Rejection::NotAMember { .. }
            | Rejection::AlreadyMember
            | Rejection::SeatTaken
            | Rejection::SeatLocked
            | Rejection::SeatNotLocked
            | Rejection::SeatAlreadyLocked
            | Rejection::AlreadySeated { .. }
            | Rejection::NotSeated
            | Rejection::AdminUnchanged { .. }
            | Rejection::TreasureNotDue { .. }
            | Rejection::TreasureExpired
            | Rejection::SequenceExhausted => RejectionKind::FailedPrecondition,
            // A cap is room state, like a taken seat: the command may succeed
            // once someone leaves, a ban expires or the day rolls over, so a
            // client must not retry it blindly. (RESOURCE_EXHAUSTED is this
            // service's "overloaded, retry shortly": the wrong advice here.)
            Rejection::RoomFull { .. }
            | Rejection::TooManyAdmins { .. }
            | Rejection::TooManyBans { .. }
            | Rejection::TooManyContributors { .. } => RejectionKind::FailedPrecondition,
        }
    }

    pub(crate) fn invalid_argument(reason: impl Into<String>) -> Rejection {
        Rejection::InvalidArgument {
            reason: reason.into(),
        }
    }

    pub(crate) fn invalid_amount(reason: impl Into<String>) -> Rejection {
        Rejection::InvalidAmount {
            reason: reason.into(),
        }
    }

    pub(crate) fn not_a_member(user_id: &str) -> Rejection {
        Rejection::NotAMember {
            user_id: user_id.to_owned(),
        }
    }

    pub(crate) fn permission_denied(actor_id: &str) -> Rejection {
        Rejection::PermissionDenied {
            actor_id: actor_id.to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all() -> Vec<Rejection> {
        vec![
            Rejection::RoomNotFound,
            Rejection::RoomAlreadyExists,
            Rejection::RoomClosed,
            Rejection::not_a_member("u"),
            Rejection::AlreadyMember,
            Rejection::Banned { until_ms: 5 },
            Rejection::permission_denied("u"),
            Rejection::CannotKickOwner,
            Rejection::SeatOutOfRange {
                seat_index: 9,
                seats: 8,
            },
            Rejection::SeatTaken,
            Rejection::SeatLocked,
            Rejection::SeatNotLocked,
            Rejection::SeatAlreadyLocked,
            Rejection::AlreadySeated { seat_index: 1 },
            Rejection::NotSeated,
            Rejection::invalid_amount("count is 0"),
            Rejection::AmountOverflow,
            Rejection::SelfGift {
                user_id: "u".into(),
            },
            Rejection::RoomFull { max_members: 2 },
            Rejection::TooManyAdmins { max_admins: 2 },
            Rejection::TooManyBans { max_bans: 2 },
            Rejection::TooManyContributors {
                max_contributors: 2,
            },
            Rejection::invalid_argument("title is empty"),
            Rejection::AdminUnchanged {
                target_id: "u".into(),
                admin: true,
            },
            Rejection::NoTreasureBox,
            Rejection::TreasureMismatch,
            Rejection::TreasureNotDue { open_at_ms: 3 },
            Rejection::TreasureExpired,
            Rejection::SequenceExhausted,
        ]
    }

    #[test]
    fn code_is_the_serde_tag_and_unique() {
        let mut seen = std::collections::BTreeSet::new();
        for rejection in all() {
            let json = serde_json::to_value(&rejection).expect("serialize");
            assert_eq!(json["code"], rejection.code());
            assert!(
                seen.insert(rejection.code()),
                "duplicate {}",
                rejection.code()
            );
            let back: Rejection = serde_json::from_value(json).expect("deserialize");
            assert_eq!(back, rejection);
        }
    }

    /// The variant names serde derived (its "unknown variant" error lists
    /// them all), so the list cannot miss a variant added later.
    fn serde_variant_names() -> Vec<String> {
        let error = serde_json::from_value::<Rejection>(serde_json::json!({"code": "__none__"}))
            .expect_err("no such variant");
        let message = error.to_string();
        let listed = message
            .split_once("expected one of ")
            .unwrap_or_else(|| panic!("serde lists the variants: {message}"))
            .1;
        listed
            .split(", ")
            .map(|name| name.trim_matches('`').to_owned())
            .collect()
    }

    #[test]
    fn all_codes_lists_every_variant_once_in_order() {
        assert_eq!(serde_variant_names(), Rejection::ALL_CODES);
        // One sample per variant, in the same order, each answering its own
        // code (and `code_is_the_serde_tag_and_unique` ties code to tag).
        let codes: Vec<&str> = all().iter().map(Rejection::code).collect();
        assert_eq!(codes, Rejection::ALL_CODES);
    }

    #[test]
    fn messages_are_informative() {
        for rejection in all() {
            assert!(!rejection.to_string().is_empty());
        }
        assert_eq!(
            Rejection::SeatOutOfRange {
                seat_index: 9,
                seats: 8
            }
            .to_string(),
            "seat_index 9 does not exist (the room has 8 seats)"
        );
    }

    #[test]
    fn kinds_map_to_transport_classes() {
        assert_eq!(Rejection::RoomNotFound.kind(), RejectionKind::NotFound);
        assert_eq!(
            Rejection::invalid_amount("x").kind(),
            RejectionKind::InvalidArgument
        );
        assert_eq!(
            Rejection::permission_denied("u").kind(),
            RejectionKind::PermissionDenied
        );
        assert_eq!(
            Rejection::RoomClosed.kind(),
            RejectionKind::FailedPrecondition
        );
        assert_eq!(
            Rejection::SelfGift {
                user_id: "u".into()
            }
            .kind(),
            RejectionKind::InvalidArgument
        );
        for cap in [
            Rejection::RoomFull { max_members: 1 },
            Rejection::TooManyAdmins { max_admins: 1 },
            Rejection::TooManyBans { max_bans: 1 },
            Rejection::TooManyContributors {
                max_contributors: 1,
            },
        ] {
            assert_eq!(cap.kind(), RejectionKind::FailedPrecondition, "{cap}");
        }
    }
}
