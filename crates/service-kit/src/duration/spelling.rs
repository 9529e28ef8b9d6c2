//! How a duration is spelled, in one function every duration parser of the
//! workspace runs: config files ([`super::ConfigDuration`]), the Tencent IM
//! client's settings and the relay's operator commands call it; xtask and
//! deploy-check, which cannot depend on service-kit, include this very file
//! with `#[path]`. So it uses std only and nothing from its crate. The rules
//! are in [`parse_millis`].

/// Milliseconds per unit, in the order a reader looks them up.
const UNITS: [(&str, i64); 5] = [
    ("ms", 1),
    ("s", 1_000),
    ("m", 60_000),
    ("h", 3_600_000),
    ("d", 86_400_000),
];

/// Milliseconds from a duration's text. The one spelling:
///
/// - surrounding whitespace is ignored;
/// - an optional `-`, then one or more ASCII digits, then optional spaces,
///   then the unit: exactly `ms`, `s`, `m`, `h` or `d` (lowercase);
/// - **a bare integer is milliseconds**, everywhere (`"250"` is 250 ms, as a
///   YAML integer `250` is). A caller where a person might mean seconds (a
///   command-line flag) refuses it with [`parse_millis_with_unit`]; no caller
///   reads it as another unit;
/// - nothing else: no fraction (`1.5s`), no compound (`1h30m`), no `+`, no
///   other unit (`us`, `w`, `sec`), no uppercase; a value beyond `i64`
///   milliseconds is refused;
/// - zero and negative values parse; whether they are allowed is the
///   caller's rule (config falls back to its default, the operator commands
///   and the IM client refuse them).
///
/// The error names the text.
pub fn parse_millis(text: &str) -> Result<i64, String> {
    let text = text.trim();
    let split = text
        .char_indices()
        .find(|(index, c)| !(c.is_ascii_digit() || (*index == 0 && *c == '-')))
        .map_or(text.len(), |(index, _)| index);
    let (number, unit) = text.split_at(split);
    let value: i64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a duration like \"500ms\", \"3s\", \"5m\""))?;
    let unit = unit.trim_start();
    let factor = if unit.is_empty() {
        1
    } else {
        UNITS
            .iter()
            .find(|(name, _)| *name == unit)
            .map(|(_, factor)| *factor)
            .ok_or_else(|| {
                format!("unknown duration unit `{unit}` in `{text}` (one of ms, s, m, h, d)")
            })?
    };
    value
        .checked_mul(factor)
        .ok_or_else(|| format!("duration `{text}` is too large"))
}

/// [`parse_millis`] for text a person types where seconds might be meant: a
/// bare integer is refused (a unit is required) rather than read as
/// milliseconds, so `--duration 45` fails instead of running for 45 ms.
pub fn parse_millis_with_unit(text: &str) -> Result<i64, String> {
    if text.trim().ends_with(|c: char| c.is_ascii_digit()) {
        return Err(format!(
            "`{}` needs a unit: ms, s, m, h or d (\"90s\", \"10m\")",
            text.trim()
        ));
    }
    parse_millis(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_unit_and_a_bare_integer() {
        assert_eq!(parse_millis("250ms"), Ok(250));
        assert_eq!(parse_millis("3s"), Ok(3_000));
        assert_eq!(parse_millis("5m"), Ok(300_000));
        assert_eq!(parse_millis("2h"), Ok(7_200_000));
        assert_eq!(parse_millis("7d"), Ok(604_800_000));
        assert_eq!(parse_millis(" 3 s "), Ok(3_000));
        assert_eq!(parse_millis("-1s"), Ok(-1_000));
        assert_eq!(parse_millis("0"), Ok(0));
        assert_eq!(
            parse_millis("250"),
            Ok(250),
            "a bare integer is milliseconds"
        );
    }

    #[test]
    fn anything_else_is_refused_with_the_text() {
        for text in [
            "", "s", "fast", "1.5s", "1h30m", "+5s", "5S", "5us", "2w", "5 sec", "--1s", "1-s",
        ] {
            let error = parse_millis(text).expect_err(text);
            assert!(error.contains(text.trim()), "{text}: {error}");
        }
        assert!(parse_millis("9223372036854775807d").is_err());
    }

    #[test]
    fn a_unit_can_be_required() {
        assert_eq!(parse_millis_with_unit("90s"), Ok(90_000));
        assert_eq!(parse_millis_with_unit("2500ms"), Ok(2_500));
        let error = parse_millis_with_unit("45").unwrap_err();
        assert!(error.contains("45") && error.contains("unit"), "{error}");
        assert!(parse_millis_with_unit("ten").is_err());
    }
}
