//! What the fake Tencent IM's records say, read without I/O: the events a
//! recorded message represents — the one event of a single message, or each
//! row of a gift batch, a hot room's gifts merged into one message (the two
//! shapes are in docs/im-messages.md) — and the fake's refusals by its
//! per-group frequency limit from `/admin/stats`.
//!
//! A batch's rows are read by the column names in its `fields`, never by
//! position. A counter the checker relies on that the fake does not report
//! is an error of the observation, never a zero: a fake older than the
//! checker must not pass the rules that read it.

use serde_json::Value;
use std::collections::BTreeMap;

/// One message the fake IM accepted (duplicates by `Random` are not recorded).
#[derive(Debug, Clone)]
pub struct ImRecord {
    /// Group messages.
    pub group_id: Option<String>,
    /// One-to-one messages.
    pub to_account: Option<String>,
    /// Every event the message represents, in its order: the `event_id` of a
    /// single message, each row's of a gift batch; none when its custom
    /// element names no event or cannot be read.
    pub event_ids: Vec<String>,
    /// A gift batch (`"type": "room_event_batch"`), not a single message.
    pub gift_batch: bool,
    /// When the fake accepted it, unix ms (the fake's wall clock).
    pub received_at_ms: i64,
}

/// A recorded message: its target, when the fake took it and the events its
/// custom elements represent.
pub(crate) fn im_record(message: &Value) -> anyhow::Result<ImRecord> {
    let received_at_ms = message["received_at_ms"]
        .as_i64()
        .ok_or_else(|| anyhow::anyhow!("a fake IM message has no received_at_ms: {message}"))?;
    let data: Vec<Value> = message["msg_body"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|element| serde_json::from_str(element["MsgContent"]["Data"].as_str()?).ok())
        .collect();
    Ok(ImRecord {
        group_id: message["group_id"].as_str().map(str::to_string),
        to_account: message["to_account"].as_str().map(str::to_string),
        event_ids: data.iter().flat_map(represented_event_ids).collect(),
        gift_batch: data.iter().any(is_gift_batch),
        received_at_ms,
    })
}

/// `type` of a gift batch's data (docs/im-messages.md).
const GIFT_BATCH_TYPE: &str = "room_event_batch";

fn is_gift_batch(data: &Value) -> bool {
    data["type"].as_str() == Some(GIFT_BATCH_TYPE)
}

/// The events a custom element's parsed `Data` represents: each row of a gift
/// batch, or the one `event_id` of any other message (room event, broadcast,
/// notice). A batch that cannot be read whole represents nothing, so its
/// gifts show as missing rather than half-counted.
fn represented_event_ids(data: &Value) -> Vec<String> {
    if is_gift_batch(data) {
        return gift_batch_event_ids(data).unwrap_or_default();
    }
    data["event_id"]
        .as_str()
        .map(|event_id| vec![event_id.to_string()])
        .unwrap_or_default()
}

/// Each row's event id, at the column `fields` names `event_id` (not a fixed
/// index: columns may be added or reordered); `None` when the batch has no
/// such column or a row has no text there.
fn gift_batch_event_ids(data: &Value) -> Option<Vec<String>> {
    let column = data["fields"]
        .as_array()?
        .iter()
        .position(|field| field.as_str() == Some("event_id"))?;
    data["events"]
        .as_array()?
        .iter()
        .map(|row| row.get(column)?.as_str().map(str::to_string))
        .collect()
}

