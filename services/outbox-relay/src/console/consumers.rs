//! The consumer groups' own dead letters and failed deliveries, read-only:
//!
//! | Path | Page |
//! |---|---|
//! | `GET /console/consumers` | each consumer group: its dead-letter count (`<group>.dlq`) and failed-delivery count |
//! | `GET /console/consumers/group?group=` | a group's dead letters (the first [`DEAD_LETTER_CAP`]) and failed deliveries (the oldest [`FAILED_CAP`]) |
//! | `GET /console/consumers/dead-letter?group=&position=` | one dead letter (`<partition>/<offset>` in the dead-letter topic): headers and decoded payload |
//! | `POST /console/consumers/replay`, `POST /console/consumers/dry-run`, `POST /console/consumers/retry` | a request to the group's service to replay a dead letter (or only check it would), or retry an event's failed deliveries ([`requests`]) |
//! | `POST /console/consumers/abandon` | mark a request whose instance died mid-run abandoned ([`abandon`]) |
//!
//! The groups are `outbox_schema::groups::CONSUMERS` (im-bridge's as
//! configured: `ConsoleConfig::groups`). Dead letters are read with the
//! consumers' own reader (`consumer_runtime::host::read_dead_letters`),
//! which assigns the partitions itself under a group id it never commits,
//! so the groups' offsets are never touched; the count is the topic's
//! watermarks. Failed deliveries are read with the delivery tables' own
//! statements (`consumer_runtime::host::DeliveryTableName`), the ones
//! `deliveries list` runs.
//!
//! Replaying and retrying need the group's handler, which runs in the
//! consumer service: each row has a Replay or Retry form whose request the
//! group's service carries out ([`requests`]), and the exact command an
//! operator runs there instead (`view::replay_command`, `view::retry_command`).

mod abandon;
mod requests;
mod view;

use super::Console;
use crate::access::Client;
use axum::{
    Extension, Router,
    extract::{Query, State},
    http::HeaderMap,
    response::Response,
    routing::{get, post},
};
use consumer_runtime::{
    ConsumerConfig, ConsumerSettings,
    host::{self, DeadLetterFilter, DeliveryTableName},
};
use outbox_schema::{groups, names, pb};
use service_kit::mq::MqConfig;

/// Most dead letters a group's page shows (the reader keeps no more).
pub const DEAD_LETTER_CAP: usize = 100;
/// Most failed deliveries a group's page shows, oldest first.
pub const FAILED_CAP: u32 = 100;

/// Where the consumer groups' dead letters and failed deliveries are read.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    groups: Vec<GroupSource>,
}

/// One consumer group.
#[derive(Debug, Clone)]
struct GroupSource {
    /// The service (binary) running it: the CLI commands' name.
    service: &'static str,
    /// The group id as deployed.
    group: String,
    /// Its dead-letter reader's settings; None without a broker.
    settings: Option<ConsumerSettings>,
    /// Its delivery table, if the service has one.
    table: Option<DeliveryTableName>,
}

impl Sources {
    /// The groups of `outbox_schema::groups::CONSUMERS` under the names
    /// `deployed` gives them (same order, as `ConsoleConfig::groups`), read
    /// through `mq` (its client properties and namespace) when it is enabled.
    pub fn from_mq(mq: &MqConfig, deployed: &[String]) -> Result<Self, crate::Error> {
        let mut sources = Vec::with_capacity(groups::CONSUMERS.len());
        for (declared, group) in groups::CONSUMERS.iter().zip(deployed) {
            let settings = if mq.enabled {
                let settings = ConsumerSettings::resolve(
                    mq,
                    &ConsumerConfig::default(),
                    &mq.room_outbox.topic,
                    group,
                    0,
                )
                .map_err(|error| crate::Error::Config(format!("rocketmq: {error}")))?;
                Some(settings)
            } else {
                None
            };
            sources.push(GroupSource {
                service: declared.service,
                group: group.clone(),
                settings,
                table: DeliveryTableName::of_service(declared.service),
            });
        }
        Ok(Self { groups: sources })
    }

    /// The groups without a broker: failed deliveries only.
    pub fn without_broker(deployed: &[String]) -> Self {
        Self::from_mq(&MqConfig::default(), deployed).unwrap_or_default()
    }

