//! The id rules every service applies to the ids it stores or forwards —
//! room, user, gift, command, request and app codes — written once
//! (docs/design.md#room-commands-and-the-room-cell). An id is non-empty, at
//! most its column's length, and drawn from `[A-Za-z0-9_.:-]`: safe in SQL
//! columns, Redis keys, Kafka keys, IM group ids and log lines alike.
//! Callers word the error for their own API; the rule is here.
//!
//! Ids that reach Tencent IM are bounded by its limits too: a room id becomes
//! part of an IM group id, a user id is an IM account (`MAX_ROOM_ID_LEN`,
//! `MAX_USER_ID_LEN`). Ids are ASCII, so their length in characters is their
//! length in bytes, the unit Tencent counts in.

/// Longest id a column holds (`VARCHAR(64)`): the bound for gift ids, and for
/// ids read back from storage or events, which may predate the IM bounds below.
pub const MAX_ID_LEN: usize = 64;
/// Tencent IM's limit on a group id (`GroupId`), in bytes.
pub const TENCENT_IM_MAX_GROUP_ID_BYTES: usize = 48;
/// Tencent IM's limit on an account id (`UserID`, `Identifier`), in bytes.
pub const TENCENT_IM_MAX_USER_ID_BYTES: usize = 32;
/// What a room's IM group id adds to its room id: the default
/// `tencent_im.group_id_template` is `room_{room_id}` (tencent-im refuses a
/// template that adds more).
pub const IM_GROUP_ID_PREFIX: &str = "room_";
/// Longest room id: `room_` + the room id must fit Tencent's 48-byte group id.
pub const MAX_ROOM_ID_LEN: usize = TENCENT_IM_MAX_GROUP_ID_BYTES - IM_GROUP_ID_PREFIX.len();
/// Longest user id — owner, actor, target, sender, receiver, member: each is
/// a Tencent IM account (kicks remove it from the group, notices go to it).
pub const MAX_USER_ID_LEN: usize = TENCENT_IM_MAX_USER_ID_BYTES;
/// Longest command_id.
pub const MAX_COMMAND_ID_LEN: usize = 128;
/// Longest request_id.
pub const MAX_REQUEST_ID_LEN: usize = 128;
/// Longest app_code (the `rooms.app_code` column).
pub const MAX_APP_CODE_LEN: usize = 32;
/// Length of an `event_id` column (`CHAR(36)`, a UUID).
pub const MAX_EVENT_ID_LEN: usize = 36;

/// Why a value is not an id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdProblem {
    /// The value is empty.
    Empty,
    /// The value has `length` characters, more than `max`.
    TooLong {
        /// Its length in characters.
        length: usize,
        /// The limit.
        max: usize,
    },
    /// The character at `position` (0-based, in characters) is not allowed.
    Forbidden {
        /// Where it is.
        position: usize,
        /// What it is.
        character: char,
    },
}

/// True when `character` may appear in an id.
pub fn is_id_char(character: char) -> bool {
    character.is_ascii_alphanumeric() || matches!(character, '_' | '.' | ':' | '-')
}

/// True when every character of `value` may appear in an id.
pub fn is_id_charset(value: &str) -> bool {
    value.chars().all(is_id_char)
}

/// Checks `value` against the id rules with a limit of `max` characters.
/// The length is checked before the charset, so an oversized value is named
/// as such whatever it contains.
pub fn check_id(value: &str, max: usize) -> Result<(), IdProblem> {
    if value.is_empty() {
        return Err(IdProblem::Empty);
    }
    let length = value.chars().count();
    if length > max {
        return Err(IdProblem::TooLong { length, max });
    }
    match value
        .chars()
        .enumerate()
        .find(|(_, character)| !is_id_char(*character))
    {
        Some((position, character)) => Err(IdProblem::Forbidden {
            position,
            character,
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_bounded_non_empty_and_plain() {
        assert_eq!(check_id("room-1:a_b.c", MAX_ID_LEN), Ok(()));
        assert_eq!(check_id("", MAX_ID_LEN), Err(IdProblem::Empty));
        assert_eq!(
            check_id(&"x".repeat(65), MAX_ID_LEN),
            Err(IdProblem::TooLong {
                length: 65,
                max: 64
            })
        );
        assert_eq!(
            check_id("u;drop", MAX_ID_LEN),
            Err(IdProblem::Forbidden {
                position: 1,
                character: ';'
            })
        );
        assert_eq!(
            check_id("语音房", MAX_ID_LEN),
            Err(IdProblem::Forbidden {
                position: 0,
                character: '语'
            })
        );
        assert!(is_id_charset("abc-1") && !is_id_charset("a b"));
    }

    #[test]
    fn im_bound_ids_fit_tencent_limits_exactly() {
        assert_eq!(MAX_ROOM_ID_LEN, 43);
        assert_eq!(MAX_USER_ID_LEN, 32);
        let longest_room = "r".repeat(MAX_ROOM_ID_LEN);
        assert_eq!(check_id(&longest_room, MAX_ROOM_ID_LEN), Ok(()));
        assert_eq!(
            format!("{IM_GROUP_ID_PREFIX}{longest_room}").len(),
            TENCENT_IM_MAX_GROUP_ID_BYTES
        );
        assert_eq!(
            check_id(&"r".repeat(MAX_ROOM_ID_LEN + 1), MAX_ROOM_ID_LEN),
            Err(IdProblem::TooLong {
                length: 44,
                max: 43
            })
        );
        let longest_user = "u".repeat(MAX_USER_ID_LEN);
        assert_eq!(check_id(&longest_user, MAX_USER_ID_LEN), Ok(()));
        assert_eq!(longest_user.len(), TENCENT_IM_MAX_USER_ID_BYTES);
        assert_eq!(
            check_id(&"u".repeat(MAX_USER_ID_LEN + 1), MAX_USER_ID_LEN),
            Err(IdProblem::TooLong {
                length: 33,
                max: 32
            })
        );
    }
}
