//! The `room_command_timing` line (docs/design.md#command-timing-log),
//! captured as JSON from a real room-service: every write command logs exactly
//! one, whether it is accepted, refused by validation before the pipeline
//! (its code and zero stages) or rejected by the room (its code), and the
//! line has exactly the fields design.md documents.
//!
//! The server answers on its own tasks and threads, so the capturing
//! subscriber is the process's global default, installed once; each test
//! picks its lines out by its own unique room or command id, so the tests
//! stay independent whether they share a process (cargo test) or not
//! (nextest).

mod common;

use std::collections::BTreeSet;
use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use common::*;
use hyapp_api::room::{CommandMeta, JoinRoomRequest, LeaveRoomRequest};
use serde_json::{Map, Value};

/// Every line the process logged, as the JSON the subscriber wrote.
static CAPTURED: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();

/// Appends what the subscriber writes to the shared buffer; the fmt layer
/// writes each event with one `write_all`, so lines never interleave.
struct BufferWriter(Arc<Mutex<Vec<u8>>>);

impl Write for BufferWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        // A test that panicked while holding the lock left whole lines behind.
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Installs the JSON subscriber as the global default (once per process).
fn capture() {
    CAPTURED.get_or_init(|| {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let writer = Arc::clone(&buffer);
        let subscriber = tracing_subscriber::fmt()
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .with_max_level(tracing::Level::INFO)
            .with_writer(move || BufferWriter(Arc::clone(&writer)))
            .finish();
        tracing::subscriber::set_global_default(subscriber)
            .expect("no other global subscriber in this test binary");
        buffer
    });
}

/// The `room_command_timing` lines logged so far whose `field` equals `value`.
fn timing_lines(field: &str, value: &str) -> Vec<Map<String, Value>> {
    let buffer = CAPTURED
        .get()
        .expect("capture() was called")
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    String::from_utf8_lossy(&buffer)
        .lines()
        .map(|line| serde_json::from_str::<Map<String, Value>>(line).expect("JSON log line"))
        .filter(|line| line.get("target").and_then(Value::as_str) == Some("room_command_timing"))
        .filter(|line| line.get(field).and_then(Value::as_str) == Some(value))
        .collect()
}

/// The one line whose `field` equals `value`; panics on none or several.
fn only_line(field: &str, value: &str) -> Map<String, Value> {
    let mut lines = timing_lines(field, value);
    assert_eq!(
        lines.len(),
        1,
        "one timing line with {field}={value}: {lines:?}"
    );
    lines.remove(0)
}

/// The fields docs/design.md#command-timing-log lists: the backquoted names
/// in the first column of its table.
fn documented_fields() -> BTreeSet<String> {
    let design =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/design.md"))
            .expect("read docs/design.md");
    let section = design
        .split("\n## Command timing log\n")
        .nth(1)
        .expect("design.md has a Command timing log section");
    let section = section.split("\n## ").next().unwrap_or(section);
    let fields: BTreeSet<String> = section
        .lines()
        .filter(|line| line.starts_with("| `"))
        .filter_map(|row| row.trim_start_matches("| ").split(" | ").next())
        .flat_map(|cell| cell.split('`').skip(1).step_by(2).map(str::to_owned))
        .collect();
    assert!(fields.len() > 10, "parsed the field table: {fields:?}");
    fields
}

/// A stage's milliseconds; panics unless it is a finite, non-negative number.
fn millis(line: &Map<String, Value>, field: &str) -> f64 {
    let value = line
        .get(field)
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("{field} is a number: {line:?}"));
    assert!(value.is_finite() && value >= 0.0, "{field} = {value}");
    value
}

fn text<'a>(line: &'a Map<String, Value>, field: &str) -> &'a str {
    line.get(field)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("{field} is a string: {line:?}"))
}

fn flag(line: &Map<String, Value>, field: &str) -> bool {
    line.get(field)
        .and_then(Value::as_bool)
        .unwrap_or_else(|| panic!("{field} is a bool: {line:?}"))
}