/// The fake's refusals by its per-group frequency limit: the total and the
/// groups that had any. A missing counter is an error: read as 0 it would
/// pass the rate rule on a fake that does not count.
pub(crate) fn freq_drops(stats: &Value) -> anyhow::Result<(u64, BTreeMap<String, u64>)> {
    let total = stats["freq_dropped"].as_u64().ok_or_else(|| {
        anyhow::anyhow!(
            "the fake IM's /admin/stats has no freq_dropped (a fake older than the checker?)"
        )
    })?;
    let groups = stats["groups"].as_object().ok_or_else(|| {
        anyhow::anyhow!("the fake IM's /admin/stats has no groups (a fake older than the checker?)")
    })?;
    let mut by_group = BTreeMap::new();
    for (group, counters) in groups {
        let dropped = counters["freq_dropped"].as_u64().ok_or_else(|| {
            anyhow::anyhow!("the fake IM's /admin/stats has no groups.{group}.freq_dropped")
        })?;
        if dropped > 0 {
            by_group.insert(group.clone(), dropped);
        }
    }
    Ok((total, by_group))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A recorded message whose one custom element carries `data`.
    fn recorded(group: &str, data: &Value) -> Value {
        serde_json::json!({
            "group_id": group,
            "received_at_ms": 1_764_720_000_123_i64,
            "msg_body": [{"MsgType": "TIMCustomElem", "MsgContent": {"Data": data.to_string()}}]
        })
    }

    fn ids(record: &ImRecord) -> Vec<&str> {
        record.event_ids.iter().map(String::as_str).collect()
    }

    #[test]
    fn a_single_message_represents_its_event() {
        let data = serde_json::json!({"type": "room_event", "event_id": "e1", "event_type": "RoomUserKicked"});
        let record = im_record(&recorded("room_r1", &data)).unwrap();
        assert_eq!(ids(&record), ["e1"]);
        assert!(!record.gift_batch);
        assert_eq!(record.group_id.as_deref(), Some("room_r1"));
        assert_eq!(record.received_at_ms, 1_764_720_000_123);
        assert!(record.to_account.is_none());
    }

    #[test]
    fn a_gift_batch_represents_every_row_in_order() {
        let data = serde_json::json!({
            "type": "room_event_batch", "event_type": "RoomGiftSent", "room_id": "r1",
            "fields": ["event_id", "room_event_seq", "room_version", "occurred_at_ms",
                       "sender_id", "receiver_id", "gift_id", "count", "unit_value", "total_value"],
            "events": [["g1", 58, 58, 1, "fan-1", "host", "rocket", 1, 100, 100],
                       ["g2", 59, 59, 2, "fan-2", "host", "rose", 10, 1, 10]]
        });
        let record = im_record(&recorded("room_r1", &data)).unwrap();
        assert_eq!(ids(&record), ["g1", "g2"]);
        assert!(record.gift_batch);
    }

    #[test]
    fn a_batch_is_read_by_its_field_names_not_positions() {
        let data = serde_json::json!({
            "type": "room_event_batch",
            "fields": ["room_event_seq", "sender_id", "event_id"],
            "events": [[58, "fan-1", "g1"], [59, "fan-2", "g2"]]
        });
        assert_eq!(represented_event_ids(&data), ["g1", "g2"]);
    }

    #[test]
    fn a_malformed_batch_represents_nothing() {
        let batch = |fields: Value, events: Value| serde_json::json!({"type": "room_event_batch", "fields": fields, "events": events});
        let malformed = [
            batch(Value::Null, serde_json::json!([["g1"]])),
            batch(
                serde_json::json!(["room_event_seq"]),
                serde_json::json!([[58]]),
            ),
            batch(serde_json::json!(["event_id"]), Value::Null),
            batch(
                serde_json::json!(["event_id"]),
                serde_json::json!([["g1"], null]),
            ),
            batch(
                serde_json::json!(["seq", "event_id"]),
                serde_json::json!([["g1"]]),
            ),
            batch(serde_json::json!(["event_id"]), serde_json::json!([[7]])),
        ];
        for data in malformed {
            assert_eq!(represented_event_ids(&data), Vec::<String>::new(), "{data}");
        }
        let record = im_record(&serde_json::json!({
            "group_id": "room_r1",
            "received_at_ms": 5,
            "msg_body": [{"MsgType": "TIMCustomElem", "MsgContent": {"Data": "{not json"}}]
        }))
        .unwrap();
        assert!(record.event_ids.is_empty());
    }

    #[test]
    fn a_message_without_its_receipt_time_is_an_error() {
        let mut message = recorded("room_r1", &serde_json::json!({"event_id": "e1"}));
        message["received_at_ms"] = Value::Null;
        assert!(im_record(&message).is_err());
    }

    #[test]
    fn frequency_refusals_are_read_per_group() {
        let stats = serde_json::json!({
            "freq_dropped": 3,
            "groups": {
                "room_r1": {"delivered": 40, "freq_dropped": 3, "oversized": 0, "peak_per_second": 40},
                "room_r2": {"delivered": 2, "freq_dropped": 0, "oversized": 0, "peak_per_second": 1}
            }
        });
        let (total, by_group) = freq_drops(&stats).unwrap();
        assert_eq!(total, 3);
        assert_eq!(by_group, BTreeMap::from([("room_r1".to_string(), 3)]));
    }

    #[test]
    fn missing_frequency_counters_are_errors_not_zero() {
        let missing = [
            serde_json::json!({"groups": {}}),
            serde_json::json!({"freq_dropped": 0}),
            serde_json::json!({"freq_dropped": 0, "groups": {"room_r1": {"delivered": 1}}}),
        ];
        for stats in missing {
            assert!(freq_drops(&stats).is_err(), "{stats}");
        }
    }
}
