//! Carrying out an operator command ([`super::OperatorCommand`]) for one
//! service, and the report it prints (text, or one JSON document with
//! `--json`):
//! - `dead-letters list|inspect|replay`: the group's `<group>.dlq`, read
//!   without touching the group's offsets ([`super::dead_letters`]); replay
//!   hands letters to the group's own handler ([`super::replay`]);
//! - `deliveries list|retry`: the failed rows of the service's delivery
//!   table ([`super::deliveries`]).
//!
//! Every mutation is audited ([`super::audit`]).

use super::{
    ConsumerService, Error, ServiceConfig,
    audit::Accountable,
    dead_letters::{self, DeadLetter, Filter},
    deliveries::{FailedDeliveries, FailedRow, RetryBy, Selection},
    operator::{DeadLettersCommand, DeliveriesCommand, OperatorCommand, ReplayArgs, RetryArgs},
    replay::{self, Replayed},
};
use crate::ConsumerSettings;
use std::fmt::Write as _;

/// What a command printed, and whether it did all it was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorReport {
    /// The text (or JSON) to print.
    pub output: String,
    /// False when part of the request was refused or failed (the binary
    /// then exits non-zero after printing).
    pub complete: bool,
}

impl OperatorReport {
    fn done(output: String) -> Self {
        Self {
            output,
            complete: true,
        }
    }
}

/// Runs `command` for service `S` with its loaded `config`.
pub async fn run_operator<S: ConsumerService>(
    config: &S::Config,
    command: OperatorCommand,
) -> Result<OperatorReport, Error> {
    let settings = config.consumer_settings()?;
    match command {
        OperatorCommand::DeadLetters(DeadLettersCommand::List { since, limit, json }) => {
            list_command::<S>(&settings, since, limit, json).await
        }
        OperatorCommand::DeadLetters(DeadLettersCommand::Inspect { event_id, json }) => {
            let filter = Filter {
                since_ms: None,
                event_id: Some(event_id.clone()),
                position: None,
            };
            let found = dead_letters::read::<S::Message>(&settings, &filter, 16).await?;
            if found.letters.is_empty() {
                return Err(unknown_event(&event_id, &settings.dead_letter_topic));
            }
            Ok(OperatorReport::done(inspect::<S>(&found.letters, json)))
        }
        OperatorCommand::DeadLetters(DeadLettersCommand::Replay(args)) => {
            replay_command::<S>(config, &settings, args).await
        }
        OperatorCommand::Deliveries(command) => {
            deliveries_command::<S>(config, &settings, command).await
        }
    }
}

/// `dead-letters list`: the letters since `since` (at most `limit`).
async fn list_command<S: ConsumerService>(
    settings: &ConsumerSettings,
    since: Option<i64>,
    limit: u32,
    json: bool,
) -> Result<OperatorReport, Error> {
    let filter = Filter {
        since_ms: since,
        event_id: None,
        position: None,
    };
    let found = dead_letters::read::<S::Message>(settings, &filter, cap(limit)).await?;
    Ok(OperatorReport::done(if json {
        to_json(&serde_json::json!({
            "topic": settings.dead_letter_topic,
            "matched": found.matched,
            "dead_letters": found.letters,
        }))
    } else {
        list_text(&settings.dead_letter_topic, &found.letters, found.matched)
    }))
}

/// `deliveries list|retry` on the service's delivery table.
async fn deliveries_command<S: ConsumerService>(
    config: &S::Config,
    settings: &ConsumerSettings,
    command: DeliveriesCommand,
) -> Result<OperatorReport, Error> {
    let Some(table) = S::failed_deliveries() else {
        return Err(Error::Operator(format!(
            "{} owns no delivery table",
            S::Config::SERVICE
        )));
    };
    let pool = config.shared().mysql.connect().await?;
    let result = match command {
        DeliveriesCommand::List { since, limit, json } => {
            let rows = table.list(&pool, since.unwrap_or(0), limit).await;
            rows.map(|rows| OperatorReport::done(failed_rows_text(&table, &rows, json)))
        }
        DeliveriesCommand::Retry(args) => {
            let who = Accountable::new(Some(&args.operator), Some(&args.reason))?;
            let (selection, target) = retry_selection(&args);
            let by = RetryBy {
                who: &who,
                service: S::Config::SERVICE,
                consumer_group: &settings.consumer_group,
                target: &target,
            };
            table.retry(&pool, &selection, by).await.map(|reset| {
                OperatorReport::done(format!(
                    "{reset} failed rows of {} set back to pending; the sweeper sends them again\n",
                    table.table()
                ))
            })
        }
    };
    pool.close().await;
    result
}

