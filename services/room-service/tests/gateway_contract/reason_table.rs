//! docs/gateway.md's reason table held to the code: it lists exactly the
//! reasons room-service can give, with the gRPC code and retry advice the
//! code sends. The reasons come from the code (`Reason::ALL` and room-core's
//! `Rejection::ALL_CODES`), never from a list kept here, and each is read
//! back from the status it becomes.

use std::collections::BTreeMap;
use std::time::Duration;

use room_core::Rejection;
use room_service::Error;
use room_service::error::{ERROR_DOMAIN, Reason, Subject, upper_snake};
use tonic_types::StatusExt;

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
        Reason::Unauthenticated => Error::Unauthenticated("no assertion".into()),
        Reason::CallerNotAllowed => Error::CallerNotAllowed("intruder".into()),
        Reason::UserMismatch => Error::UserMismatch {
            asserted: "bob".into(),
            acting: "alice".into(),
        },
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
