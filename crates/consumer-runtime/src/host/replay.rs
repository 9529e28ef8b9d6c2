//! `dead-letters replay`: the chosen dead letters are handed to the group's
//! own handler, built from the service's config in this process, with their
//! original `event_id` — so only this group sees them again and its dedup
//! by `event_id` makes the replay apply at most once
//! (docs/design.md#replaying-dead-letters).
//!
//! Refused per letter, with the reason printed: no payload (a headers-only
//! dead letter), a payload that does not decode or whose type this build does
//! not know, and — unless `--force` — an event older than
//! `consumer.dedup_retention`, whose dedup record may have been purged.

use super::{
    Builder, ConsumerService, Error, ServiceConfig,
    audit::{self, Accountable},
    dead_letters::DeadLetter,
};
use crate::{ConsumerSettings, Decode, Delivery, Handler, Outcome};
use serde::Serialize;
use std::{collections::HashSet, sync::Arc, time::Duration};

/// What became of one dead letter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "result", content = "detail")]
pub enum Replayed {
    /// The handler applied it now.
    Applied,
    /// The group had applied it before (dedup): nothing was done.
    Duplicate,
    /// The handler has nothing to do with it.
    Ignored,
    /// `--dry-run`: it would be handed to the handler.
    WouldReplay,
    /// Not replayed, and why.
    Refused(String),
    /// The handler failed; the dead letter stays for another try.
    Failed(String),
}

/// One line of the replay report.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayLine {
    /// The event.
    pub event_id: String,
    /// Its dead letter's place in the topic.
    pub dlq_partition: i32,
    /// Its offset.
    pub dlq_offset: i64,
    /// What became of it.
    #[serde(flatten)]
    pub replayed: Replayed,
}

/// Why an event older than the dedup horizon is refused.
fn too_old(age_ms: i64, retention: Duration) -> String {
    format!(
        "event is {} old, older than consumer.dedup_retention ({}): this group's dedup record of \
         it (from an earlier application or replay) may have been purged, so replaying could \
         apply its effect twice; pass --force only after checking it was never applied",
        human(age_ms),
        human(i64::try_from(retention.as_millis()).unwrap_or(i64::MAX))
    )
}

