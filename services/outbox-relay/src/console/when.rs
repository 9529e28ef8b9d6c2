//! Times as the console's search forms take them: a UTC wall-clock time
//! (`2026-12-03 21:30`, seconds optional, `T` or a space between date and
//! time, as a `datetime-local` field sends it) or a duration ago in the
//! config files' spelling (`2h`). Anything else is refused naming the field.

use crate::Error;
use crate::ops::render::civil_date;

/// `text` as ms since the epoch; the error names `field`.
pub fn parse_time(field: &str, text: &str) -> Result<i64, Error> {
    let text = text.trim();
    if text.len() >= 10 && text.as_bytes()[4] == b'-' {
        return wall_clock(text).ok_or_else(|| {
            Error::InvalidInput(format!(
                "{field} `{}` is not a UTC time like 2026-12-03 21:30 or 2026-12-03T21:30:05",
                text.escape_debug()
            ))
        });
    }
    crate::ops::since_ms(field, text).map_err(|_| {
        Error::InvalidInput(format!(
            "{field} `{}` is neither a UTC time (2026-12-03 21:30) nor a duration ago (2h)",
            text.escape_debug()
        ))
    })
}

/// `YYYY-MM-DD[( |T)HH:MM[:SS]]` as UTC ms; None when not a real time.
fn wall_clock(text: &str) -> Option<i64> {
    let (date, time) = match text.split_once([' ', 'T']) {
        Some((date, time)) => (date, time),
        None => (text, "00:00"),
    };
    let mut date_parts = date.split('-').map(|part| part.parse::<i64>().ok());
    let (year, month, day) = (
        date_parts.next()??,
        date_parts.next()??,
        date_parts.next()??,
    );
    let mut time_parts = time.split(':').map(|part| part.parse::<i64>().ok());
    let hour = time_parts.next()??;
    let minute = time_parts.next()??;
    let second = time_parts.next().unwrap_or(Some(0))?;
    if date_parts.next().is_some() || time_parts.next().is_some() {
        return None;
    }
    if !(1..=12).contains(&month) || !(0..24).contains(&hour) || !(0..60).contains(&minute) {
        return None;
    }
    if !(0..60).contains(&second) || !(1970..=9999).contains(&year) {
        return None;
    }
    let days = days_from_civil(year, month, day);
    // A day past the month's end comes back as another date.
    if civil_date(days) != (year, month, day) {
        return None;
    }
    Some(((days * 24 + hour) * 60 + minute) * 60_000 + second * 1_000)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (the inverse of
/// `ops::render::civil_date`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wall_clock_times_are_utc() {
        assert_eq!(parse_time("from", "2025-12-02").unwrap(), 1_764_633_600_000);
        assert_eq!(
            parse_time("from", "2025-12-02 00:00").unwrap(),
            1_764_633_600_000
        );
        assert_eq!(
            parse_time("from", "2000-02-29T01:01:01").unwrap(),
            951_782_400_000 + 3_661_000
        );
        assert_eq!(parse_time("to", "1970-01-01 00:00:01").unwrap(), 1_000);
    }

    #[test]
    fn a_bad_time_names_its_field() {
        for text in [
            "2025-02-30",
            "2025-13-01 00:00",
            "2025-12-02 24:00",
            "soon",
            "2025-12-02 10",
        ] {
            let error = parse_time("from", text).unwrap_err().to_string();
            assert!(error.contains("from `"), "{text}: {error}");
        }
        let ago = parse_time("from", "2h").unwrap();
        assert!(ago < service_kit::time::now_ms() - 7_000_000);
    }
}