    /// The group named `name`, or a 404 naming the known ones.
    fn group(&self, name: Option<&str>) -> Result<&GroupSource, crate::Error> {
        let name = name
            .map(str::trim)
            .filter(|name| !name.is_empty())
            .ok_or_else(|| {
                crate::Error::InvalidInput("group: required (a consumer group id)".into())
            })?;
        self.groups
            .iter()
            .find(|source| source.group == name)
            .ok_or_else(|| {
                let known: Vec<&str> = self.groups.iter().map(|g| g.group.as_str()).collect();
                crate::Error::NotFound(format!(
                    "no consumer group `{name}`; the groups are: {}",
                    known.join(", ")
                ))
            })
    }
}

impl GroupSource {
    /// The dead-letter topic (namespace applied).
    fn dead_letter_topic(&self) -> String {
        self.settings.as_ref().map_or_else(
            || names::dead_letter_topic(&self.group),
            |settings| settings.dead_letter_topic.clone(),
        )
    }

    /// The reader's settings, or why there are none.
    fn reader(&self) -> Result<&ConsumerSettings, crate::Error> {
        self.settings.as_ref().ok_or_else(|| {
            crate::Error::Refused(
                "no broker configured (rocketmq.enabled is false): dead letters cannot be read"
                    .into(),
            )
        })
    }
}

/// The pages' routes, merged into the console's router, behind its gate.
pub(super) fn routes() -> Router<Console> {
    Router::new()
        .route("/console/consumers", get(overview))
        .route("/console/consumers/group", get(group))
        .route("/console/consumers/dead-letter", get(dead_letter))
        .route("/console/consumers/replay", post(requests::replay))
        .route("/console/consumers/dry-run", post(requests::dry_run))
        .route("/console/consumers/retry", post(requests::retry))
        .route("/console/consumers/abandon", post(abandon::abandon))
}

/// The query of the group and letter pages (all optional, so a missing
/// one gets a precise refusal rather than the extractor's).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
struct Target {
    group: Option<String>,
    position: Option<String>,
}

/// One group's dead letters (the topic's watermarks) and failed deliveries.
async fn counts<'a>(source: &'a GroupSource, pool: &sqlx::MySqlPool) -> view::GroupCounts<'a> {
    let letters = match source.reader() {
        Ok(settings) => host::count_dead_letters(settings).await.map_err(broker),
        Err(error) => Err(error),
    };
    let failed = match source.table {
        Some(table) => Some(table.count_failed(pool).await.map_err(broker)),
        None => None,
    };
    view::GroupCounts {
        service: source.service,
        group: &source.group,
        topic: source.dead_letter_topic(),
        letters,
        table: source.table.map(DeliveryTableName::table),
        failed,
    }
}

async fn overview(
    State(console): State<Console>,
    Extension(client): Extension<Client>,
    headers: HeaderMap,
) -> Response {
    let session = match console.session(&headers, client).await {
        Ok(session) => session,
        Err(refusal) => return refusal,
    };
    // Each group's counts are a broker round trip or two: read at once.
    let pool = &console.config.pool;
    let rows = futures::future::join_all(
        console
            .consumers
            .groups
            .iter()
            .map(|source| counts(source, pool)),
    )
    .await;
    let body = view::overview(&rows);
    console.render(&session, "Consumer groups", Ok(body))
}

async fn group(
    State(console): State<Console>,
    Extension(client): Extension<Client>,
    headers: HeaderMap,
    query: Result<Query<Target>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let session = match console.session(&headers, client).await {
        Ok(session) => session,
        Err(refusal) => return refusal,
    };
    let result = async {
        let target = target(query)?;
        let source = console.consumers.group(target.group.as_deref())?;
        let letters = match source.reader() {
            Ok(settings) => read(settings, &DeadLetterFilter::default(), DEAD_LETTER_CAP).await,
            Err(error) => Err(error),
        };
        let failed = match source.table {
            Some(table) => Some(
                table
                    .list_failed(&console.config.pool, 0, FAILED_CAP)
                    .await
                    .map_err(broker)?,
            ),
            None => None,
        };
        let recent = requests::recent(&console.config.pool, &source.group).await;
        let operator = session.operator.as_ref().map(|name| name.as_str());
        let form = (session.role != super::auth::Role::ReadOnly)
            .then_some((session.csrf.as_str(), operator));
        let shown = view::Group {
            service: source.service,
            group: &source.group,
            topic: source.dead_letter_topic(),
            table: source.table.map(DeliveryTableName::table),
            form,
        };
        let requests = requests::table(&recent, &shown);
        Ok(view::group(&shown, letters, failed.as_deref(), requests))
    }
    .await;
    console.render(&session, "Consumer group", result)
}

