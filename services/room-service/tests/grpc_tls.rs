//! room-service's gRPC over TLS, with certificates generated at test time
//! (`testkit::pki`): a client trusting the listener's CA runs commands, one
//! trusting another CA is refused; with mutual TLS a client without a
//! certificate is refused; two TLS instances forward calls to each other
//! (`peer_tls`, advertised `https://` URLs); the wallet is called over TLS.

mod common;

use common::*;
use hyapp_api::room::room_service_client::RoomServiceClient;
use room_service::forward::SERVED_BY;
use room_service::{App, Config, ShutdownReport};
use service_kit::grpc_tls::{ClientTls, ServerTls};
use testkit::pki::TestPki;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

fn path(path: &std::path::Path) -> String {
    path.display().to_string()
}

/// The listener's TLS section; with `mutual`, clients need a certificate.
fn server_tls(pki: &TestPki, mutual: bool) -> ServerTls {
    ServerTls {
        cert_file: path(&pki.server_cert),
        key_file: path(&pki.server_key),
        client_ca_file: if mutual { path(&pki.ca) } else { String::new() },
    }
}

/// Mutual TLS on the listener, with the test client certificate
/// (`hyapp-test-client`) allowed as gateway and as peer: TLS without client
/// certificates is refused (RoomPeer needs a peer identity).
fn secure(config: &mut Config, pki: &TestPki) {
    config.grpc_tls = server_tls(pki, true);
    config.peer_tls = client_tls(pki, &pki.ca, true);
    config.grpc_auth.gateway_identities = vec!["hyapp-test-client".into()];
    config.grpc_auth.peer_identities = vec!["hyapp-test-client".into()];
}

/// A client section trusting `ca`, presenting the test client certificate when `identity`.
fn client_tls(pki: &TestPki, ca: &std::path::Path, identity: bool) -> ClientTls {
    ClientTls {
        ca_file: path(ca),
        cert_file: if identity {
            path(&pki.client_cert)
        } else {
            String::new()
        },
        key_file: if identity {
            path(&pki.client_key)
        } else {
            String::new()
        },
        domain: String::new(),
    }
}

/// One running instance reached at `https://localhost:<port>`.
struct TlsNode {
    url: String,
    node_id: String,
    shutdown: CancellationToken,
    task: JoinHandle<Result<ShutdownReport, room_service::Error>>,
}

impl TlsNode {
    async fn start(config: Config) -> TlsNode {
        let config = config.validate().expect("valid TLS config");
        let app = App::build(config.clone()).await.expect("build app");
        let url = format!("https://localhost:{}", app.grpc_addr().port());
        let shutdown = CancellationToken::new();
        TlsNode {
            url,
            node_id: config.node_id.clone(),
            task: tokio::spawn(app.run(shutdown.clone())),
            shutdown,
        }
    }

    /// A gateway-like client of this node with `tls`.
    fn client(&self, tls: &ClientTls) -> RoomServiceClient<Channel> {
        let endpoint = tls.endpoint("tls", "endpoint", &self.url).unwrap();
        RoomServiceClient::new(endpoint.connect_lazy())
    }

    async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.expect("app task").expect("clean shutdown");
    }
}

