//! Request validation: turns each gateway request into a [`CommandRequest`]
//! (the room_core [`Command`] plus its idempotency metadata and request
//! fingerprint), or an `INVALID_ARGUMENT` naming the field. Everything that
//! does not depend on room state is checked here, before any I/O.

use hyapp_api::room as api;
use prost::Message;
use room_core::Command;
use sha2::{Digest, Sha256};

use crate::Error;

mod internal;
mod requests;

pub use internal::{MAX_BOX_ID_BYTES, open_treasure};

// One validator per gateway write RPC; `grpc`'s table of commands names them.
pub use requests::*;

pub use outbox_schema::ids::{
    MAX_APP_CODE_LEN, MAX_COMMAND_ID_LEN, MAX_ID_LEN, MAX_REQUEST_ID_LEN, MAX_ROOM_ID_LEN,
    MAX_USER_ID_LEN, is_id_charset,
};
/// Longest room title in characters (the `rooms.title` column).
pub const MAX_TITLE_CHARS: usize = 128;

/// SHA-256 of the canonical request: what "the same request" means for a reused command_id.
pub type Fingerprint = [u8; 32];

/// A validated write command, ready for the room's pipeline.
#[derive(Debug, Clone)]
pub struct CommandRequest {
    /// Room addressed.
    pub room_id: String,
    /// Idempotency key.
    pub command_id: String,
    /// Resolved app code.
    pub app_code: String,
    /// Gateway request id (tracing only).
    pub request_id: String,
    /// W3C trace context of the request ("" when untraced).
    pub traceparent: String,
    /// The room_core command.
    pub command: Command,
    /// Canonical request digest.
    pub fingerprint: Fingerprint,
    /// What the room's holder is sent when the command is forwarded: the
    /// request itself, which the holder validates and fingerprints again
    /// (`grpc::peer`); `None` for commands that are never forwarded (an
    /// expired presence is swept on the holder).
    pub forward: Option<api::peer_command::Request>,
}

/// Checks an id field against `outbox_schema::ids`: non-empty, at most `max`
/// characters, charset `[A-Za-z0-9_.:-]`.
pub fn check_id(field: &str, value: &str, max: usize) -> Result<(), Error> {
    use outbox_schema::ids::{IdProblem, check_id};
    check_id(value, max).map_err(|problem| {
        Error::InvalidArgument(match problem {
            IdProblem::Empty => format!("{field} must not be empty"),
            IdProblem::TooLong { length, max } => {
                format!("{field} must be at most {max} characters, got {length}")
            }
            IdProblem::Forbidden {
                position,
                character,
            } => format!(
                "{field} contains {character:?} at position {position}; allowed are [A-Za-z0-9_.:-]"
            ),
        })
    })
}

/// Per-request context that does not come from the message body.
#[derive(Debug, Clone, Copy)]
pub struct RequestContext<'a> {
    /// `app_code` for requests that leave it empty.
    pub default_app_code: &'a str,
    /// `traceparent` metadata of the call ("" if absent).
    pub traceparent: &'a str,
    /// Arrival time, for relative fields (a kick's ban duration).
    pub now_ms: i64,
}

fn fingerprint(rpc: &str, app_code: &str, body: &[u8]) -> Fingerprint {
    let mut hasher = Sha256::new();
    for part in [rpc.as_bytes(), app_code.as_bytes(), body] {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part);
    }
    hasher.finalize().into()
}

/// Fingerprint of a command issued by room-service itself (presence expiry, treasure wake-up).
pub fn internal_fingerprint(kind: &str, room_id: &str, command: &Command) -> Fingerprint {
    let body = serde_json::to_vec(command).unwrap_or_default();
    let mut hasher = Sha256::new();
    for part in [kind.as_bytes(), room_id.as_bytes(), &body] {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part);
    }
    hasher.finalize().into()
}

/// A gateway write request, as it travels to the room's holder (implemented
/// for each by `grpc`'s table of gateway commands).
pub trait Forwardable: Message + Clone {
    /// The `PeerCommand` variant carrying it.
    fn into_peer(self) -> api::peer_command::Request;
}

