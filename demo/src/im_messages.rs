//! What the fake Tencent IM's records say, read without I/O: which room
//! events a recorded message represents — the one event of a single message,
//! or every row of a gift batch, a hot room's gifts merged into one message
//! (docs/im-messages.md) — and what the fake counted for one group in
//! `/admin/stats`.
//!
//! A gift batch's rows are read by the column names in its `fields`, never
//! by position; a batch that cannot be read whole represents no event, so
//! its gifts show as missing rather than half-counted. A counter the demo
//! checks that the fake does not report is an error, never a zero.
//! (The chaos checker reads batches the same way; the two crates share no
//! code by design: each links only to the API crates.)

use anyhow::{Context, anyhow};
use serde_json::Value;

/// `type` of a gift batch's `Data`.
const GIFT_BATCH_TYPE: &str = "room_event_batch";
/// `Desc` of a gift batch.
pub const GIFT_BATCH_DESC: &str = "RoomGiftBatch";

/// A gift batch as recorded: its column names and its rows, one per gift.
#[derive(Debug, Clone, PartialEq)]
pub struct GiftBatch {
    /// The column names, in row order.
    pub fields: Vec<String>,
    /// One row per gift, values in the order of `fields`.
    pub rows: Vec<Vec<Value>>,
}

/// One message the fake IM recorded.
#[derive(Debug, Clone)]
pub struct ImMessage {
    /// Recipient (C2C messages).
    pub to_account: Option<String>,
    /// When the fake accepted it.
    pub received_at_ms: i64,
    /// `MsgSeq` the fake gave it (per group).
    pub msg_seq: u64,
    /// Every event it represents: its `event_id`, or each row's of a batch.
    pub event_ids: Vec<String>,
    /// The batch itself, when it is a gift batch.
    pub gift_batch: Option<GiftBatch>,
    /// `event_type` (or `RoomGiftBatch`, or `Desc`) of the message, if any.
    pub kind: String,
    /// Short text for the report.
    pub summary: String,
}

/// Reads the batch in a custom element's parsed `Data`: `None` when it is
/// not a gift batch or cannot be read whole (no `event_id` column, a row
/// that is not a list of text ids at that column).
pub fn gift_batch(data: &Value) -> Option<GiftBatch> {
    if data["type"].as_str() != Some(GIFT_BATCH_TYPE) {
        return None;
    }
    let fields: Vec<String> = data["fields"]
        .as_array()?
        .iter()
        .map(|field| field.as_str().map(str::to_string))
        .collect::<Option<_>>()?;
    let rows: Vec<Vec<Value>> = data["events"]
        .as_array()?
        .iter()
        .map(|row| row.as_array().cloned())
        .collect::<Option<_>>()?;
    let batch = GiftBatch { fields, rows };
    batch.event_ids().map(|_| batch)
}

impl GiftBatch {
    /// Each row's `event_id`, at the column `fields` names; `None` if any
    /// row has no text there.
    pub fn event_ids(&self) -> Option<Vec<String>> {
        let column = self.fields.iter().position(|field| field == "event_id")?;
        self.rows
            .iter()
            .map(|row| row.get(column)?.as_str().map(str::to_string))
            .collect()
    }
}

/// The events a custom element's parsed `Data` represents: each row of a
/// gift batch, or the one `event_id` of any other message (room event,
/// broadcast, notice); none for a batch that cannot be read.
pub fn represented_event_ids(data: &Value) -> Vec<String> {
    if data["type"].as_str() == Some(GIFT_BATCH_TYPE) {
        return gift_batch(data)
            .and_then(|batch| batch.event_ids())
            .unwrap_or_default();
    }
    data["event_id"]
        .as_str()
        .map(|id| vec![id.to_string()])
        .unwrap_or_default()
}

/// Pulls the events, the type and a short text out of a recorded message.
pub fn im_message(message: &Value) -> ImMessage {
    let mut event_ids = Vec::new();
    let mut batch = None;
    let mut kind = String::new();
    let mut summary = String::new();
    for element in message["msg_body"].as_array().into_iter().flatten() {
        let content = &element["MsgContent"];
        if let Some(data) = content["Data"].as_str() {
            let parsed: Value = serde_json::from_str(data).unwrap_or(Value::Null);
            event_ids.extend(represented_event_ids(&parsed));
            if parsed["type"].as_str() == Some(GIFT_BATCH_TYPE) {
                kind = GIFT_BATCH_DESC.to_string();
                batch = gift_batch(&parsed);
            } else if let Some(event_type) =
                parsed["event_type"].as_str().or(parsed["type"].as_str())
            {
                kind = event_type.to_string();
            }
            summary = data.to_string();
        }
        if let Some(text) = content["Text"].as_str() {
            summary = text.to_string();
        }
        if kind.is_empty() {
            kind = content["Desc"].as_str().unwrap_or_default().to_string();
        }
    }
    if summary.chars().count() > 110 {
        summary = summary.chars().take(107).collect::<String>() + "...";
    }
    ImMessage {
        to_account: message["to_account"].as_str().map(str::to_string),
        received_at_ms: message["received_at_ms"].as_i64().unwrap_or(0),
        msg_seq: message["msg_seq"].as_u64().unwrap_or(0),
        event_ids,
        gift_batch: batch,
        kind,
        summary,
    }
}

