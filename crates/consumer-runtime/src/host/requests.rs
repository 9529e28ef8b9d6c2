//! Operator requests the relay's console writes for this group
//! (`consumer_operator_requests`): a background task of every consumer
//! service claims its group's pending requests one at a time and carries each
//! out with the same code as the operator commands — `dead-letters replay`
//! ([`super::replay::replay`], for the one letter at the requested position,
//! with the dedup-retention guard and never `--force`) and `deliveries retry`
//! ([`super::deliveries`], for the requested event) — audited in
//! `consumer_operator_audit` under the request's operator and reason; then it
//! writes the outcome (`done`, `refused`, `failed`) and its detail. A dry run
//! of a replay (`dry_run_replay`) is `dead-letters replay --dry-run` of that
//! letter: the same checks (the payload decodes, its type is known, the
//! dedup-retention guard), nothing handed to the handler, nothing audited
//! (the request row says who asked and why).
//!
//! The claim is one guarded UPDATE (`claimed_by = ''`), so of several
//! instances of the group exactly one runs a request. A request whose
//! instance died mid-run stays claimed and unfinished, shown as running on
//! that instance: it is not run again, since its replay may have applied.
//! Once it has run longer than [`STALLED_AFTER`] an operator may mark it
//! `abandoned` from the console (and ask again after checking); should its
//! instance finish it after all, the real outcome replaces that mark.

use super::{
    ConsumerService, Error, ServiceConfig,
    audit::Accountable,
    dead_letters::{self, Filter},
    deliveries::{RetryBy, Selection},
    replay::{self, Replayed},
};
use crate::ConsumerSettings;
use service_kit::db::{IdText, statement::BoundedPool};
use sqlx::MySqlPool;
use std::{sync::Arc, time::Duration};
use tokio_util::sync::CancellationToken;

/// How often a service looks for its group's pending requests. A constant,
/// not a key: one indexed SELECT a second per instance is negligible, and an
/// operator waiting on the console page wants the request picked up soon.
const POLL_INTERVAL: Duration = Duration::from_secs(1);

const PENDING_SQL: &str = "SELECT id FROM consumer_operator_requests \
     WHERE consumer_group = ? AND outcome = '' AND claimed_by = '' ORDER BY id LIMIT 1";
const CLAIM_SQL: &str = "UPDATE consumer_operator_requests SET claimed_by = ?, claimed_at_ms = ? \
     WHERE id = ? AND claimed_by = '' AND outcome = ''";
const READ_SQL: &str = "SELECT action, event_id, dlq_position, operator, reason \
     FROM consumer_operator_requests WHERE id = ?";
const FINISH_SQL: &str = "UPDATE consumer_operator_requests \
     SET outcome = ?, detail = ?, finished_at_ms = ? WHERE id = ? AND claimed_by = ?";

const PURGE_SQL: &str = "DELETE FROM consumer_operator_requests \
     WHERE consumer_group = ? AND outcome <> '' AND finished_at_ms < ? LIMIT 1000";

/// How long a finished request stays for the console to show (its audit
/// row in `consumer_operator_audit` stays as that table is kept).
const KEEP_FINISHED: Duration = Duration::from_secs(30 * 86_400);
/// Polls between two purges of finished requests (about ten minutes).
const POLLS_PER_PURGE: u32 = 600;

/// How long a claimed request may run before the console offers to mark it
/// abandoned: one letter's replay or one event's retry is a few statements
/// (each bounded by `mysql.statement_timeout`) and one handler call, seconds
/// even when slow; ten minutes unfinished means its instance died.
pub const STALLED_AFTER: Duration = Duration::from_secs(600);

/// How long a request may wait unclaimed before the console says no
/// instance seems to be serving the group: thirty polls.
pub const UNCLAIMED_AFTER: Duration = Duration::from_secs(30);

/// Longest detail kept (a replay's refusal is a few hundred characters).
const MAX_DETAIL_CHARS: usize = 4096;

/// What a console request asks of the group's service: the `action` column
/// of `consumer_operator_requests` (the console writes it, the service reads it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestAction {
    /// `dead-letters replay` of one letter.
    Replay,
    /// `dead-letters replay --dry-run` of one letter.
    DryRunReplay,
    /// `deliveries retry` of one event.
    Retry,
}

impl RequestAction {
    /// Every action.
    pub const ALL: [Self; 3] = [Self::Replay, Self::DryRunReplay, Self::Retry];

    /// The column's value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Replay => "replay_dead_letter",
            Self::DryRunReplay => "dry_run_replay",
            Self::Retry => "retry_delivery",
        }
    }

    /// The action a column's value names.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|action| action.as_str() == text)
    }

    /// How a page names it.
    pub fn label(self) -> &'static str {
        match self {
            Self::Replay => "replay",
            Self::DryRunReplay => "dry run of replay",
            Self::Retry => "retry",
        }
    }

    /// Whether it is about one dead letter (and names its position).
    pub fn reads_a_dead_letter(self) -> bool {
        matches!(self, Self::Replay | Self::DryRunReplay)
    }
}

