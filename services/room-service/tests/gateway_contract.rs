//! The gateway contract (docs/gateway.md) held to the code: the reason table
//! lists exactly the reasons room-service can give, with the gRPC code and
//! retry advice the code sends (taken from `Reason::ALL` and room-core's
//! `Rejection::ALL_CODES`, not from a list kept here); refusals carry
//! `ErrorInfo`/`RetryInfo`, also through a forward; every reply names the
//! executing instance's address, and a call sent there is not forwarded;
//! and the three reads are counted with their outcome where they execute.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use hyapp_api::room::room_service_client::RoomServiceClient;
use hyapp_api::room::{GetRoomRequest, HeartbeatRequest, ListRoomsRequest};
use room_core::Rejection;
use room_service::Error;
use room_service::error::{ERROR_DOMAIN, Reason, Subject, upper_snake};
use room_service::forward::{FORWARDED_BY, SERVED_BY, SERVED_BY_ADDRESS};
use tonic_types::StatusExt;

// ---- the reason table ----

/// One row of the reason table, or what the code sends for one reason.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Contract {
    /// gRPC code, as `INVALID_ARGUMENT`.
    code: String,
    /// `RetryInfo.retry_delay`; `None`: not retryable.
    retry: Option<Duration>,
}

/// A refusal of each reason room-service decides itself. Exhaustive: a new
/// reason does not compile until it has a sample here.
fn service_sample(reason: Reason) -> Error {
    let room_id = || "r1".to_owned();
    let command_id = || "c1".to_owned();
    match reason {
        Reason::InvalidArgument => Error::InvalidArgument("room_id is empty".into()),
        Reason::CommandIdReused => Error::CommandIdReused {
            command_id: command_id(),
            original: "JoinRoom".into(),
        },
        Reason::GiftCompensated => Error::GiftCompensated {
            command_id: command_id(),
        },
        Reason::GiftRefundFailed => Error::GiftRefundFailed {
            command_id: command_id(),
        },
        Reason::GiftInFlight => Error::GiftInFlight {
            command_id: command_id(),
        },
        Reason::RoomOwnedElsewhere => Error::OwnedElsewhere {
            room_id: room_id(),
            owner: "node-b".into(),
            address: Some("http://10.0.0.2:7101".into()),
            retry_after: None,
        },
        Reason::StaleOwner => Error::StaleOwner { room_id: room_id() },
        Reason::InsufficientBalance => Error::InsufficientBalance {
            user_id: "u".into(),
            amount: 5,
        },
        Reason::WalletRefused => Error::WalletRefused("frozen".into()),
        Reason::WalletUnavailable => Error::WalletUnavailable("down".into()),
        Reason::DatabaseUnavailable => Error::Database("down".into()),
        Reason::RedisUnavailable => Error::Redis("down".into()),
        Reason::Overloaded => Error::Overloaded { room_id: room_id() },
        Reason::TooManyLoadedRooms => Error::TooManyRooms { limit: 10 },
        Reason::ShuttingDown => Error::ShuttingDown,
        Reason::Config => Error::Config("bad".into()),
        Reason::Server => Error::Server("bad".into()),
        Reason::Internal => Error::Internal("bad".into()),
    }
}

/// A rejection with `code`: every field any variant has is given, and serde
/// ignores the ones a variant lacks (a variant with a new field fails here).
fn rule_sample(code: &str) -> Error {
    let json = serde_json::json!({
        "code": code, "user_id": "u", "actor_id": "a", "target_id": "t", "until_ms": 1,
        "seat_index": 1, "seats": 1, "reason": "r", "max_members": 1, "max_admins": 1,
        "max_bans": 1, "max_contributors": 1, "admin": true, "open_at_ms": 1,
    });
    let rejection: Rejection =
        serde_json::from_value(json).unwrap_or_else(|error| panic!("sample of {code}: {error}"));
    Error::Rejected(rejection)
}

