//! The services' log files as xtask shows them: the tail of a log, without
//! the terminal colours the text logs carry, when a service fails.

use std::path::Path;

/// The last `lines` lines of a log file, indented.
pub fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    let tail = &all[all.len().saturating_sub(lines)..];
    if tail.is_empty() {
        return "    (log is empty)".into();
    }
    tail.iter()
        .map(|line| format!("    {}", strip_ansi(line)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Removes terminal colour sequences (`ESC [ … m`) the services' text logs carry.
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for next in chars.by_ref() {
                if next.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_are_stripped() {
        assert_eq!(
            strip_ansi("\u{1b}[2m2026\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m ready"),
            "2026  INFO ready"
        );
    }
}
