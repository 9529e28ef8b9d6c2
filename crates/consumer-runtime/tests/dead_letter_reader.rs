//! The dead-letter reader against the real broker: a full read counts every
//! match, `read_first` stops at its cap (a page costs the same on a topic
//! of any length), and a position names exactly one letter, found however
//! many precede it and refused (none found) past the end.

use consumer_runtime::{
    dead_letter::DeadLetterProducer,
    host::{DeadLetterFilter, read_dead_letters, read_first_dead_letters},
    testing::{consumed_record, test_settings},
};
use outbox_schema::pb;

const LETTERS: usize = 12;

#[tokio::test]
async fn a_page_stops_at_its_cap_and_a_position_reads_one_letter() {
    let topic = testkit::unique("reader_topic_");
    let group = testkit::unique("reader_group_");
    let settings = test_settings(&testkit::kafka_bootstrap(), &topic, &group, 0).unwrap();
    testkit::create_topic(&settings.dead_letter_topic, 1).await;
    let producer = DeadLetterProducer::new(&settings).unwrap();
    for index in 0..LETTERS {
        let event_id = format!("event-{index:02}");
        let offset = i64::try_from(index).unwrap();
        let record = consumed_record(
            &topic,
            (0, offset),
            "room-1",
            &event_id,
            "RoomUserKicked",
            b"\x00not protobuf".to_vec(),
        );
        producer
            .send(&record, "downstream refused", 3)
            .await
            .unwrap();
    }

    let all = read_dead_letters::<pb::RoomOutboxEvent>(&settings, &DeadLetterFilter::default(), 5)
        .await
        .unwrap();
    assert_eq!(all.matched, LETTERS, "a full read counts every match");
    assert_eq!(all.letters.len(), 5, "and keeps at most its cap");

    let first =
        read_first_dead_letters::<pb::RoomOutboxEvent>(&settings, &DeadLetterFilter::default(), 5)
            .await
            .unwrap();
    assert_eq!(first.letters.len(), 5);
    assert_eq!(first.matched, 5, "read_first stops reading at its cap");
    let ids: Vec<&str> = first.letters.iter().map(|l| l.event_id.as_str()).collect();
    assert_eq!(
        ids,
        ["event-00", "event-01", "event-02", "event-03", "event-04"]
    );

    let ninth = all_letters_position(&settings, 9).await;
    let one = read_first_dead_letters::<pb::RoomOutboxEvent>(
        &settings,
        &DeadLetterFilter {
            position: Some(ninth),
            ..DeadLetterFilter::default()
        },
        1,
    )
    .await
    .unwrap();
    assert_eq!(one.matched, 1);
    assert_eq!(one.letters[0].event_id, "event-09");
    assert_eq!(
        (one.letters[0].dlq_partition, one.letters[0].dlq_offset),
        ninth
    );

    let past_the_end = read_dead_letters::<pb::RoomOutboxEvent>(
        &settings,
        &DeadLetterFilter {
            position: Some((ninth.0, i64::MAX)),
            ..DeadLetterFilter::default()
        },
        1,
    )
    .await
    .unwrap();
    assert_eq!(past_the_end.matched, 0, "no letter past the end");
    assert!(past_the_end.letters.is_empty());
}

/// Where the `index`-th letter sits in the dead-letter topic, from a full read.
async fn all_letters_position(
    settings: &consumer_runtime::ConsumerSettings,
    index: usize,
) -> (i32, i64) {
    let all =
        read_dead_letters::<pb::RoomOutboxEvent>(settings, &DeadLetterFilter::default(), LETTERS)
            .await
            .unwrap();
    let letter = all
        .letters
        .iter()
        .find(|letter| letter.event_id == format!("event-{index:02}"))
        .expect("the letter is on the topic");
    (letter.dlq_partition, letter.dlq_offset)
}