/// What the code sends for `error`, read back from the status it becomes.
fn sent(error: Error) -> (String, Contract) {
    let status = error.into_status(Subject {
        room_id: "r1",
        command_id: "c1",
    });
    let reason = status
        .metadata()
        .get("x-error-reason")
        .expect("x-error-reason")
        .to_str()
        .unwrap()
        .to_owned();
    let details = status.get_error_details();
    let info = details
        .error_info()
        .unwrap_or_else(|| panic!("{reason}: no ErrorInfo"));
    assert_eq!(info.reason, upper_snake(&reason), "{reason}");
    assert_eq!(info.domain, ERROR_DOMAIN, "{reason}");
    assert_eq!(info.metadata["room_id"], "r1", "{reason}");
    let contract = Contract {
        code: code_name(status.code()),
        retry: details
            .retry_info()
            .map(|retry| retry.retry_delay.expect("a RetryInfo has its delay")),
    };
    (reason, contract)
}

/// `INVALID_ARGUMENT` for [`tonic::Code::InvalidArgument`].
fn code_name(code: tonic::Code) -> String {
    let words = format!("{code:?}");
    let mut out = String::new();
    for (index, ch) in words.char_indices() {
        if ch.is_ascii_uppercase() && index > 0 {
            out.push('_');
        }
        out.push(ch.to_ascii_uppercase());
    }
    out
}

/// Every reason the code can give, with what it sends.
fn from_the_code() -> BTreeMap<String, Contract> {
    let mut out = BTreeMap::new();
    let samples = Reason::ALL
        .iter()
        .map(|reason| {
            let error = service_sample(*reason);
            assert_eq!(error.service_reason(), Some(*reason));
            error
        })
        .chain(Rejection::ALL_CODES.iter().map(|code| rule_sample(code)));
    for error in samples {
        let (reason, contract) = sent(error);
        // `invalid_argument` is both ours and a rule's: it must mean one thing.
        if let Some(earlier) = out.insert(reason.clone(), contract.clone()) {
            assert_eq!(earlier, contract, "{reason} is sent two ways");
        }
    }
    out
}

/// The table of `text` whose header has a `` `reason` `` column, by reason.
fn from_the_doc(text: &str) -> Result<BTreeMap<String, Contract>, String> {
    let cells = |line: &str| -> Vec<String> {
        let line = line.trim().trim_start_matches('|').trim_end_matches('|');
        line.split('|').map(|cell| cell.trim().to_owned()).collect()
    };
    let lines: Vec<&str> = text.lines().collect();
    let headers: Vec<usize> = (0..lines.len())
        .filter(|&at| lines[at].starts_with('|') && cells(lines[at]).contains(&"`reason`".into()))
        .collect();
    let [header] = headers[..] else {
        return Err(format!(
            "expected one table with a `reason` column, found {}",
            headers.len()
        ));
    };
    let columns = cells(lines[header]);
    let column = |name: &str| {
        columns
            .iter()
            .position(|cell| cell == name)
            .ok_or(format!("no column {name}"))
    };
    let (code_at, reason_at, retry_at) = (column("code")?, column("`reason`")?, column("retry")?);
    let mut table = BTreeMap::new();
    for line in lines[header + 2..]
        .iter()
        .take_while(|line| line.starts_with('|'))
    {
        let row = cells(line);
        let field = |at: usize| row.get(at).cloned().unwrap_or_default();
        let reason = field(reason_at);
        let reason = reason
            .strip_prefix('`')
            .and_then(|rest| rest.strip_suffix('`'))
            .ok_or(format!("reason not in backticks: {line}"))?
            .to_owned();
        let contract = Contract {
            code: field(code_at).trim_matches('`').to_owned(),
            retry: parse_retry(&field(retry_at)).ok_or(format!("unreadable retry: {line}"))?,
        };
        if table.insert(reason.clone(), contract).is_some() {
            return Err(format!("{reason} is listed twice"));
        }
    }
    Ok(table)
}