async fn plain_wallet() -> fake_wallet::FakeWalletHandle {
    fake_wallet::spawn(fake_wallet::FakeWalletConfig::default())
        .await
        .expect("fake wallet")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_trust_the_listeners_ca_are_served_and_others_refused() {
    let pki = TestPki::generate(&["localhost", "127.0.0.1"]);
    let db = testkit::TestDb::new().await;
    let wallet = plain_wallet().await;
    let mut config = test_config(&db, &wallet);
    secure(&mut config, &pki);
    let node = TlsNode::start(config).await;

    let room = testkit::unique("room-");
    let mut trusted = node.client(&client_tls(&pki, &pki.ca, true));
    room_with_members(&mut trusted, &room, "owner", &["alice"]).await;
    assert!(
        room_state(&mut trusted, &room)
            .await
            .members
            .contains(&"alice".to_owned())
    );

    let mut untrusted = node.client(&client_tls(&pki, &pki.wrong_ca, true));
    let refused = untrusted.join_room(join(&room, "bob")).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused}");
    // Nor does the listener answer plaintext.
    let plain_url = node.url.replace("https://", "http://");
    let mut plaintext = RoomServiceClient::new(
        tonic::transport::Endpoint::from_shared(plain_url)
            .unwrap()
            .connect_lazy(),
    );
    assert!(plaintext.join_room(join(&room, "bob")).await.is_err());
    assert!(
        !room_state(&mut trusted, &room)
            .await
            .members
            .contains(&"bob".to_owned())
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_refuses_clients_without_a_certificate() {
    let pki = TestPki::generate(&["localhost", "127.0.0.1"]);
    let db = testkit::TestDb::new().await;
    let wallet = plain_wallet().await;
    let mut config = test_config(&db, &wallet);
    secure(&mut config, &pki);
    let node = TlsNode::start(config).await;

    let room = testkit::unique("room-");
    let mut with_certificate = node.client(&client_tls(&pki, &pki.ca, true));
    with_certificate
        .create_room(create(&room, "owner"))
        .await
        .expect("a client with a certificate is served");
    let mut without_certificate = node.client(&client_tls(&pki, &pki.ca, false));
    let refused = without_certificate.join_room(join(&room, "bob")).await;
    assert!(
        refused.is_err(),
        "a client without a certificate was served"
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_instances_forward_calls_to_each_other() {
    let pki = TestPki::generate(&["localhost", "127.0.0.1"]);
    let db = testkit::TestDb::new().await;
    let wallet = plain_wallet().await;
    // Mutual TLS, so a forwarded call only gets through with peer_tls's
    // certificate; the advertised URLs are derived: https://127.0.0.1:<port>.
    let tls_config = || {
        let mut config = test_config(&db, &wallet);
        secure(&mut config, &pki);
        config
    };
    let node_a = TlsNode::start(tls_config()).await;
    let node_b = TlsNode::start(tls_config()).await;
    let gateway = client_tls(&pki, &pki.ca, true);
    let room = testkit::unique("room-");
    room_with_members(&mut node_a.client(&gateway), &room, "owner", &["alice"]).await;

    let joined = node_b
        .client(&gateway)
        .join_room(join(&room, "bob"))
        .await
        .expect("forwarded over TLS");
    let served_by = joined.metadata().get(SERVED_BY).unwrap().to_str().unwrap();
    assert_eq!(served_by, node_a.node_id);
    assert_eq!(joined.get_ref().room_version, 3);
    node_b.stop().await;
    node_a.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wallet_is_called_over_tls() {
    let pki = TestPki::generate(&["localhost", "127.0.0.1"]);
    let db = testkit::TestDb::new().await;
    let tls = server_tls(&pki, false).load("wallet").unwrap();
    let wallet = fake_wallet::spawn(fake_wallet::FakeWalletConfig {
        tls,
        ..fake_wallet::FakeWalletConfig::default()
    })
    .await
    .expect("fake wallet with TLS");
    assert!(wallet.endpoint().starts_with("https://"));
    let mut config = test_config(&db, &wallet);
    config.wallet.tls = client_tls(&pki, &pki.ca, false);
    let harness = Harness::start_on(db, wallet, config).await;
    let mut client = harness.client.clone();
    let room = testkit::unique("room-");
    room_with_members(&mut client, &room, "owner", &["alice"]).await;
    let before = harness.wallet.balance("alice");
    client
        .send_gift(gift(
            &room,
            &testkit::unique("gift-"),
            "alice",
            "owner",
            2,
            10,
        ))
        .await
        .expect("gift debited over TLS");
    assert_eq!(harness.wallet.balance("alice"), before - 20);
    harness.stop().await;
}

#[test]
fn inconsistent_tls_settings_are_refused_naming_the_key() {
    let pki = TestPki::generate(&["localhost"]);
    type Mutation<'a> = Box<dyn Fn(&mut Config) + 'a>;
    let cases: Vec<(Mutation<'_>, &str)> = vec![
        (
            Box::new(|c| c.grpc_tls.key_file = String::new()),
            "grpc_tls.key_file",
        ),
        (
            Box::new(|c| c.grpc_tls.cert_file = "/nonexistent/cert.pem".into()),
            "grpc_tls.cert_file",
        ),
        // The other instances would speak plaintext to a TLS listener.
        (
            Box::new(|c| c.advertise_url = "http://10.0.0.7:7101".into()),
            "advertise_url",
        ),
        // Mutual TLS, but forwarded calls would carry no certificate.
        (
            Box::new(|c| c.peer_tls = ClientTls::default()),
            "peer_tls.cert_file",
        ),
        (
            Box::new(|c| c.peer_tls.key_file = String::new()),
            "peer_tls",
        ),
        // A CA for the wallet, but an endpoint that would ignore it.
        (
            Box::new(|c| c.wallet.tls.ca_file = path(&pki.ca)),
            "wallet.tls",
        ),
        (
            Box::new(|c| {
                c.wallet.endpoint = "https://wallet:7601".into();
                c.wallet.tls.ca_file = "/nonexistent/ca.pem".into();
            }),
            "wallet.tls.ca_file",
        ),
    ];
    let valid = || {
        let mut config = Config::default();
        secure(&mut config, &pki);
        config
    };
    valid().validate().expect("the base case is valid");
    for (mutate, key) in cases {
        let mut config = valid();
        mutate(&mut config);
        let error = config.validate().unwrap_err().to_string();
        assert!(error.contains(key), "{error} should name {key}");
    }
    let mut plaintext = Config::default();
    plaintext.advertise_url = "https://10.0.0.7:7101".into();
    let error = plaintext.validate().unwrap_err().to_string();
    assert!(error.contains("advertise_url"), "{error}");
}