/// One claimed request.
#[derive(Debug)]
struct Request {
    id: u64,
    action: String,
    event_id: String,
    position: String,
    operator: String,
    reason: String,
}

/// What became of a request: its outcome column and detail.
type Ended = (&'static str, String);

/// This instance, as `claimed_by` names it: host and process id.
fn instance() -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "unknown-host".into());
    let mut name = format!("{host}:{}", std::process::id());
    name.truncate(128);
    name
}

/// Serves the group's requests until `stop`: polls every [`POLL_INTERVAL`],
/// runs what it claimed, and logs (never ends on) a database failure.
pub(super) async fn run<S: ConsumerService>(
    config: Arc<S::Config>,
    settings: ConsumerSettings,
    db: BoundedPool,
    stop: CancellationToken,
) {
    let pool = db.pool().clone();
    let me = instance();
    let mut polls: u32 = 0;
    loop {
        if polls.is_multiple_of(POLLS_PER_PURGE)
            && let Err(error) = purge(&db, &settings.consumer_group).await
        {
            tracing::warn!(%error, "finished operator requests not purged");
        }
        polls = polls.wrapping_add(1);
        match claim(&db, &settings.consumer_group, &me).await {
            Ok(Some(request)) => {
                let ended = carry_out::<S>(&config, &settings, &pool, &request).await;
                tracing::info!(
                    consumer_group = %settings.consumer_group,
                    request = request.id,
                    action = %request.action,
                    event_id = %request.event_id,
                    operator = %request.operator,
                    outcome = ended.0,
                    "operator request carried out"
                );
                if let Err(error) = finish(&db, request.id, &me, ended).await {
                    tracing::warn!(%error, request = request.id, "operator request outcome not written");
                }
                continue;
            }
            Ok(None) => {}
            Err(error) => tracing::warn!(%error, "operator requests not read"),
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(POLL_INTERVAL) => {}
        }
        if stop.is_cancelled() {
            return;
        }
    }
}

/// The group's oldest pending request, claimed by `me`, if there is one
/// (one unit of work under `mysql.statement_timeout`, as are the purge and
/// the finish: a stalled database fails the poll, which is tried again).
async fn claim(db: &BoundedPool, group: &str, me: &str) -> Result<Option<Request>, sqlx::Error> {
    db.run(|connection, _| {
        Box::pin(async move {
            let Some((id,)): Option<(u64,)> = sqlx::query_as(PENDING_SQL)
                .bind(group)
                .fetch_optional(&mut *connection)
                .await?
            else {
                return Ok(None);
            };
            let claimed = sqlx::query(CLAIM_SQL)
                .bind(me)
                .bind(service_kit::time::now_ms())
                .bind(id)
                .execute(&mut *connection)
                .await?
                .rows_affected();
            if claimed != 1 {
                // Another instance took it first.
                return Ok(None);
            }
            let (action, event_id, position, operator, reason): (
                String,
                IdText,
                String,
                String,
                String,
            ) = sqlx::query_as(READ_SQL)
                .bind(id)
                .fetch_one(&mut *connection)
                .await?;
            Ok(Some(Request {
                id,
                action,
                event_id: event_id.into(),
                position,
                operator,
                reason,
            }))
        })
    })
    .await
}

/// Deletes the group's requests finished longer than [`KEEP_FINISHED`] ago
/// (a bounded batch: the table cannot grow without bound).
async fn purge(db: &BoundedPool, group: &str) -> Result<(), sqlx::Error> {
    let keep_ms = i64::try_from(KEEP_FINISHED.as_millis()).unwrap_or(i64::MAX);
    let before = service_kit::time::now_ms().saturating_sub(keep_ms);
    db.run(|connection, _| {
        Box::pin(async move {
            sqlx::query(PURGE_SQL)
                .bind(group)
                .bind(before)
                .execute(&mut *connection)
                .await
                .map(drop)
        })
    })
    .await
}

async fn finish(db: &BoundedPool, id: u64, me: &str, ended: Ended) -> Result<(), sqlx::Error> {
    let detail = service_kit::operator::fit_to_column(&ended.1, MAX_DETAIL_CHARS);
    db.run(|connection, _| {
        Box::pin(async move {
            sqlx::query(FINISH_SQL)
                .bind(ended.0)
                .bind(detail)
                .bind(service_kit::time::now_ms())
                .bind(id)
                .bind(me)
                .execute(&mut *connection)
                .await
                .map(drop)
        })
    })
    .await
}

