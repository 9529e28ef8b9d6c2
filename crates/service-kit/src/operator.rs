//! Who performed an audited operator action and why, checked once for every
//! service (docs/design.md#operator-identity-and-reason): the relay's
//! `relay_operator_audit` and the consumers' `consumer_operator_audit` record
//! different things, but the operator name and reason in both obey these
//! rules, and both tables' columns are exactly [`MAX_OPERATOR_CHARS`] and
//! [`MAX_REASON_CHARS`] wide.
//!
//! A refusal is a [`Refusal`] that does not know where the value came from;
//! each caller names its source (`--operator`, `x-operator`, `--reason`)
//! with [`Refusal::naming`] and wraps the text in its own error.

/// Longest operator name, in characters (both audit tables' `operator`).
pub const MAX_OPERATOR_CHARS: usize = 64;
/// Longest reason, in characters (both audit tables' `reason`).
pub const MAX_REASON_CHARS: usize = 512;
/// The characters an operator name may use, as printed in refusals.
pub const OPERATOR_CHARSET: &str = "[A-Za-z0-9_.:@-]";

/// Why an operator name or reason was refused; [`Refusal::naming`] puts the
/// name of the flag or header in front.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Absent or blank where a value is required.
    #[error("is required: every operator change is audited with who and why")]
    Missing,
    /// Longer than its column.
    #[error("has {chars} characters, more than {max}")]
    TooLong {
        /// Characters given (after trimming).
        chars: usize,
        /// The limit.
        max: usize,
    },
    /// An operator name with a character outside [`OPERATOR_CHARSET`].
    #[error("has {character:?} at position {position}; names are {OPERATOR_CHARSET}")]
    NotInCharset {
        /// The first offending character.
        character: char,
        /// Its position, in characters, in the text as given.
        position: usize,
    },
    /// A reason with a control or direction-changing character.
    #[error(
        "has the unprintable character {character:?} at position {position}: \
         control and direction-changing characters would forge or reorder \
         lines in a terminal or a log"
    )]
    Unprintable {
        /// The first offending character.
        character: char,
        /// Its position, in characters, in the text as given.
        position: usize,
    },
}

impl Refusal {
    /// The refusal as a sentence about `source` (`--operator`, `x-operator`,
    /// ...), e.g. `--operator has 65 characters, more than 64`.
    pub fn naming(&self, source: &str) -> String {
        format!("{source} {self}")
    }
}

/// Who performed an audited action: the given name without surrounding
/// whitespace, 1 to [`MAX_OPERATOR_CHARS`] characters of
/// [`OPERATOR_CHARSET`] (`alice`, `alice@example.com`, `oncall:bob`,
/// `cron-purge`).
///
/// Why this strict set and not "anything printable": a name is an identity
/// that is compared and grepped across both audit tables and logs. Outside
/// ASCII, look-alike letters (Cyrillic `а` for `a`) and invisible format
/// characters (zero-width space, right-to-left override — not control
/// characters to `char::is_control`) would let two different strings read
/// as the same person; inner spaces make names ambiguous in text output.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct OperatorName(String);