/// What the fake IM counted for one group since it started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupStats {
    /// Messages recorded.
    pub delivered: u64,
    /// Messages refused by its per-group frequency limit (`MsgFreqCtrl`).
    pub freq_dropped: u64,
    /// The most messages delivered to the group within any one second.
    pub peak_per_second: u64,
}

/// `group`'s counters in a `/admin/stats` answer.
pub fn group_stats(stats: &Value, group: &str) -> anyhow::Result<GroupStats> {
    let groups = stats["groups"]
        .as_object()
        .context("the fake IM's /admin/stats has no `groups` (a fake older than the demo?)")?;
    let counters = groups
        .get(group)
        .ok_or_else(|| anyhow!("the fake IM's /admin/stats has no entry for group {group}"))?;
    let counter = |name: &str| {
        counters[name]
            .as_u64()
            .ok_or_else(|| anyhow!("the fake IM's /admin/stats has no groups.{group}.{name}"))
    };
    Ok(GroupStats {
        delivered: counter("delivered")?,
        freq_dropped: counter("freq_dropped")?,
        peak_per_second: counter("peak_per_second")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A recorded group message whose one custom element carries `data`.
    fn recorded(data: &Value, desc: &str) -> Value {
        json!({
            "group_id": "room_demo",
            "msg_seq": 7,
            "received_at_ms": 1_764_720_000_123_i64,
            "msg_body": [{"MsgType": "TIMCustomElem",
                          "MsgContent": {"Data": data.to_string(), "Desc": desc}}]
        })
    }

    fn batch_data(fields: Value, events: Value) -> Value {
        json!({"type": "room_event_batch", "event_type": "RoomGiftSent", "room_id": "demo",
               "fields": fields, "events": events})
    }

    #[test]
    fn a_single_message_represents_its_event() {
        let data = json!({"type": "room_event", "event_type": "RoomUserKicked", "event_id": "k"});
        let message = im_message(&recorded(&data, "RoomUserKicked"));
        assert_eq!(message.event_ids, ["k"]);
        assert_eq!(message.kind, "RoomUserKicked");
        assert!(message.gift_batch.is_none());
        assert_eq!(message.msg_seq, 7);
    }

    #[test]
    fn a_gift_batch_represents_every_row_in_order() {
        let data = batch_data(
            json!([
                "event_id",
                "room_event_seq",
                "room_version",
                "occurred_at_ms",
                "sender_id",
                "receiver_id",
                "gift_id",
                "count",
                "unit_value",
                "total_value"
            ]),
            json!([
                ["g1", 58, 58, 1, "alice", "bob", "star", 1, 10, 10],
                ["g2", 59, 59, 2, "bob", "alice", "star", 1, 10, 10]
            ]),
        );
        let message = im_message(&recorded(&data, GIFT_BATCH_DESC));
        assert_eq!(message.event_ids, ["g1", "g2"]);
        assert_eq!(message.kind, GIFT_BATCH_DESC);
        assert_eq!(message.gift_batch.map(|batch| batch.rows.len()), Some(2));
    }

    #[test]
    fn a_batch_is_read_by_its_field_names_not_positions() {
        let data = batch_data(
            json!(["room_event_seq", "sender_id", "event_id"]),
            json!([[58, "alice", "g1"], [59, "bob", "g2"]]),
        );
        assert_eq!(represented_event_ids(&data), ["g1", "g2"]);
    }

    #[test]
    fn a_malformed_batch_represents_nothing() {
        let malformed = [
            batch_data(Value::Null, json!([["g1"]])),
            batch_data(json!(["room_event_seq"]), json!([[58]])),
            batch_data(json!(["event_id"]), Value::Null),
            batch_data(json!(["event_id"]), json!([["g1"], null])),
            batch_data(json!(["seq", "event_id"]), json!([["g1"]])),
            batch_data(json!(["event_id"]), json!([[7]])),
        ];
        for data in malformed {
            assert_eq!(represented_event_ids(&data), Vec::<String>::new(), "{data}");
            assert_eq!(gift_batch(&data), None, "{data}");
        }
        let garbled = json!({"msg_body": [{"MsgContent": {"Data": "{not json"}}]});
        assert!(im_message(&garbled).event_ids.is_empty());
    }

    #[test]
    fn group_stats_are_read_and_a_missing_counter_is_an_error() {
        let stats = json!({"groups": {"room_demo":
            {"delivered": 60, "freq_dropped": 0, "oversized": 0, "peak_per_second": 40}}});
        assert_eq!(
            group_stats(&stats, "room_demo").unwrap(),
            GroupStats {
                delivered: 60,
                freq_dropped: 0,
                peak_per_second: 40
            }
        );
        assert!(group_stats(&stats, "room_other").is_err());
        assert!(group_stats(&json!({"messages": 3}), "room_demo").is_err());
        let older = json!({"groups": {"room_demo": {"delivered": 60}}});
        let error = group_stats(&older, "room_demo").unwrap_err().to_string();
        assert!(error.contains("freq_dropped"), "{error}");
    }
}