/// Runs one request as the operator command would, and says what came of it.
async fn carry_out<S: ConsumerService>(
    config: &S::Config,
    settings: &ConsumerSettings,
    pool: &MySqlPool,
    request: &Request,
) -> Ended {
    let Some(action) = RequestAction::parse(&request.action) else {
        return ("refused", format!("unknown action `{}`", request.action));
    };
    if action == RequestAction::DryRunReplay {
        return replay_one::<S>(config, settings, request, None)
            .await
            .unwrap_or_else(ended_by_error);
    }
    let who = match Accountable::new(Some(&request.operator), Some(&request.reason)) {
        Ok(who) => who,
        Err(error) => return ("refused", error.to_string()),
    };
    let result = if action == RequestAction::Retry {
        retry_one::<S>(settings, pool, request, &who).await
    } else {
        replay_one::<S>(config, settings, request, Some(&who)).await
    };
    result.unwrap_or_else(ended_by_error)
}

/// A request's outcome when its command returned an error: an operator
/// refusal (the command's own checks) or a failure.
fn ended_by_error(error: Error) -> Ended {
    match error {
        Error::Operator(why) => ("refused", why),
        other => ("failed", other.to_string()),
    }
}

/// `dead-letters replay` of the one letter at the request's position, or
/// only its checks (`--dry-run`) when there is no one to account for it.
async fn replay_one<S: ConsumerService>(
    config: &S::Config,
    settings: &ConsumerSettings,
    request: &Request,
    who: Option<&Accountable>,
) -> Result<Ended, Error> {
    let position = parse_position(&request.position).ok_or_else(|| {
        Error::Operator(format!(
            "dead-letter position `{}` is not <partition>/<offset>",
            request.position
        ))
    })?;
    let filter = Filter {
        position: Some(position),
        ..Filter::default()
    };
    let found = dead_letters::read::<S::Message>(settings, &filter, 1).await?;
    let Some(letter) = found.letters.into_iter().next() else {
        return Err(Error::Operator(format!(
            "no dead letter at {} in `{}`",
            request.position, settings.dead_letter_topic
        )));
    };
    if letter.event_id != request.event_id {
        return Err(Error::Operator(format!(
            "the dead letter at {} is of event `{}`, not `{}`",
            request.position, letter.event_id, request.event_id
        )));
    }
    let target = format!(
        "event_id={} position={} console request {}",
        request.event_id, request.position, request.id
    );
    let dry_run = who.is_none();
    let lines =
        replay::replay::<S>(config, settings, vec![letter], &target, who, false, dry_run).await?;
    Ok(match lines.into_iter().next().map(|line| line.replayed) {
        Some(Replayed::Applied) => ("done", "applied".into()),
        Some(Replayed::Duplicate) => ("done", "duplicate: applied before, nothing done".into()),
        Some(Replayed::Ignored) => ("done", "ignored: nothing to do for this group".into()),
        Some(Replayed::Refused(why)) => ("refused", why),
        Some(Replayed::Failed(why)) => ("failed", why),
        Some(Replayed::WouldReplay) => (
            "done",
            "dry run: would be handed to the handler; nothing was written".into(),
        ),
        None => ("failed", "nothing was replayed".into()),
    })
}

/// `deliveries retry --event-id` for the request's event.
async fn retry_one<S: ConsumerService>(
    settings: &ConsumerSettings,
    pool: &MySqlPool,
    request: &Request,
    who: &Accountable,
) -> Result<Ended, Error> {
    let Some(table) = S::failed_deliveries() else {
        return Err(Error::Operator(format!(
            "{} owns no delivery table",
            S::Config::SERVICE
        )));
    };
    let target = format!(
        "event_id={} console request {}",
        request.event_id, request.id
    );
    let by = RetryBy {
        who,
        service: S::Config::SERVICE,
        consumer_group: &settings.consumer_group,
        target: &target,
    };
    let selection = Selection::Event(request.event_id.clone());
    let reset = table.retry(pool, &selection, by).await?;
    Ok((
        "done",
        format!(
            "{reset} failed rows of {} set back to pending",
            table.table()
        ),
    ))
}

/// `<partition>/<offset>`, both non-negative.
fn parse_position(text: &str) -> Option<(i32, i64)> {
    let (partition, offset) = text.split_once('/')?;
    let partition: i32 = partition.parse().ok()?;
    let offset: i64 = offset.parse().ok()?;
    (partition >= 0 && offset >= 0).then_some((partition, offset))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_action_reads_back_as_itself() {
        for action in RequestAction::ALL {
            assert_eq!(RequestAction::parse(action.as_str()), Some(action));
        }
        assert_eq!(RequestAction::parse("drop_table"), None);
    }

    #[test]
    fn a_position_is_two_non_negative_integers() {
        assert_eq!(parse_position("2/40"), Some((2, 40)));
        for bad in ["", "2", "2/", "/3", "-1/2", "1/-2", "a/b", "1/2/3"] {
            assert_eq!(parse_position(bad), None, "{bad}");
        }
    }
}
