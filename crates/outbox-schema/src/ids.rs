//! The id rules every service applies to the ids it stores or forwards —
//! room, user, gift, command, request and app codes — written once
//! (docs/design.md#room-commands-and-the-room-cell). An id is non-empty, at
//! most its column's length, and drawn from `[A-Za-z0-9_.:-]`: safe in SQL
//! columns, Redis keys, Kafka keys, IM group ids and log lines alike.
//! Callers word the error for their own API; the rule is here.

/// Longest room, user, actor, target and gift id (`VARCHAR(64)` columns).
pub const MAX_ID_LEN: usize = 64;
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
}