/// `ms` as the largest whole unit (`3d`, `5h`, `12m`, `40s`).
fn human(ms: i64) -> String {
    let seconds = ms / 1000;
    match seconds {
        s if s >= 86_400 => format!("{}d", s / 86_400),
        s if s >= 3_600 => format!("{}h", s / 3_600),
        s if s >= 60 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

/// Why `letter` cannot be replayed as `M` now, if it cannot.
pub(super) fn refusal<M: Decode>(
    letter: &DeadLetter,
    retention: Duration,
    force: bool,
    now_ms: i64,
) -> Result<M, String> {
    let Some(payload) = &letter.payload else {
        return Err(match letter.original_bytes {
            Some(bytes) => format!(
                "headers-only dead letter: the {bytes}-byte original was too large to copy; \
                 it is at {} for as long as that topic retains it",
                letter.source
            ),
            None => "dead letter has no payload".to_string(),
        });
    };
    let message =
        M::decode(payload).map_err(|error| format!("payload does not decode: {error}"))?;
    if message.is_unknown() {
        return Err(
            "event type unknown to this build: deploy the consumer that knows it first".into(),
        );
    }
    if letter.event_id != message.event_id() {
        return Err(format!(
            "event_id header `{}` disagrees with the payload's `{}`",
            letter.event_id,
            message.event_id()
        ));
    }
    let retention_ms = i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
    if !force {
        // The earliest any application of the event can have happened is
        // when it occurred; unknown counts as too old.
        let occurred = message.occurred_at_ms();
        if occurred <= 0 {
            return Err(
                "event has no occurred_at_ms, so its age against consumer.dedup_retention \
                        is unknown; pass --force only after checking it was never applied"
                    .into(),
            );
        }
        let age_ms = now_ms.saturating_sub(occurred);
        if age_ms >= retention_ms {
            return Err(too_old(age_ms, retention));
        }
    }
    Ok(message)
}

/// Replays `letters` (each event once, in the order given) through the
/// service's handler, or only checks them with `dry_run`. Writes the audit
/// row first (no row, no replay) and its outcome at the end.
pub(super) async fn replay<S: ConsumerService>(
    config: &S::Config,
    settings: &ConsumerSettings,
    letters: Vec<DeadLetter>,
    target: &str,
    who: Option<&Accountable>,
    force: bool,
    dry_run: bool,
) -> Result<Vec<ReplayLine>, Error> {
    let now_ms = service_kit::time::now_ms();
    let retention = settings.dedup_purge.retention;
    let mut seen = HashSet::new();
    let mut checked = Vec::new();
    for letter in letters {
        if !seen.insert(letter.event_id.clone()) {
            continue;
        }
        let message = refusal::<S::Message>(&letter, retention, force, now_ms);
        checked.push((letter, message));
    }
    let mut lines = Vec::with_capacity(checked.len());
    if dry_run {
        for (letter, message) in checked {
            let replayed = match message {
                Ok(_) => Replayed::WouldReplay,
                Err(reason) => Replayed::Refused(reason),
            };
            lines.push(line(&letter, replayed));
        }
        return Ok(lines);
    }
    let who = who.ok_or_else(|| {
        Error::Operator("--operator and --reason are required unless --dry-run".into())
    })?;
    let db = config.shared().mysql.connect_bounded().await?;
    let pool = db.pool().clone();
    let result = async {
        let action = audit::Action {
            service: S::Config::SERVICE,
            consumer_group: &settings.consumer_group,
            action: "dead-letters replay",
            target,
        };
        let mut connection = pool.acquire().await.map_err(service_kit::Error::from)?;
        let audit_id = audit::record(&mut connection, who, action, "started").await?;
        drop(connection);
        let handler = S::build(
            config,
            &mut Builder::for_operator(db.clone(), settings.consumer_group.clone()),
        )
        .await?;
        for (letter, message) in checked {
            let replayed = match message {
                Err(reason) => Replayed::Refused(reason),
                Ok(message) => run_handler(handler.as_ref(), &letter, message).await,
            };
            tracing::info!(
                consumer_group = %settings.consumer_group,
                event_id = %letter.event_id,
                operator = who.operator(),
                result = ?replayed,
                "dead letter replayed"
            );
            lines.push(line(&letter, replayed));
        }
        let mut connection = pool.acquire().await.map_err(service_kit::Error::from)?;
        audit::finish(&mut connection, audit_id, &summary(&lines)).await?;
        Ok(lines)
    }
    .await;
    pool.close().await;
    result
}

/// Hands one decoded dead letter to the handler as a first delivery from its
/// original partition and offset.
async fn run_handler<M: Decode, H: Handler<M>>(
    handler: &H,
    letter: &DeadLetter,
    message: M,
) -> Replayed {
    let (partition, offset) = letter.source_position().unwrap_or((-1, -1));
    let delivery = Delivery {
        message: Arc::new(message),
        partition,
        offset,
        attempt: 1,
        traceparent: letter.traceparent.clone(),
    };
    match handler.handle_batch(std::slice::from_ref(&delivery)).await {
        Ok(outcomes) => match outcomes.first() {
            Some(Outcome::Applied) => Replayed::Applied,
            Some(Outcome::Duplicate) => Replayed::Duplicate,
            Some(Outcome::Ignored) => Replayed::Ignored,
            Some(Outcome::Deferred) => Replayed::Failed(
                "the handler deferred it (its budget is short); replay again".into(),
            ),
            None => Replayed::Failed("handler returned no outcome".into()),
        },
        Err(crate::BatchError::Whole(error) | crate::BatchError::At { error, .. }) => {
            Replayed::Failed(error.to_string())
        }
    }
}

fn line(letter: &DeadLetter, replayed: Replayed) -> ReplayLine {
    ReplayLine {
        event_id: letter.event_id.clone(),
        dlq_partition: letter.dlq_partition,
        dlq_offset: letter.dlq_offset,
        replayed,
    }
}

/// Counts per result, for the audit row and the last line of the report.
pub(super) fn summary(lines: &[ReplayLine]) -> String {
    let count =
        |wanted: fn(&Replayed) -> bool| lines.iter().filter(|l| wanted(&l.replayed)).count();
    format!(
        "applied {}, duplicate {}, ignored {}, would replay {}, refused {}, failed {}",
        count(|r| *r == Replayed::Applied),
        count(|r| *r == Replayed::Duplicate),
        count(|r| *r == Replayed::Ignored),
        count(|r| *r == Replayed::WouldReplay),
        count(|r| matches!(r, Replayed::Refused(_))),
        count(|r| matches!(r, Replayed::Failed(_))),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use outbox_schema::pb;
    use prost::Message as _;

    fn letter_of(event: &pb::RoomOutboxEvent) -> DeadLetter {
        DeadLetter {
            dlq_partition: 0,
            dlq_offset: 5,
            dead_lettered_at_ms: event.occurred_at_ms,
            event_id: event.event_id.clone(),
            room_id: event.room_id.clone(),
            event_type: event.event_type.clone(),
            source: "t/1/9".into(),
            group: "g".into(),
            attempts: 17,
            reason: "down".into(),
            occurred_at_ms: event.occurred_at_ms,
            decode_error: None,
            original_bytes: None,
            headers: Vec::new(),
            payload: Some(event.encode_to_vec()),
            traceparent: String::new(),
        }
    }

    fn event(occurred_at_ms: i64) -> pb::RoomOutboxEvent {
        let mut event = crate::testing::envelope(
            "5f0c6a52-8a55-4d36-9d7f-3d3c1f1f0a01",
            "room-1",
            1,
            pb::room_outbox_event::Payload::RoomUserJoined(pb::RoomUserJoined {
                user_id: "u".into(),
            }),
        );
        event.occurred_at_ms = occurred_at_ms;
        event
    }

    #[test]
    fn an_event_older_than_the_dedup_retention_needs_force() {
        let day = Duration::from_secs(86_400);
        let now = 10 * 86_400_000;
        let old = letter_of(&event(now - 2 * 86_400_000));
        let error = refusal::<pb::RoomOutboxEvent>(&old, day, false, now).unwrap_err();
        assert!(
            error.contains("2d old") && error.contains("may have been purged"),
            "{error}"
        );
        assert!(refusal::<pb::RoomOutboxEvent>(&old, day, true, now).is_ok());
        let fresh = letter_of(&event(now - 3_600_000));
        assert!(refusal::<pb::RoomOutboxEvent>(&fresh, day, false, now).is_ok());
        let unknown_age = letter_of(&event(0));
        let error = refusal::<pb::RoomOutboxEvent>(&unknown_age, day, false, now).unwrap_err();
        assert!(error.contains("no occurred_at_ms"), "{error}");
    }

    #[test]
    fn letters_without_a_usable_payload_are_refused_with_the_reason() {
        let now = 10 * 86_400_000;
        let day = Duration::from_secs(86_400);
        let mut headers_only = letter_of(&event(now));
        headers_only.payload = None;
        headers_only.original_bytes = Some(2_000_000);
        let error = refusal::<pb::RoomOutboxEvent>(&headers_only, day, true, now).unwrap_err();
        assert!(
            error.contains("2000000-byte original") && error.contains("t/1/9"),
            "{error}"
        );
        let mut garbage = letter_of(&event(now));
        garbage.payload = Some(vec![0xff, 0xff, 0xff]);
        let error = refusal::<pb::RoomOutboxEvent>(&garbage, day, true, now).unwrap_err();
        assert!(error.contains("does not decode"), "{error}");
        let mut forged = letter_of(&event(now));
        forged.event_id = "other".into();
        let error = refusal::<pb::RoomOutboxEvent>(&forged, day, true, now).unwrap_err();
        assert!(error.contains("disagrees"), "{error}");
    }

    #[test]
    fn a_report_line_says_result_and_detail_in_json() {
        let refused = ReplayLine {
            event_id: "e1".into(),
            dlq_partition: 0,
            dlq_offset: 3,
            replayed: Replayed::Refused("too old".into()),
        };
        let json = serde_json::to_value(&refused).unwrap();
        assert_eq!(json["result"], "refused");
        assert_eq!(json["detail"], "too old");
        assert_eq!(json["dlq_offset"], 3);
        let applied = ReplayLine {
            replayed: Replayed::Applied,
            ..refused
        };
        assert_eq!(serde_json::to_value(&applied).unwrap()["result"], "applied");
    }
}