const STAGES: [&str; 8] = [
    "idempotency_ms",
    "lease_ms",
    "wallet_debit_ms",
    "save_mutation_ms",
    "snapshot_ms",
    "projection_ms",
    "activity_ms",
    "tencent_im_ms",
];

/// Asserts the line has the documented fields and no others (besides the
/// subscriber's own `timestamp`, `level`, `target` and `message`).
fn assert_documented_fields(line: &Map<String, Value>) {
    let logged: BTreeSet<String> = line
        .keys()
        .filter(|key| !["timestamp", "level", "target", "message"].contains(&key.as_str()))
        .cloned()
        .collect();
    assert_eq!(logged, documented_fields(), "logged vs documented fields");
}

/// Asserts a refused command's line: its code and reason, zero stages.
fn assert_refused(line: &Map<String, Value>, command: &str, outcome: &str, reason: &str) {
    assert_documented_fields(line);
    assert_eq!(text(line, "command"), command);
    assert_eq!(text(line, "outcome"), outcome);
    assert_eq!(text(line, "reason"), reason);
    for stage in STAGES {
        assert_eq!(millis(line, stage), 0.0, "{stage} of a refused command");
    }
    assert!(!flag(line, "activity_async_outbox"));
    assert!(!flag(line, "tencent_im_async_outbox"));
    assert!(millis(line, "total_ms") < 1_000.0, "{line:?}");
}

#[tokio::test]
async fn an_accepted_command_logs_one_line_with_every_documented_field() {
    capture();
    let mut harness = Harness::start().await;
    let room = testkit::unique("timing-ok-");
    room_with_members(&mut harness.client, &room, "owner", &["fan"]).await;
    let command_id = testkit::unique("gift-");
    let reply = harness
        .client
        .send_gift(gift(&room, &command_id, "fan", "owner", 2, 10))
        .await
        .expect("gift accepted")
        .into_inner();
    assert!(!reply.replayed);

    let line = only_line("command_id", &command_id);
    assert_documented_fields(&line);
    assert_eq!(text(&line, "command"), "SendGift");
    assert_eq!(text(&line, "room_id"), room);
    assert_eq!(text(&line, "outcome"), "ok");
    assert_eq!(text(&line, "reason"), "");
    assert_eq!(text(&line, "message"), "room_command_timing");
    let total = millis(&line, "total_ms");
    for stage in STAGES {
        // Each stage is part of the command (rounded to the microsecond).
        assert!(
            millis(&line, stage) <= total + 0.001,
            "{stage} <= total: {line:?}"
        );
    }
    // A gift debits the wallet and commits a real transaction.
    assert!(millis(&line, "wallet_debit_ms") > 0.0, "{line:?}");
    assert!(millis(&line, "save_mutation_ms") > 0.0, "{line:?}");
    assert!(millis(&line, "idempotency_ms") > 0.0, "{line:?}");
    assert!(total > 0.0 && total < 60_000.0, "{line:?}");
    // No synchronous activity call exists; IM is disabled in tests.
    assert_eq!(millis(&line, "activity_ms"), 0.0);
    assert_eq!(millis(&line, "tencent_im_ms"), 0.0);
    // The gift's events go to activity and become an IM message.
    assert!(flag(&line, "activity_async_outbox"), "{line:?}");
    assert!(flag(&line, "tencent_im_async_outbox"), "{line:?}");

    // One line per write command: CreateRoom, JoinRoom, SendGift.
    let commands: Vec<String> = timing_lines("room_id", &room)
        .iter()
        .map(|line| text(line, "command").to_owned())
        .collect();
    assert_eq!(commands, ["CreateRoom", "JoinRoom", "SendGift"]);

    // A retry is answered from the log and says so.
    let replay = harness
        .client
        .send_gift(gift(&room, &command_id, "fan", "owner", 2, 10))
        .await
        .expect("gift replayed")
        .into_inner();
    assert!(replay.replayed);
    let outcomes: Vec<String> = timing_lines("command_id", &command_id)
        .iter()
        .map(|line| text(line, "outcome").to_owned())
        .collect();
    assert_eq!(outcomes, ["ok", "replayed"]);
}

