//! The gateway contract (docs/gateway.md) held to the code: the reason table
//! is what the code sends (`reason_table`); on running instances, refusals
//! carry `ErrorInfo`/`RetryInfo`, also through a forward; every reply names
//! the executing instance's address, and a call sent there is not
//! forwarded; and the three reads are counted with their outcome where they
//! execute.

mod common;
#[path = "gateway_contract/reason_table.rs"]
mod reason_table;

use std::time::Duration;

use common::*;
use hyapp_api::room::room_service_client::RoomServiceClient;
use hyapp_api::room::{GetRoomRequest, HeartbeatRequest, ListRoomsRequest};
use room_service::error::ERROR_DOMAIN;
use room_service::forward::{FORWARDED_BY, SERVED_BY, SERVED_BY_ADDRESS};
use tonic_types::StatusExt;

/// The value of the series `name{labels}` in a `/metrics` text; `None` when
/// no such series is exposed.
fn series_value(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    testkit::metrics::find(text, &selector(name, labels))
}

/// `name{key="value",…}`, as `testkit::metrics` reads a series.
fn selector(name: &str, labels: &[(&str, &str)]) -> String {
    let pairs: Vec<String> = labels
        .iter()
        .map(|(key, value)| format!("{key}=\"{value}\""))
        .collect();
    format!("{name}{{{}}}", pairs.join(","))
}

/// The series `name{labels}` at `http`; fails the test, naming it, when it
/// is missing.
async fn required(http: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    testkit::metrics::value(&metrics_text(http).await, &selector(name, labels))
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
    assert_eq!(node_a.metric_or_zero("room_forwarded_total").await, 0.0);

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
