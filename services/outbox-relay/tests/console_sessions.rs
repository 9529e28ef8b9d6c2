//! Console sessions end when they should, on every replica: a read-only
//! cookie when the read token is rotated, every cookie (copies included)
//! at a logout or `outbox-relay console revoke-sessions`; and a named
//! operator's actions are audited under the name their token proves, not
//! the one a form or header claims. A page reloaded faster than a person
//! can is paced per session.

mod common;

use common::console::*;
use common::operator::{audit_rows, room_with_backed_off_head, run};
use outbox_relay::access::{
    Credentials,
    operators::{self, Operators},
};
use service_kit::{Secret, grpc_tls::ServerTls};

const ALICE: &str = "alice-token-0123456789abcdef0123456789";

#[tokio::test]
async fn a_read_only_session_ends_when_the_read_token_is_rotated() {
    let db = testkit::TestDb::new().await;
    let before = format!(
        "http://{}",
        serve_gated(&db.pool, access(), &ServerTls::default()).await
    );
    let cookie = login(&before, READER).await;
    assert_eq!(get(&before, "/console", &cookie).await.0, 200);
    // A second replica configured with the new read token (same admin token).
    let mut rotated = access();
    rotated.credentials.read_only = Secret::new("rotated-read-token-0123456789abcdef");
    let after = format!(
        "http://{}",
        serve_gated(&db.pool, rotated, &ServerTls::default()).await
    );
    let (status, _) = get(&after, "/console", &cookie).await;
    assert_eq!(status, 303, "the old read-only cookie is no session");
}

#[tokio::test]
async fn logout_and_revoke_sessions_end_every_copy_of_a_cookie() {
    let db = testkit::TestDb::new().await;
    let base = format!(
        "http://{}",
        serve_gated(&db.pool, access(), &ServerTls::default()).await
    );
    let cookie = login(&base, ADMIN).await;
    let copied = cookie.clone();
    let other = login(&base, READER).await;
    let (status, page) = get(&base, "/console", &cookie).await;
    assert_eq!(status, 200);
    let (status, _) = post(
        &base,
        "/console/logout",
        &cookie,
        &[],
        &[("csrf", &csrf_of(&page))],
    )
    .await;
    assert_eq!(status, 303);
    assert_eq!(
        get(&base, "/console", &copied).await.0,
        303,
        "copied cookie"
    );
    assert_eq!(
        get(&base, "/console", &other).await.0,
        303,
        "every session ends"
    );

    let fresh = login(&base, ADMIN).await;
    assert_eq!(get(&base, "/console", &fresh).await.0, 200);
    let output = run(&db, &["console", "revoke-sessions"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(String::from_utf8_lossy(&output.stdout).contains("every console session ended"));
    assert_eq!(
        get(&base, "/console", &fresh).await.0,
        303,
        "revoked by the CLI"
    );
}

#[tokio::test]
async fn a_named_operator_is_audited_under_the_name_their_token_proves() {
    let db = testkit::TestDb::new().await;
    let mut gate = access();
    gate.credentials = Credentials {
        operators: Operators::parse(&operators::hash_line("alice", ALICE).unwrap()).unwrap(),
        ..gate.credentials
    };
    let base = format!(
        "http://{}",
        serve_gated(&db.pool, gate, &ServerTls::default()).await
    );
    room_with_backed_off_head(&db.pool, "room-named", 2).await;
    room_with_backed_off_head(&db.pool, "room-named-http", 2).await;

    // The console: the form says mallory, the session is alice's.
    let cookie = login(&base, ALICE).await;
    let (status, page) = get(&base, "/console/stuck", &cookie).await;
    assert_eq!(status, 200);
    assert!(
        page.contains("as alice") && !page.contains("name=\"operator\""),
        "the forms ask a named operator for no name: {page}"
    );
    let form = [
        ("csrf", csrf_of(&page)),
        ("room_id", "room-named".to_owned()),
        ("operator", "mallory".to_owned()),
        ("reason", "named".to_owned()),
    ];
    let form: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (status, body) = post(&base, "/console/stuck/retry-now", &cookie, &[], &form).await;
    assert_eq!(status, 200, "{body}");

    // /admin: the header says mallory, the bearer token is alice's.
    let response = client()
        .post(format!("{base}/admin/rooms/room-named-http/retry-now"))
        .bearer_auth(ALICE)
        .header("x-operator", "mallory")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);

    let operators: Vec<(String, String)> = audit_rows(&db.pool)
        .await
        .into_iter()
        .map(|(operator, _, room, ..)| (operator, room))
        .collect();
    assert_eq!(
        operators,
        vec![
            ("alice".to_owned(), "room-named".to_owned()),
            ("alice".to_owned(), "room-named-http".to_owned()),
        ]
    );
}

#[test]
fn operator_hash_reads_the_token_from_stdin() {
    use std::io::Write as _;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_outbox-relay"))
        .args(["operator-hash", "--name", "alice"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(child.stdin.take().unwrap(), "{ALICE}").unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let line = String::from_utf8(output.stdout).unwrap();
    let operators = Operators::parse(&line).unwrap();
    assert_eq!(operators.operator_of(ALICE).unwrap().as_str(), "alice");
    assert!(!line.contains(ALICE));
}

#[tokio::test]
async fn a_page_reloaded_in_parallel_is_paced_and_the_excess_refused_with_retry_after() {
    let db = testkit::TestDb::new().await;
    let base = format!(
        "http://{}",
        serve_gated(&db.pool, access(), &ServerTls::default()).await
    );
    let cookie = login(&base, ADMIN).await;
    let other = login(&base, READER).await;
    assert_eq!(get(&base, "/console", &cookie).await.0, 200);
    // Far more reloads at once than a copy books answers for (about 30 in
    // its second): some wait their turn, the rest are refused, none fails.
    let client = client();
    let reloads = (0..200).map(|_| {
        client
            .get(format!("{base}/console"))
            .header("cookie", &cookie)
            .send()
    });
    let mut refused = 0;
    for answer in futures::future::join_all(reloads).await {
        let answer = answer.unwrap();
        match answer.status().as_u16() {
            200 => assert!(answer.text().await.unwrap().contains("csrf")),
            429 => {
                assert_eq!(answer.headers()["retry-after"], "1");
                refused += 1;
            }
            other => panic!("a reload answered {other}"),
        }
    }
    assert!(refused > 0, "200 reloads at once were all answered");
    // Another session's reloads have their own copy and pace.
    assert_eq!(get(&base, "/console", &other).await.0, 200);
}