/// The failed rows of `table`, as text or JSON.
fn failed_rows_text(table: &FailedDeliveries, rows: &[FailedRow], json: bool) -> String {
    if json {
        return to_json(&serde_json::json!({ "table": table.table(), "failed": rows }));
    }
    let mut text = format!("{} failed rows in {}\n", rows.len(), table.table());
    for row in rows {
        let _ = writeln!(
            text,
            "{}  created {}  room {}  for {}  attempts {}  last error: {}",
            row.event_id,
            ago(row.created_at_ms),
            row.room_id,
            row.target,
            row.attempts,
            row.last_error
        );
    }
    text
}

/// Which failed rows a `deliveries retry` selects, and how the audit row names them.
fn retry_selection(args: &RetryArgs) -> (Selection, String) {
    match (&args.event_id, args.since, args.all) {
        (Some(id), _, _) => (Selection::Event(id.clone()), format!("event_id={id}")),
        (None, Some(since_ms), _) => (
            Selection::Since {
                since_ms,
                limit: args.limit,
            },
            format!("since_ms={since_ms} limit={}", args.limit),
        ),
        (None, None, _) => (
            Selection::Since {
                since_ms: 0,
                limit: args.limit,
            },
            format!("all limit={}", args.limit),
        ),
    }
}

/// The binary's side of an operator command: prints the report, and fails
/// (exit status non-zero) when part of it was refused or failed.
pub(super) async fn main<S: ConsumerService>(
    config: &S::Config,
    command: OperatorCommand,
) -> Result<(), Error> {
    let report = run_operator::<S>(config, command).await?;
    print!("{}", report.output);
    if report.complete {
        Ok(())
    } else {
        Err(Error::Operator(
            "not everything asked for was done; see the refusals and failures above".into(),
        ))
    }
}

async fn replay_command<S: ConsumerService>(
    config: &S::Config,
    settings: &ConsumerSettings,
    args: ReplayArgs,
) -> Result<OperatorReport, Error> {
    let who = if args.dry_run {
        None
    } else {
        Some(Accountable::new(
            args.operator.as_deref(),
            args.reason.as_deref(),
        )?)
    };
    let filter = Filter {
        since_ms: args.since,
        event_id: args.event_id.clone(),
        position: None,
    };
    let limit = cap(args.limit);
    let found = dead_letters::read::<S::Message>(settings, &filter, limit).await?;
    if let Some(id) = &args.event_id
        && found.letters.is_empty()
    {
        return Err(unknown_event(id, &settings.dead_letter_topic));
    }
    if found.matched > limit {
        return Err(Error::Operator(format!(
            "{} dead letters match, more than --limit {}: nothing replayed; narrow the selection \
             with --since or raise --limit",
            found.matched, args.limit
        )));
    }
    let mut target = match (&args.event_id, args.since) {
        (Some(id), _) => format!("event_id={id}"),
        (None, Some(since_ms)) => format!("since_ms={since_ms}"),
        (None, None) => "all".to_string(),
    };
    if args.force {
        target.push_str(" force");
    }
    let lines = replay::replay::<S>(
        config,
        settings,
        found.letters,
        &target,
        who.as_ref(),
        args.force,
        args.dry_run,
    )
    .await?;
    let complete = lines
        .iter()
        .all(|line| !matches!(line.replayed, Replayed::Refused(_) | Replayed::Failed(_)));
    let summary = replay::summary(&lines);
    let output = if args.json {
        to_json(&serde_json::json!({
            "topic": settings.dead_letter_topic,
            "dry_run": args.dry_run,
            "summary": summary,
            "events": lines,
        }))
    } else {
        let mut text = String::new();
        for line in &lines {
            let (result, detail) = match &line.replayed {
                Replayed::Applied => ("applied", ""),
                Replayed::Duplicate => ("duplicate (applied before)", ""),
                Replayed::Ignored => ("ignored (nothing to do for this group)", ""),
                Replayed::WouldReplay => ("would replay", ""),
                Replayed::Refused(why) => ("REFUSED: ", why.as_str()),
                Replayed::Failed(why) => ("FAILED: ", why.as_str()),
            };
            let _ = writeln!(
                text,
                "{}  (dlq {}/{})  {result}{detail}",
                line.event_id, line.dlq_partition, line.dlq_offset
            );
        }
        let _ = writeln!(text, "{summary}");
        text
    };
    Ok(OperatorReport { output, complete })
}