/// `no` → not retryable; `250 ms…` → after 250 ms.
fn parse_retry(cell: &str) -> Option<Option<Duration>> {
    if cell == "no" {
        return Some(None);
    }
    let (number, rest) = cell.split_once(' ')?;
    rest.starts_with("ms").then(|| {
        number
            .parse()
            .ok()
            .map(|ms| Some(Duration::from_millis(ms)))
    })?
}

/// Every difference between the doc's table and the code.
fn disagreements(
    doc: &BTreeMap<String, Contract>,
    code: &BTreeMap<String, Contract>,
) -> Vec<String> {
    let mut problems = Vec::new();
    for (reason, sent) in code {
        match doc.get(reason) {
            None => problems.push(format!("`{reason}` is sent but not in the table")),
            Some(listed) if listed != sent => problems.push(format!(
                "`{reason}`: the table says {listed:?}, the code sends {sent:?}"
            )),
            Some(_) => {}
        }
    }
    for reason in doc.keys().filter(|reason| !code.contains_key(*reason)) {
        problems.push(format!("`{reason}` is in the table but never sent"));
    }
    problems
}

fn gateway_md() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/gateway.md");
    std::fs::read_to_string(path).expect("docs/gateway.md")
}

#[test]
fn the_reason_table_is_what_the_code_sends() {
    let code = from_the_code();
    assert!(code.len() > Reason::ALL.len(), "rules included: {code:?}");
    let doc = from_the_doc(&gateway_md()).unwrap();
    let problems = disagreements(&doc, &code);
    assert!(
        problems.is_empty(),
        "docs/gateway.md:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn a_missing_extra_or_wrong_row_is_caught() {
    let code = from_the_code();
    let text = gateway_md();
    let drop_row = |reason: &str| -> String {
        text.lines()
            .filter(|line| !line.contains(&format!("| `{reason}` |")))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let problems = disagreements(&from_the_doc(&drop_row("seat_taken")).unwrap(), &code);
    assert_eq!(problems, ["`seat_taken` is sent but not in the table"]);

    let extra = text.replace(
        "| `ABORTED` | `stale_owner` |",
        "| `ABORTED` | `made_up` | 0 ms | same | x |\n| `ABORTED` | `stale_owner` |",
    );
    let problems = disagreements(&from_the_doc(&extra).unwrap(), &code);
    assert_eq!(problems, ["`made_up` is in the table but never sent"]);

    let wrong_retry = text.replace("| `overloaded` | 100 ms |", "| `overloaded` | no |");
    let problems = disagreements(&from_the_doc(&wrong_retry).unwrap(), &code);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].starts_with("`overloaded`"), "{problems:?}");

    let wrong_code = text.replace(
        "| `FAILED_PRECONDITION` | `seat_taken` |",
        "| `ABORTED` | `seat_taken` |",
    );
    assert_eq!(
        disagreements(&from_the_doc(&wrong_code).unwrap(), &code).len(),
        1
    );

    let twice = text.replace(
        "| `ABORTED` | `stale_owner` |",
        "| `ABORTED` | `gift_in_flight` | 500 ms | same | x |\n| `ABORTED` | `stale_owner` |",
    );
    assert!(from_the_doc(&twice).is_err());
    assert_eq!(parse_retry("1000 ms"), Some(Some(Duration::from_secs(1))));
    assert_eq!(parse_retry("soon"), None);
}

// ---- status details, routing hint and reads on running instances ----

/// The value of the series `name{labels}` in a `/metrics` text; `None` when
/// no such series is exposed.
fn series_value(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?;
        let (label_text, value) = match rest.strip_prefix('{') {
            Some(rest) => rest.split_once("} ")?,
            None => ("", rest.strip_prefix(' ')?),
        };
        labels
            .iter()
            .all(|(key, wanted)| {
                label_text
                    .split(',')
                    .any(|pair| pair == format!("{key}=\"{wanted}\""))
            })
            .then(|| value.trim().parse().ok())?
    })
}