impl OperatorName {
    /// Checks `name`; the refusal names the rule it breaks.
    pub fn new(name: &str) -> Result<Self, Refusal> {
        let (trimmed, leading) = trim(name);
        if trimmed.is_empty() {
            return Err(Refusal::Missing);
        }
        if let Some((index, character)) = trimmed
            .chars()
            .enumerate()
            .find(|(_, c)| !(c.is_ascii_alphanumeric() || "_.:@-".contains(*c)))
        {
            return Err(Refusal::NotInCharset {
                character,
                position: leading + index,
            });
        }
        // All ASCII by now, so bytes are characters.
        if trimmed.len() > MAX_OPERATOR_CHARS {
            return Err(Refusal::TooLong {
                chars: trimmed.len(),
                max: MAX_OPERATOR_CHARS,
            });
        }
        Ok(Self(trimmed.to_owned()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for OperatorName {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(&self.0)
    }
}

/// Whether an action needs a reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReasonRule {
    /// Refused without one (skip, a consumer's replay or retry).
    Required,
    /// May be empty (the relay's replay, retry-now, purge).
    Optional,
}

/// Checks an operator's reason: trimmed, at most [`MAX_REASON_CHARS`]
/// characters, printable (no control characters, no invisible
/// direction-changing ones: a reason is printed in tables, terminals and
/// logs); [`ReasonRule::Required`] refuses an absent or blank one.
pub fn checked_reason(reason: Option<&str>, rule: ReasonRule) -> Result<String, Refusal> {
    let (trimmed, leading) = trim(reason.unwrap_or_default());
    if trimmed.is_empty() && rule == ReasonRule::Required {
        return Err(Refusal::Missing);
    }
    if let Some((index, character)) = trimmed.chars().enumerate().find(|(_, c)| unprintable(*c)) {
        return Err(Refusal::Unprintable {
            character,
            position: leading + index,
        });
    }
    let chars = trimmed.chars().count();
    if chars > MAX_REASON_CHARS {
        return Err(Refusal::TooLong {
            chars,
            max: MAX_REASON_CHARS,
        });
    }
    Ok(trimmed.to_owned())
}

/// `text` cut to at most `max_chars` characters, on a character boundary:
/// how an audit row's free text (a relay detail, a consumer's selection or
/// outcome) is fitted to its column instead of failing the insert.
pub fn fit_to_column(text: &str, max_chars: usize) -> &str {
    match text.char_indices().nth(max_chars) {
        Some((end, _)) => &text[..end],
        None => text,
    }
}

/// `text` without surrounding whitespace, and how many characters were cut
/// from its front (so a refusal's position counts in the text as given).
fn trim(text: &str) -> (&str, usize) {
    let front = text.trim_start();
    let leading = text.chars().count() - front.chars().count();
    (front.trim_end(), leading)
}

/// Control characters, and the invisible format characters that reorder or
/// hide text when printed (bidirectional overrides and isolates, marks,
/// zero-width space, word joiner, byte order mark).
fn unprintable(character: char) -> bool {
    character.is_control()
        || matches!(
            character,
            '\u{061C}'
                | '\u{200B}'
                | '\u{200E}'
                | '\u{200F}'
                | '\u{202A}'..='\u{202E}'
                | '\u{2060}'
                | '\u{2066}'..='\u{2069}'
                | '\u{FEFF}'
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operator_names_are_trimmed_and_checked() {
        for good in ["alice", "alice@example.com", "oncall:bob-2", "a.b_c"] {
            assert_eq!(OperatorName::new(good).unwrap().as_str(), good);
        }
        assert_eq!(OperatorName::new(" alice\n").unwrap().as_str(), "alice");
        let longest = "x".repeat(MAX_OPERATOR_CHARS);
        assert_eq!(OperatorName::new(&longest).unwrap().as_str(), longest);
        for (bad, names) in [
            ("", "is required"),
            ("   ", "is required"),
            ("al ice", "' ' at position 2"),
            ("a\nFAKE LOG LINE", "'\\n' at position 1"),
            ("  b\u{7}", "'\\u{7}' at position 3"),
            ("ünïcode", "'ü' at position 0"),
            ("\u{430}lice", "position 0"),
            ("bob\u{202E}", "position 3"),
            (&"x".repeat(65), "has 65 characters, more than 64"),
        ] {
            let refusal = OperatorName::new(bad).unwrap_err();
            let text = refusal.naming("--operator");
            assert!(text.starts_with("--operator "), "{bad:?}: {text}");
            assert!(text.contains(names), "{bad:?}: {text}");
        }
    }

    #[test]
    fn reasons_are_trimmed_bounded_and_printable() {
        assert_eq!(
            checked_reason(Some("  im down  "), ReasonRule::Required).unwrap(),
            "im down"
        );
        assert_eq!(
            checked_reason(
                Some("IM-Ausfall, Ticket 42 — behoben"),
                ReasonRule::Required
            )
            .unwrap(),
            "IM-Ausfall, Ticket 42 — behoben"
        );
        assert_eq!(checked_reason(None, ReasonRule::Optional).unwrap(), "");
        assert_eq!(checked_reason(Some(" "), ReasonRule::Optional).unwrap(), "");
        for reason in [None, Some("   ")] {
            assert_eq!(
                checked_reason(reason, ReasonRule::Required),
                Err(Refusal::Missing)
            );
        }
        let longest = "r".repeat(MAX_REASON_CHARS);
        assert_eq!(
            checked_reason(Some(&longest), ReasonRule::Optional).unwrap(),
            longest
        );
        assert_eq!(
            checked_reason(Some(&"é".repeat(513)), ReasonRule::Optional),
            Err(Refusal::TooLong {
                chars: 513,
                max: 512
            })
        );
        for (bad, position) in [
            ("a\u{1b}[31m", 1),
            (" r\nFAKE LOG LINE", 2),
            ("paid\u{202E}dnufer", 4),
            ("\u{200B}x", 0),
        ] {
            let refusal = checked_reason(Some(bad), ReasonRule::Optional).unwrap_err();
            assert!(
                matches!(refusal, Refusal::Unprintable { position: p, .. } if p == position),
                "{bad:?}: {refusal}"
            );
            assert!(
                refusal
                    .naming("--reason")
                    .starts_with("--reason has the unprintable")
            );
        }
    }

    #[test]
    fn free_text_is_fitted_on_character_boundaries() {
        assert_eq!(fit_to_column("short", 10), "short");
        assert_eq!(fit_to_column("exactly", 7), "exactly");
        assert_eq!(fit_to_column("ééé", 2), "éé");
        assert_eq!(fit_to_column("", 0), "");
        assert_eq!(fit_to_column("x", 0), "");
    }
}