#[tokio::test]
async fn a_command_refused_by_validation_logs_its_code_and_zero_stages() {
    capture();
    let mut harness = Harness::start().await;

    // Readable room and command ids, an invalid field.
    let room = testkit::unique("timing-bad-");
    let command_id = testkit::unique("join-");
    let status = harness
        .client
        .join_room(JoinRoomRequest {
            meta: meta(&command_id),
            room_id: room.clone(),
            user_id: String::new(),
        })
        .await
        .expect_err("empty user_id is refused");
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    let line = only_line("command_id", &command_id);
    assert_refused(&line, "JoinRoom", "invalid_argument", "invalid_argument");
    assert_eq!(text(&line, "room_id"), room);

    // An unreadable room id is not logged; the command id still is.
    let command_id = testkit::unique("join-");
    harness
        .client
        .join_room(JoinRoomRequest {
            meta: meta(&command_id),
            room_id: format!("{room} forged=1"),
            user_id: "user-1".into(),
        })
        .await
        .expect_err("a room id with a space is refused");
    let line = only_line("command_id", &command_id);
    assert_refused(&line, "JoinRoom", "invalid_argument", "invalid_argument");
    assert_eq!(text(&line, "room_id"), "");

    // No meta at all: the room id is still logged, the command id is empty.
    let room_without_meta = testkit::unique("timing-nometa-");
    harness
        .client
        .send_gift({
            let mut request = gift(&room_without_meta, "unused", "fan", "owner", 1, 1);
            request.meta = None;
            request
        })
        .await
        .expect_err("missing meta is refused");
    let line = only_line("room_id", &room_without_meta);
    assert_refused(&line, "SendGift", "invalid_argument", "invalid_argument");
    assert_eq!(text(&line, "command_id"), "");

    // The internal OpenTreasure entry point validates and logs the same way.
    let command_id = testkit::unique("treasure-");
    let error = harness
        .rooms
        .open_treasure(&room, "", 1, &command_id)
        .await
        .expect_err("an empty box id is refused");
    assert_eq!(error.code(), room_service::ErrorCode::InvalidArgument);
    let line = only_line("command_id", &command_id);
    assert_refused(
        &line,
        "OpenTreasure",
        "invalid_argument",
        "invalid_argument",
    );
    assert_eq!(text(&line, "room_id"), room);

    // Nothing was written for any of them.
    assert_eq!(harness.count("room_command_log", "room_id", &room).await, 0);
}

#[tokio::test]
async fn a_command_rejected_by_the_room_logs_one_line_with_its_code() {
    capture();
    let mut harness = Harness::start().await;
    let room = testkit::unique("timing-reject-");
    room_with_members(&mut harness.client, &room, "owner", &[]).await;
    let command_id = testkit::unique("leave-");
    let status = harness
        .client
        .leave_room(LeaveRoomRequest {
            meta: Some(CommandMeta {
                command_id: command_id.clone(),
                request_id: String::new(),
                app_code: String::new(),
            }),
            room_id: room.clone(),
            user_id: "stranger".into(),
        })
        .await
        .expect_err("a stranger cannot leave");
    assert_eq!(status.code(), tonic::Code::FailedPrecondition);

    let line = only_line("command_id", &command_id);
    assert_documented_fields(&line);
    assert_eq!(text(&line, "command"), "LeaveRoom");
    assert_eq!(text(&line, "room_id"), room);
    assert_eq!(text(&line, "outcome"), "failed_precondition");
    assert_eq!(text(&line, "reason"), "not_a_member");
    // The room ran the command (and looked the id up in the log to tell a
    // replay from a rejection) but saved nothing.
    assert!(millis(&line, "idempotency_ms") > 0.0, "{line:?}");
    for stage in [
        "wallet_debit_ms",
        "save_mutation_ms",
        "snapshot_ms",
        "projection_ms",
    ] {
        assert_eq!(millis(&line, stage), 0.0, "{stage} of a rejection");
    }
    assert!(!flag(&line, "activity_async_outbox"));
    assert!(!flag(&line, "tencent_im_async_outbox"));
    assert!(millis(&line, "idempotency_ms") <= millis(&line, "total_ms") + 0.001);
}