/// Validates meta and room id and assembles the request. `message` is the whole
/// request; its encoding (minus `request_id`, which is tracing only) is fingerprinted.
pub(crate) fn build<M: Forwardable>(
    rpc: &'static str,
    meta: Option<&api::CommandMeta>,
    room_id: &str,
    message: &M,
    clear_request_id: impl FnOnce(&mut M),
    context: RequestContext<'_>,
    command: Command,
) -> Result<CommandRequest, Error> {
    let Some(meta) = meta else {
        return Err(Error::InvalidArgument(
            "meta must be set (meta.command_id is required)".into(),
        ));
    };
    check_id("meta.command_id", &meta.command_id, MAX_COMMAND_ID_LEN)?;
    // Bounded by the room's IM group id (Tencent's 48 bytes), not the column.
    check_id("room_id", room_id, MAX_ROOM_ID_LEN)?;
    let app_code = if meta.app_code.is_empty() {
        context.default_app_code.to_owned()
    } else {
        check_id("meta.app_code", &meta.app_code, MAX_APP_CODE_LEN)?;
        meta.app_code.clone()
    };
    if meta.request_id.chars().count() > MAX_REQUEST_ID_LEN {
        return Err(Error::InvalidArgument(format!(
            "meta.request_id must be at most {MAX_REQUEST_ID_LEN} characters"
        )));
    }
    // Tracing only, but it is logged and stored: a control character could forge log lines.
    if let Some(position) = meta.request_id.chars().position(char::is_control) {
        return Err(Error::InvalidArgument(format!(
            "meta.request_id contains a control character at position {position}"
        )));
    }
    let mut canonical = message.clone();
    clear_request_id(&mut canonical);
    Ok(CommandRequest {
        room_id: room_id.to_owned(),
        command_id: meta.command_id.clone(),
        fingerprint: fingerprint(rpc, &app_code, &canonical.encode_to_vec()),
        app_code,
        request_id: meta.request_id.clone(),
        traceparent: context.traceparent.to_owned(),
        command,
        forward: Some(message.clone().into_peer()),
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A request context for unit tests (validators and the gRPC layer's).
    pub(crate) fn context() -> RequestContext<'static> {
        RequestContext {
            default_app_code: "hyapp",
            traceparent: "",
            now_ms: 1_000,
        }
    }

    fn meta(command_id: &str) -> Option<api::CommandMeta> {
        Some(api::CommandMeta {
            command_id: command_id.into(),
            request_id: "req".into(),
            app_code: String::new(),
        })
    }

    #[test]
    fn ids_are_checked_with_the_field_name() {
        assert!(check_id("room_id", "room-1:a_b.c", MAX_ID_LEN).is_ok());
        let message = |value: &str| check_id("room_id", value, 4).unwrap_err().to_string();
        assert_eq!(message(""), "room_id must not be empty");
        assert_eq!(
            message("abcde"),
            "room_id must be at most 4 characters, got 5"
        );
        assert!(message("a b").contains("' ' at position 1"));
        assert!(message("é").contains("position 0"));
    }

    #[test]
    fn fingerprint_ignores_request_id_but_not_fields() {
        let join = |request_id: &str, user: &str| api::JoinRoomRequest {
            meta: Some(api::CommandMeta {
                command_id: "c1".into(),
                request_id: request_id.into(),
                app_code: String::new(),
            }),
            room_id: "r1".into(),
            user_id: user.into(),
        };
        let a = join_room(&join("x", "u1"), context()).unwrap();
        let b = join_room(&join("y", "u1"), context()).unwrap();
        let c = join_room(&join("x", "u2"), context()).unwrap();
        assert_eq!(a.fingerprint, b.fingerprint);
        assert_ne!(a.fingerprint, c.fingerprint);
        assert_eq!(a.app_code, "hyapp");
    }

    #[test]
    fn gift_amounts_must_be_positive_and_fit() {
        let gift = |count: i64, unit_value: i64| api::SendGiftRequest {
            meta: meta("c1"),
            room_id: "r1".into(),
            sender_id: "s".into(),
            receiver_id: "r".into(),
            gift_id: "g".into(),
            count,
            unit_value,
        };
        let error = |count, value| {
            send_gift(&gift(count, value), context())
                .unwrap_err()
                .to_string()
        };
        assert!(error(0, 1).starts_with("count must be positive"));
        assert!(error(-3, 1).contains("got -3"));
        assert!(error(1 << 40, 1).contains("overflows"));
        assert!(error(1, -1).starts_with("unit_value must be positive"));
        assert!(error(u32::MAX as i64, i64::MAX).contains("overflows"));
        let ok = send_gift(&gift(3, 10), context()).unwrap();
        // What it costs is room-core's to say (`RoomGiftSent.total_value`).
        assert!(matches!(
            &ok.command,
            Command::SendGift { sender_id, count: 3, unit_value: 10, .. } if sender_id == "s"
        ));
    }

    #[test]
    fn ids_that_reach_tencent_im_fit_its_limits() {
        let room_at_limit = "r".repeat(MAX_ROOM_ID_LEN);
        let user_at_limit = "u".repeat(MAX_USER_ID_LEN);
        let join = |room_id: &str, user_id: &str| api::JoinRoomRequest {
            meta: meta("c1"),
            room_id: room_id.into(),
            user_id: user_id.into(),
        };
        assert!(join_room(&join(&room_at_limit, &user_at_limit), context()).is_ok());
        let refused = |room_id: &str, user_id: &str| {
            join_room(&join(room_id, user_id), context())
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            refused(&format!("{room_at_limit}r"), "u"),
            "room_id must be at most 43 characters, got 44"
        );
        assert_eq!(
            refused("r", &format!("{user_at_limit}u")),
            "user_id must be at most 32 characters, got 33"
        );
        // The longest accepted room id makes the longest group id Tencent takes.
        let group_id = tencent_im::ImSection::default().group_id(&room_at_limit);
        assert_eq!(group_id.len(), tencent_im::section::MAX_GROUP_ID_BYTES);
        assert_eq!(
            tencent_im::section::MAX_GROUP_ID_BYTES,
            outbox_schema::ids::TENCENT_IM_MAX_GROUP_ID_BYTES
        );
    }

    #[test]
    fn every_user_id_field_is_bounded_by_the_im_account_limit() {
        let over = "u".repeat(MAX_USER_ID_LEN + 1);
        let at = "u".repeat(MAX_USER_ID_LEN);
        type Validator = Box<dyn Fn(&str) -> Result<CommandRequest, Error>>;
        let cases: Vec<(&str, Validator)> = vec![
            (
                "owner_id",
                Box::new(|id: &str| {
                    create_room(
                        &api::CreateRoomRequest {
                            meta: meta("c1"),
                            room_id: "r1".into(),
                            owner_id: id.into(),
                            title: "t".into(),
                            mic_seat_count: 1,
                        },
                        context(),
                    )
                }),
            ),
            (
                "actor_id",
                Box::new(|id: &str| {
                    close_room(
                        &api::CloseRoomRequest {
                            meta: meta("c1"),
                            room_id: "r1".into(),
                            actor_id: id.into(),
                        },
                        context(),
                    )
                }),
            ),
            (
                "target_id",
                Box::new(|id: &str| {
                    kick_user(
                        &api::KickUserRequest {
                            meta: meta("c1"),
                            room_id: "r1".into(),
                            actor_id: "a".into(),
                            target_id: id.into(),
                            ban_seconds: 0,
                        },
                        context(),
                    )
                }),
            ),
            (
                "sender_id",
                Box::new(|id: &str| {
                    send_gift(
                        &api::SendGiftRequest {
                            meta: meta("c1"),
                            room_id: "r1".into(),
                            sender_id: id.into(),
                            receiver_id: "r".into(),
                            gift_id: "g".into(),
                            count: 1,
                            unit_value: 1,
                        },
                        context(),
                    )
                }),
            ),
            (
                "receiver_id",
                Box::new(|id: &str| {
                    send_gift(
                        &api::SendGiftRequest {
                            meta: meta("c1"),
                            room_id: "r1".into(),
                            sender_id: "s".into(),
                            receiver_id: id.into(),
                            gift_id: "g".into(),
                            count: 1,
                            unit_value: 1,
                        },
                        context(),
                    )
                }),
            ),
        ];
        for (field, validate) in cases {
            assert!(validate(&at).is_ok(), "{field} at the limit");
            let error = validate(&over).unwrap_err();
            assert!(matches!(error, Error::InvalidArgument(_)), "{field}");
            assert_eq!(
                error.to_string(),
                format!("{field} must be at most 32 characters, got 33")
            );
        }
    }

    #[test]
    fn missing_meta_is_named() {
        let request = api::JoinRoomRequest {
            meta: None,
            room_id: "r".into(),
            user_id: "u".into(),
        };
        assert!(
            join_room(&request, context())
                .unwrap_err()
                .to_string()
                .contains("meta")
        );
    }
}