async fn metrics_text(http: &str) -> String {
    reqwest::get(format!("{http}/metrics"))
        .await
        .expect("metrics endpoint")
        .text()
        .await
        .expect("metrics text")
}

/// The series `name{labels}` at `http`; fails the test when it is missing.
async fn required(http: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    let text = metrics_text(http).await;
    series_value(&text, name, labels)
        .unwrap_or_else(|| panic!("no series {name}{labels:?} in:\n{text}"))
}

#[test]
fn a_missing_series_is_none_not_zero() {
    let text = "room_reads_total{call=\"GetRoom\",outcome=\"ok\"} 2\nroom_forwarded_total 0\n";
    let get_ok = [("call", "GetRoom"), ("outcome", "ok")];
    assert_eq!(series_value(text, "room_reads_total", &get_ok), Some(2.0));
    assert_eq!(series_value(text, "room_forwarded_total", &[]), Some(0.0));
    let heartbeat = [("call", "Heartbeat"), ("outcome", "ok")];
    assert_eq!(series_value(text, "room_reads_total", &heartbeat), None);
    assert_eq!(series_value(text, "room_read_seconds_count", &[]), None);
}

fn header<T>(response: &tonic::Response<T>, key: &str) -> String {
    response
        .metadata()
        .get(key)
        .unwrap_or_else(|| panic!("{key}"))
        .to_str()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn replies_name_the_holders_address_and_a_call_sent_there_is_not_forwarded() {
    let mut node_a = Harness::start().await;
    let mut node_b = node_a.second_node(|_| {}).await;
    let address_a = format!("http://{}", node_a.grpc_addr);
    let room = testkit::unique("room-");
    room_with_members(&mut node_a.client, &room, "owner", &["alice"]).await;

    // Sent to B, run on A: the reply names A and A's address.
    let mut request = tonic::Request::new(join(&room, "bob"));
    request.set_timeout(Duration::from_secs(10));
    let joined = node_b.client.join_room(request).await.unwrap();
    assert_eq!(header(&joined, SERVED_BY), node_a.node_id);
    assert_eq!(header(&joined, SERVED_BY_ADDRESS), address_a);
    assert_eq!(
        required(&node_b.http, "room_forwarded_total", &[("outcome", "ok")]).await,
        1.0
    );

    // The next calls go straight to that address: served by A, no hop.
    let mut direct = RoomServiceClient::connect(header(&joined, SERVED_BY_ADDRESS))
        .await
        .unwrap();
    let read = direct
        .get_room(GetRoomRequest {
            room_id: room.clone(),
        })
        .await
        .unwrap();
    assert_eq!(header(&read, SERVED_BY), node_a.node_id);
    assert_eq!(header(&read, SERVED_BY_ADDRESS), address_a);
    let carol = direct.join_room(join(&room, "carol")).await.unwrap();
    assert_eq!(header(&carol, SERVED_BY), node_a.node_id);
    assert_eq!(node_b.metric("room_forwarded_total").await, 1.0);
    assert_eq!(node_a.metric("room_forwarded_total").await, 0.0);

    // A room B holds itself is answered with B's own address.
    let other = testkit::unique("room-");
    let created = node_b
        .client
        .create_room(create(&other, "owner"))
        .await
        .unwrap();
    assert_eq!(header(&created, SERVED_BY_ADDRESS), node_b.grpc);

    // A rule's refusal comes back through B with the holder's details.
    let again = join(&room, "alice");
    let command_id = again.meta.as_ref().unwrap().command_id.clone();
    let refused = node_b.client.join_room(again).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
    assert_eq!(
        refused.metadata().get("x-error-reason").unwrap(),
        "already_member"
    );
    let details = refused.get_error_details();
    let info = details.error_info().expect("ErrorInfo through the forward");
    assert_eq!(info.reason, "ALREADY_MEMBER");
    assert_eq!(info.domain, ERROR_DOMAIN);
    assert_eq!(info.metadata["room_id"], room);
    assert_eq!(info.metadata["command_id"], command_id);
    assert!(details.retry_info().is_none());

    // A call that may not be forwarded (already one hop) names the holder
    // and its address, and says when to retry.
    let mut hop = tonic::Request::new(join(&room, "dave"));
    hop.metadata_mut()
        .insert(FORWARDED_BY, "node-elsewhere".parse().unwrap());
    let refused = node_b.client.join_room(hop).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unavailable);
    assert_eq!(
        refused.metadata().get("x-room-owner").unwrap(),
        node_a.node_id.as_str()
    );
    let details = refused.get_error_details();
    let info = details.error_info().expect("ErrorInfo");
    assert_eq!(info.reason, "ROOM_OWNED_ELSEWHERE");
    assert_eq!(info.metadata["holder"], node_a.node_id);
    assert_eq!(info.metadata["holder_address"], address_a);
    assert_eq!(info.metadata["room_id"], room);
    let delay = details.retry_info().expect("RetryInfo").retry_delay;
    assert!(
        delay.is_some_and(|delay| delay <= Duration::from_secs(5)),
        "{delay:?}"
    );

    node_b.stop().await;
    node_a.stop().await;
}

