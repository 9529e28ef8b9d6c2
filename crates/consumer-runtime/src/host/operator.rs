//! The operator commands every consumer binary has beside running the
//! service (`<service> [--config …] dead-letters …` / `deliveries …`):
//! their arguments and the checks of what the operator typed, so a bad
//! value is refused, precisely, before anything is read or changed.
//!
//! - `dead-letters list|inspect|replay`: the group's `<group>.dlq`;
//! - `deliveries list|retry`: the failed rows of the service's delivery table.
//!
//! Every mutation names `--operator` and `--reason` (audited). What the
//! commands do is [`super::operator_run`].

use clap::{ArgGroup, Args, Parser, Subcommand};
use outbox_store::dedup::MAX_EVENT_ID_BYTES;
use service_kit::duration::ConfigDuration;

/// An operator command of a consumer binary.
#[derive(Debug, Clone, Subcommand)]
pub enum OperatorCommand {
    /// The dead letters of this service's consumer group (`<group>.dlq`).
    #[command(subcommand)]
    DeadLetters(DeadLettersCommand),
    /// The failed rows of this service's delivery table.
    #[command(subcommand)]
    Deliveries(DeliveriesCommand),
}

/// `dead-letters …`.
#[derive(Debug, Clone, Subcommand)]
pub enum DeadLettersCommand {
    /// Lists dead letters, oldest first (reads the topic; changes nothing).
    List {
        /// Only those dead-lettered within this long (e.g. `2h`, `30m`, `7d`).
        #[arg(long, value_parser = since)]
        since: Option<i64>,
        /// Most dead letters shown.
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
        limit: u32,
        /// One JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Shows every dead letter of one event in full: headers and the decoded envelope.
    Inspect {
        /// The event.
        #[arg(value_parser = event_id)]
        event_id: String,
        /// One JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Hands dead letters to this group's handler again (only this group sees them).
    Replay(ReplayArgs),
}

/// `dead-letters replay`.
#[derive(Debug, Clone, Args)]
#[command(group(ArgGroup::new("selection").required(true).args(["event_id", "since", "all"])))]
pub struct ReplayArgs {
    /// The dead letter(s) of this event.
    #[arg(long, value_parser = event_id)]
    pub(super) event_id: Option<String>,
    /// Those dead-lettered within this long (e.g. `2h`).
    #[arg(long, value_parser = since)]
    pub(super) since: Option<i64>,
    /// All of them.
    #[arg(long)]
    pub(super) all: bool,
    /// Most events replayed by one command; more matching is refused.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    pub(super) limit: u32,
    /// Replay events older than `consumer.dedup_retention` too (their dedup
    /// record may be gone: check first that they were never applied).
    #[arg(long)]
    pub(super) force: bool,
    /// Only say what would be replayed or refused.
    #[arg(long)]
    pub(super) dry_run: bool,
    /// Who replays (audited).
    #[arg(long, required_unless_present = "dry_run")]
    pub(super) operator: Option<String>,
    /// Why (audited).
    #[arg(long, required_unless_present = "dry_run")]
    pub(super) reason: Option<String>,
    /// One JSON document instead of text.
    #[arg(long)]
    pub(super) json: bool,
}

/// `deliveries …`.
#[derive(Debug, Clone, Subcommand)]
pub enum DeliveriesCommand {
    /// Lists failed deliveries, oldest first.
    List {
        /// Only rows created within this long (e.g. `2h`).
        #[arg(long, value_parser = since)]
        since: Option<i64>,
        /// Most rows shown.
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
        limit: u32,
        /// One JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Sets failed deliveries back to pending so the sweeper sends them again.
    Retry(RetryArgs),
}

/// `deliveries retry`.
#[derive(Debug, Clone, Args)]
#[command(group(ArgGroup::new("selection").required(true).args(["event_id", "since", "all"])))]
pub struct RetryArgs {
    /// The failed rows of this event.
    #[arg(long, value_parser = event_id)]
    pub(super) event_id: Option<String>,
    /// The failed rows created within this long (e.g. `2h`).
    #[arg(long, value_parser = since)]
    pub(super) since: Option<i64>,
    /// All failed rows (up to --limit).
    #[arg(long)]
    pub(super) all: bool,
    /// Most rows reset by one command (oldest first); run again for more.
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub(super) limit: u32,
    /// Who retries (audited).
    #[arg(long)]
    pub(super) operator: String,
    /// Why (audited).
    #[arg(long)]
    pub(super) reason: String,
}

/// Parses an operator command from arguments (without the binary's name),
/// as the binary does.
impl OperatorCommand {
    /// `args` like `["dead-letters", "list", "--since", "2h"]`.
    pub fn from_args<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        #[derive(Parser)]
        struct Wrapper {
            #[command(subcommand)]
            command: OperatorCommand,
        }
        let args = std::iter::once(std::ffi::OsString::from("operator"))
            .chain(args.into_iter().map(Into::into));
        Wrapper::try_parse_from(args).map(|wrapper| wrapper.command)
    }
}

/// `--since` as the Unix ms it starts at.
fn since(text: &str) -> Result<i64, String> {
    let window = ConfigDuration::parse(text)?;
    if !window.is_positive() {
        return Err(format!("`{text}` is not a positive duration"));
    }
    Ok(service_kit::time::now_ms().saturating_sub(window.as_millis()))
}

/// An event id as `consumer_dedup` keys it: 1..=36 bytes, printable.
fn event_id(text: &str) -> Result<String, String> {
    if text.is_empty() || text.len() > MAX_EVENT_ID_BYTES {
        return Err(format!(
            "an event id is 1..={MAX_EVENT_ID_BYTES} bytes, this is {}",
            text.len()
        ));
    }
    if text.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err("an event id holds no spaces or control characters".into());
    }
    Ok(text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_checked_before_anything_runs() {
        let parsed = OperatorCommand::from_args(["dead-letters", "list", "--since", "2h"]).unwrap();
        let OperatorCommand::DeadLetters(DeadLettersCommand::List {
            since: Some(since), ..
        }) = parsed
        else {
            panic!("{parsed:?}");
        };
        let expected = service_kit::time::now_ms() - 7_200_000;
        assert!((expected - 5_000..=expected).contains(&since), "{since}");
        for (args, expected) in [
            (
                &["dead-letters", "replay", "--all", "--reason", "r"][..],
                "--operator",
            ),
            (
                &["dead-letters", "replay", "--all", "--operator", "o"][..],
                "--reason",
            ),
            (
                &["dead-letters", "replay", "--operator", "o", "--reason", "r"][..],
                "<--event-id",
            ),
            (
                &[
                    "dead-letters",
                    "replay",
                    "--all",
                    "--since",
                    "2h",
                    "--dry-run",
                ][..],
                "cannot be used with",
            ),
            (
                &["dead-letters", "list", "--since=-2h"][..],
                "not a positive duration",
            ),
            (
                &["dead-letters", "list", "--since", "2 fortnights"][..],
                "unknown duration unit",
            ),
            (
                &["dead-letters", "inspect", &"x".repeat(37)][..],
                "1..=36 bytes",
            ),
            (
                &["dead-letters", "inspect", "a\u{1b}[2Jb"][..],
                "no spaces or control",
            ),
            (
                &["dead-letters", "list", "--limit", "0"][..],
                "0 is not in 1..=10000",
            ),
            (
                &["deliveries", "retry", "--all", "--operator", "o"][..],
                "--reason",
            ),
        ] {
            let error = OperatorCommand::from_args(args.iter().copied())
                .unwrap_err()
                .to_string();
            assert!(error.contains(expected), "{args:?}: {error}");
        }
        // A dry run changes nothing, so it needs no operator.
        assert!(
            OperatorCommand::from_args(["dead-letters", "replay", "--all", "--dry-run"]).is_ok()
        );
    }
}