fn cap(limit: u32) -> usize {
    usize::try_from(limit).unwrap_or(usize::MAX)
}

fn unknown_event(event_id: &str, topic: &str) -> Error {
    Error::Operator(format!("no dead letter of event `{event_id}` in `{topic}`"))
}

fn list_text(topic: &str, letters: &[DeadLetter], matched: usize) -> String {
    let mut text = format!("{matched} dead letters in {topic}");
    if matched > letters.len() {
        let _ = write!(
            text,
            " (first {} shown; narrow with --since or raise --limit)",
            letters.len()
        );
    }
    text.push('\n');
    for letter in letters {
        let _ = writeln!(
            text,
            "{}  {}  room {}  {}  from {}  attempts {}  dead-lettered {}  (dlq {}/{})\n    reason: {}",
            letter.event_id,
            letter.event_type,
            letter.room_id,
            if letter.payload.is_none() {
                "[headers only]"
            } else {
                ""
            },
            letter.source,
            letter.attempts,
            ago(letter.dead_lettered_at_ms),
            letter.dlq_partition,
            letter.dlq_offset,
            letter.reason,
        );
    }
    text
}

fn inspect<S: ConsumerService>(letters: &[DeadLetter], json: bool) -> String {
    let decoded = |letter: &DeadLetter| {
        letter.payload.as_deref().map(|payload| {
            match <S::Message as crate::Decode>::decode(payload) {
                Ok(message) => format!("{message:#?}"),
                Err(error) => format!("does not decode: {error}"),
            }
        })
    };
    if json {
        let letters: Vec<_> = letters
            .iter()
            .map(|letter| {
                serde_json::json!({
                    "dead_letter": letter,
                    "payload_bytes": letter.payload.as_ref().map(Vec::len),
                    "envelope": decoded(letter),
                })
            })
            .collect();
        return to_json(&serde_json::json!({ "dead_letters": letters }));
    }
    let mut text = String::new();
    for letter in letters {
        let _ = writeln!(
            text,
            "dead letter {}/{} of event {} (dead-lettered {}, {} ms)",
            letter.dlq_partition,
            letter.dlq_offset,
            letter.event_id,
            ago(letter.dead_lettered_at_ms),
            letter.dead_lettered_at_ms
        );
        let _ = writeln!(text, "headers:");
        for (key, value) in &letter.headers {
            let _ = writeln!(text, "  {key}: {value}");
        }
        match decoded(letter) {
            Some(envelope) => {
                let _ = writeln!(text, "envelope:\n{envelope}");
            }
            None => {
                let _ = writeln!(text, "envelope: none (headers-only dead letter)");
            }
        }
    }
    text
}

/// How long ago `at_ms` was, for a human.
fn ago(at_ms: i64) -> String {
    let seconds = service_kit::time::now_ms().saturating_sub(at_ms) / 1000;
    match seconds {
        s if s >= 86_400 => format!("{}d ago", s / 86_400),
        s if s >= 3_600 => format!("{}h ago", s / 3_600),
        s if s >= 60 => format!("{}m ago", s / 60),
        s => format!("{s}s ago"),
    }
}

fn to_json(value: &serde_json::Value) -> String {
    let mut text = serde_json::to_string_pretty(value).unwrap_or_else(|error| {
        // Serialising plain strings and numbers does not fail; say so if it did.
        format!("{{\"error\": \"{error}\"}}")
    });
    text.push('\n');
    text
}
