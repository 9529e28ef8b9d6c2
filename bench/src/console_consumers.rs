//! The console's consumer-group pages on a long dead-letter topic: the
//! notice group's `<group>.dlq` (one partition) filled with `letters` real
//! dead letters through the consumer runtime's own producer, then each page
//! timed as the outbox pages are (`console_http::page_row`) — the groups'
//! overview (counts from the topics' watermarks), the group's page (its
//! first 100 letters) and the inspect view of the newest letter (read by
//! seeking to its position). Neither page should grow with the topic.

use crate::console_http::{console_config, groups, page_row, serve};
use crate::fixtures::BenchEnv;
use crate::relay_scenarios::{create_topic_of, mq_config};
use crate::report::Report;
use consumer_runtime::{
    ConsumerConfig, ConsumerSettings, dead_letter::DeadLetterProducer, testing::consumed_record,
};
use outbox_relay::console::{self, consumers::Sources};
use outbox_schema::{NewOutboxRow, names, pb};
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use std::time::Duration;

/// Dead letters sent at once while filling the topic.
const IN_FLIGHT: usize = 500;

/// Times the consumer pages with `letters` dead letters of the notice group.
pub async fn consumer_pages(
    env: &BenchEnv,
    database_url: &str,
    report: &mut Report,
) -> anyhow::Result<()> {
    let letters: usize = if env.smoke { 200 } else { 50_000 };
    let namespace = format!("bench{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let mq = mq_config(env, &namespace);
    let settings = ConsumerSettings::resolve(
        &mq,
        &ConsumerConfig::default(),
        &mq.room_outbox.topic,
        names::GROUP_NOTICE,
        0,
    )?;
    create_topic_of(&env.bootstrap, &settings.dead_letter_topic, 1).await?;
    fill(&settings, letters).await?;
    let sources = Sources::from_mq(&mq, &groups())?;
    let console = serve(database_url, move |pool| {
        console::router_reading(console_config(&pool), sources)
    })
    .await?;
    let base = &console.base;
    let note = format!("{letters} dead letters in {}", settings.dead_letter_topic);
    let newest = newest_offset(&env.bootstrap, &settings.dead_letter_topic).await?;
    for page in [
        "/console/consumers".to_owned(),
        format!("/console/consumers/group?group={}", names::GROUP_NOTICE),
        format!(
            "/console/consumers/dead-letter?group={}&position=0/{newest}",
            names::GROUP_NOTICE
        ),
    ] {
        report.add(page_row(base, &page, &note).await?);
    }
    Ok(())
}

/// The offset of the newest record of `topic`'s partition 0 (the broker
/// numbers offsets its own way: read, not assumed).
async fn newest_offset(bootstrap: &str, topic: &str) -> anyhow::Result<i64> {
    let (bootstrap, topic) = (bootstrap.to_owned(), topic.to_owned());
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .create()?;
        let (_, high) = consumer.fetch_watermarks(&topic, 0, Duration::from_secs(10))?;
        anyhow::ensure!(high > 0, "{topic} is empty");
        Ok(high - 1)
    })
    .await?
}

/// `letters` kicks dead-lettered by the notice group, [`IN_FLIGHT`] at a time.
async fn fill(settings: &ConsumerSettings, letters: usize) -> anyhow::Result<()> {
    let producer = DeadLetterProducer::new(settings)?;
    let mut sent = 0;
    while sent < letters {
        let batch: Vec<_> = (sent..letters.min(sent + IN_FLIGHT))
            .map(|n| kick(&settings.topic, n))
            .collect();
        let sends = batch
            .iter()
            .map(|record| producer.send(record, "tencent im: down", 4));
        for result in futures::future::join_all(sends).await {
            result?;
        }
        sent += batch.len();
    }
    Ok(())
}

/// Event `n`: a kick as the notice group consumed it from `topic`.
fn kick(topic: &str, n: usize) -> rdkafka::message::OwnedMessage {
    let event_id = format!("bench-dlq-{n:08}");
    let envelope = pb::RoomOutboxEvent {
        event_id: event_id.clone(),
        event_type: "RoomUserKicked".into(),
        app_code: "hyapp".into(),
        room_id: format!("bench-room-{}", n % 100),
        room_event_seq: 1,
        room_version: 1,
        command_id: event_id.clone(),
        occurred_at_ms: service_kit::time::now_ms(),
        payload: Some(pb::room_outbox_event::Payload::RoomUserKicked(
            pb::RoomUserKicked {
                actor_id: "owner".into(),
                target_id: format!("user-{n}"),
                ban_until_ms: 0,
            },
        )),
        ..Default::default()
    };
    let offset = i64::try_from(n).unwrap_or(i64::MAX);
    consumed_record(
        topic,
        (0, offset),
        &envelope.room_id,
        &event_id,
        "RoomUserKicked",
        NewOutboxRow::event(&envelope, 1).payload,
    )
}
