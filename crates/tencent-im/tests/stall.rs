//! `tencent_im.request_timeout` against peers that stall
//! (docs/design.md#client-timeouts): a server that accepts and never answers,
//! and one that sends the response head and then stops mid-body. Either
//! call ends in `Error::Timeout`, which is classified transient (retried
//! with backoff by every caller), never in a wait that lasts until TCP
//! gives up.

use std::time::Duration;

use tencent_im::{Client, ClientConfig, CreateGroupRequest, Error, ErrorClass};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// The test's own deadline: a client that hangs fails here. Not a claim
/// about how fast the error comes.
const TEST_DEADLINE: Duration = Duration::from_secs(60);

/// Serves every connection by reading the request, writing `reply` (possibly
/// nothing) and then keeping the connection open without another byte.
async fn stalling_server(reply: &'static [u8]) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = [0u8; 8192];
                let _ = socket.read(&mut request).await;
                let _ = socket.write_all(reply).await;
                while matches!(socket.read(&mut request).await, Ok(read) if read > 0) {}
            });
        }
    });
    format!("http://{address}")
}

async fn ensure_group_against(base_url: String) -> Result<(), Error> {
    let mut config = ClientConfig::new(base_url, 1_400_000_001, "administrator", "secret");
    config.request_timeout = Duration::from_millis(300);
    let client = Client::new(config).expect("valid config");
    let request = CreateGroupRequest::av_chat_room("room-1", "Room 1");
    tokio::time::timeout(TEST_DEADLINE, client.ensure_group(&request))
        .await
        .expect("the call hung on a stalled server")
        .map(|_| ())
}

#[tokio::test]
async fn a_server_that_never_answers_times_out_as_transient() {
    let error = ensure_group_against(stalling_server(b"").await)
        .await
        .expect_err("nothing was answered");
    assert!(matches!(error, Error::Timeout { .. }), "{error}");
    assert_eq!(error.class(), ErrorClass::Transient);
}

#[tokio::test]
async fn a_response_that_stops_mid_body_times_out_as_transient() {
    let head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 200\r\n\r\n{\"ActionStatus\":";
    let error = ensure_group_against(stalling_server(head).await)
        .await
        .expect_err("the body never ended");
    assert!(matches!(error, Error::Timeout { .. }), "{error}");
    assert_eq!(error.class(), ErrorClass::Transient);
}