async fn dead_letter(
    State(console): State<Console>,
    Extension(client): Extension<Client>,
    headers: HeaderMap,
    query: Result<Query<Target>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let session = match console.session(&headers, client).await {
        Ok(session) => session,
        Err(refusal) => return refusal,
    };
    let result = async {
        let target = target(query)?;
        let source = console.consumers.group(target.group.as_deref())?;
        let position = position(target.position.as_deref())?;
        let settings = source.reader()?;
        let filter = DeadLetterFilter {
            position: Some(position),
            ..DeadLetterFilter::default()
        };
        let found = read(settings, &filter, 1).await?;
        let letter = found.letters.first().ok_or_else(|| {
            crate::Error::NotFound(format!(
                "no dead letter at {}/{} in `{}`",
                position.0, position.1, settings.dead_letter_topic
            ))
        })?;
        let decoded = letter.payload.as_deref().map(|payload| {
            match <pb::RoomOutboxEvent as consumer_runtime::Decode>::decode(payload) {
                Ok(message) => format!("{message:#?}"),
                Err(error) => format!("does not decode: {error}"),
            }
        });
        Ok(view::letter(
            source.service,
            &source.group,
            letter,
            decoded.as_deref(),
        ))
    }
    .await;
    console.render(&session, "Consumer dead letter", result)
}

/// The query, or a precise refusal of it.
fn target(
    query: Result<Query<Target>, axum::extract::rejection::QueryRejection>,
) -> Result<Target, crate::Error> {
    query.map(|Query(target)| target).map_err(|rejection| {
        crate::Error::InvalidInput(format!("query: {}", rejection.body_text()))
    })
}

/// A dead letter's place in its topic, `<partition>/<offset>`.
fn position(text: Option<&str>) -> Result<(i32, i64), crate::Error> {
    let text = text.map(str::trim).unwrap_or_default();
    let malformed = || {
        crate::Error::InvalidInput(format!(
            "position `{text}`: expected <partition>/<offset>, two non-negative integers (e.g. 0/42)"
        ))
    };
    let (partition, offset) = text.split_once('/').ok_or_else(malformed)?;
    let partition: i32 = partition.parse().map_err(|_| malformed())?;
    let offset: i64 = offset.parse().map_err(|_| malformed())?;
    if partition < 0 || offset < 0 {
        return Err(malformed());
    }
    Ok((partition, offset))
}

/// The dead letters matching `filter`, at most `cap`, from a topic that may
/// not exist yet (then there are none).
async fn read(
    settings: &ConsumerSettings,
    filter: &DeadLetterFilter,
    cap: usize,
) -> Result<host::DeadLettersFound, crate::Error> {
    let total = host::count_dead_letters(settings).await.map_err(broker)?;
    if total == 0 {
        return Ok(host::DeadLettersFound::default());
    }
    // The first `cap` only: the page costs the same on a topic of any
    // length. Unfiltered, the count from the watermarks is the total.
    let mut found = host::read_first_dead_letters::<pb::RoomOutboxEvent>(settings, filter, cap)
        .await
        .map_err(broker)?;
    if filter.since_ms.is_none() && filter.event_id.is_none() && filter.position.is_none() {
        found.matched = usize::try_from(total).unwrap_or(usize::MAX);
    }
    Ok(found)
}

/// A consumer-runtime failure as the console's error: the database's stays
/// one (503), the rest is the broker's.
fn broker(error: host::Error) -> crate::Error {
    match error {
        host::Error::Service(service_kit::Error::Database(error)) => crate::Error::Database(error),
        other => crate::Error::Mq(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_position_is_two_non_negative_integers() {
        assert_eq!(position(Some("3/42")).unwrap(), (3, 42));
        for bad in ["", "3", "3/", "/4", "a/1", "1/b", "-1/2", "1/-2", "1/2/3"] {
            let error = position(Some(bad)).unwrap_err().to_string();
            assert!(
                error.contains("expected <partition>/<offset>"),
                "{bad}: {error}"
            );
        }
        assert!(position(None).is_err());
    }

    #[test]
    fn an_unknown_group_is_refused_naming_the_known_ones() {
        let deployed: Vec<String> = groups::CONSUMERS
            .iter()
            .map(|group| group.group.to_owned())
            .collect();
        let sources = Sources::without_broker(&deployed);
        let error = sources.group(Some("nope")).unwrap_err();
        assert!(matches!(error, crate::Error::NotFound(_)));
        assert!(error.to_string().contains(groups::NOTICE.group));
        assert!(matches!(
            sources.group(None),
            Err(crate::Error::InvalidInput(_))
        ));
        let notice = sources.group(Some(groups::NOTICE.group)).unwrap();
        assert_eq!(notice.table, Some(DeliveryTableName::NoticeDeliveries));
        assert!(notice.reader().is_err());
    }
}