#[tokio::test]
async fn reads_are_counted_with_their_outcome_where_they_execute() {
    let mut node_a = Harness::start().await;
    let room = testkit::unique("room-");
    room_with_members(&mut node_a.client, &room, "owner", &["alice"]).await;
    let http = node_a.http.clone();
    let client = &mut node_a.client;

    client
        .get_room(GetRoomRequest {
            room_id: room.clone(),
        })
        .await
        .unwrap();
    let missing = client
        .get_room(GetRoomRequest {
            room_id: testkit::unique("nowhere-"),
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), tonic::Code::NotFound);
    let beat = |user: &str| HeartbeatRequest {
        room_id: room.clone(),
        user_id: user.into(),
    };
    client.heartbeat(beat("alice")).await.unwrap();
    let stranger = client.heartbeat(beat("stranger")).await.unwrap_err();
    assert_eq!(stranger.code(), tonic::Code::FailedPrecondition);
    client
        .list_rooms(ListRoomsRequest { limit: 5 })
        .await
        .unwrap();
    let too_many = client
        .list_rooms(ListRoomsRequest { limit: 101 })
        .await
        .unwrap_err();
    assert_eq!(too_many.code(), tonic::Code::InvalidArgument);

    for (call, error) in [
        ("GetRoom", "not_found"),
        ("Heartbeat", "failed_precondition"),
        ("ListRooms", "invalid_argument"),
    ] {
        for outcome in ["ok", error] {
            let labels = [("call", call), ("outcome", outcome)];
            assert_eq!(
                required(&http, "room_reads_total", &labels).await,
                1.0,
                "{labels:?}"
            );
        }
        let count = required(&http, "room_read_seconds_count", &[("call", call)]).await;
        assert_eq!(count, 2.0, "{call}");
    }

    // A read B forwards is counted by A, which ran it, and not by B.
    let mut node_b = node_a.second_node(|_| {}).await;
    let forwarded = node_b
        .client
        .get_room(GetRoomRequest {
            room_id: room.clone(),
        })
        .await
        .unwrap();
    assert_eq!(header(&forwarded, SERVED_BY), node_a.node_id);
    let get_ok = [("call", "GetRoom"), ("outcome", "ok")];
    assert_eq!(required(&http, "room_reads_total", &get_ok).await, 2.0);
    let text_b = metrics_text(&node_b.http).await;
    assert_eq!(
        series_value(&text_b, "room_reads_total", &get_ok),
        None,
        "{text_b}"
    );
    assert_eq!(
        required(&node_b.http, "room_forwarded_total", &[("outcome", "ok")]).await,
        1.0
    );

    node_b.stop().await;
    node_a.stop().await;
}
