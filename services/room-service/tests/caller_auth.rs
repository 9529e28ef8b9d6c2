//! Who may call room-service, tried as an attacker on the cluster network
//! would (docs/design.md#who-may-call): with mutual TLS a plaintext caller,
//! a certificate of another CA, a certificate of the right CA naming no
//! allowed identity, a gateway calling the peer API and a client expecting
//! another server name are all refused, and nothing they sent is written;
//! with user assertions a gift whose sender is not the assertion's subject,
//! a missing, expired, mis-addressed or forged assertion are refused and
//! nobody's wallet is touched, while a forwarded call still reaches the holder.

mod common;
#[path = "caller_auth/identities.rs"]
mod identities;

use common::*;
use hyapp_api::room::room_peer_client::RoomPeerClient;
use hyapp_api::room::room_service_client::RoomServiceClient;
use hyapp_api::room::{HeartbeatRequest, PeerCommand, peer_command};
use identities::Identities;
use room_service::{App, Config, ShutdownReport};
use testkit::assertions::{AUDIENCE, AssertionSigner as Signer, ISSUER};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

/// A running instance behind mutual TLS or plaintext.
struct Node {
    url: String,
    shutdown: CancellationToken,
    task: JoinHandle<Result<ShutdownReport, room_service::Error>>,
}

impl Node {
    async fn start(config: Config, scheme: &str) -> Node {
        let config = config.validate().expect("valid config");
        let app = App::build(config.clone()).await.expect("build app");
        let url = format!("{scheme}://localhost:{}", app.grpc_addr().port());
        let shutdown = CancellationToken::new();
        Node {
            url,
            task: tokio::spawn(app.run(shutdown.clone())),
            shutdown,
        }
    }

    fn channel(&self, tls: &service_kit::grpc_tls::ClientTls) -> Channel {
        tls.endpoint("tls", "endpoint", &self.url)
            .unwrap()
            .connect_lazy()
    }

    async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.expect("app task").expect("clean shutdown");
    }
}

fn mutual_tls_config(
    db: &testkit::TestDb,
    wallet: &fake_wallet::FakeWalletHandle,
    ids: &Identities,
) -> Config {
    let mut config = test_config(db, wallet);
    config.grpc_tls = ids.server_tls();
    config.peer_tls = ids.client(Some(&ids.room_service), "");
    config.grpc_auth.gateway_identities = vec!["gateway".into()];
    config.grpc_auth.peer_identities = vec!["room-service".into()];
    config
}

fn reason(status: &tonic::Status) -> &str {
    status
        .metadata()
        .get("x-error-reason")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_admits_only_the_named_identities_to_each_service() {
    let ids = Identities::generate();
    let db = testkit::TestDb::new().await;
    let wallet = fake_wallet::spawn(Default::default()).await.unwrap();
    let node = Node::start(mutual_tls_config(&db, &wallet, &ids), "https").await;
    let room = testkit::unique("room-");
    let mut gateway = RoomServiceClient::new(node.channel(&ids.client(Some(&ids.gateway), "")));
    gateway
        .create_room(create(&room, "owner"))
        .await
        .expect("the gateway is served");

    // Each of these joins must be refused and leave no trace.
    let attempt = |channel: Channel| {
        let join = join(&room, "mallory");
        async move {
            let command_id = join.meta.as_ref().unwrap().command_id.clone();
            let refused = RoomServiceClient::new(channel)
                .join_room(join)
                .await
                .unwrap_err();
            (refused, command_id)
        }
    };
    let plaintext = tonic::transport::Endpoint::from_shared(node.url.replace("https", "http"))
        .unwrap()
        .connect_lazy();
    let foreign = node.channel(&ids.client(Some(&ids.foreign_gateway), ""));
    let anonymous = node.channel(&ids.client(None, ""));
    for channel in [plaintext, foreign, anonymous] {
        let (refused, command_id) = attempt(channel).await;
        // Refused by the handshake or the HTTP/2 preface: a transport
        // failure (its code depends on where the connection broke), never
        // an answer of the service, which names a reason.
        assert_eq!(reason(&refused), "", "{refused}");
        assert_eq!(
            count(&db.pool, "room_command_log", "command_id", &command_id).await,
            0
        );
    }
    assert!(
        !room_state(&mut gateway, &room)
            .await
            .members
            .contains(&"mallory".to_owned()),
        "a refused caller joined"
    );
    let (refused, command_id) = attempt(node.channel(&ids.client(Some(&ids.intruder), ""))).await;
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused}");
    assert_eq!(reason(&refused), "caller_not_allowed");
    assert!(
        refused.message().contains("intruder"),
        "{}",
        refused.message()
    );
    assert_eq!(
        count(&db.pool, "room_command_log", "command_id", &command_id).await,
        0
    );

    // The gateway may not use the peer API, whose callers skip the
    // gateway's checks; an instance may.
    let forwarded = PeerCommand {
        request: Some(peer_command::Request::JoinRoom(join(&room, "mallory"))),
        origin_node: "node-x".into(),
    };
    let as_gateway = RoomPeerClient::new(node.channel(&ids.client(Some(&ids.gateway), "")))
        .execute(forwarded.clone())
        .await
        .unwrap_err();
    assert_eq!(
        as_gateway.code(),
        tonic::Code::PermissionDenied,
        "{as_gateway}"
    );
    assert_eq!(reason(&as_gateway), "caller_not_allowed");
    let as_peer = RoomPeerClient::new(node.channel(&ids.client(Some(&ids.room_service), "")))
        .execute(forwarded)
        .await
        .expect("another instance may forward");
    assert_eq!(as_peer.get_ref().room_version, 2);

    // A client that expects another server name refuses this one.
    let misnamed = node.channel(&ids.client(Some(&ids.gateway), "wallet.hyapp.svc"));
    let refused = RoomServiceClient::new(misnamed)
        .get_room(hyapp_api::room::GetRoomRequest {
            room_id: room.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&refused), "", "{refused}");
    node.stop().await;
}

/// Sends `message` with `authorization: Bearer <token>` (none when empty).
fn asserted<T>(message: T, token: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if !token.is_empty() {
        request
            .metadata_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
    }
    request
}

fn with_assertions(config: &mut Config, signer: &Signer) {
    config.grpc_auth.user_assertion.jwks_file = signer.jwks.display().to_string();
    config.grpc_auth.user_assertion.issuer = ISSUER.into();
    config.grpc_auth.user_assertion.audience = AUDIENCE.into();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_assertion_must_name_the_user_the_request_acts_as() {
    let ids = Identities::generate();
    let signer = Signer::generate(&ids.dir, "gateway-1");
    // Someone else's key, under the real key's name.
    let forger_dir = ids.dir.join("forger");
    std::fs::create_dir_all(&forger_dir).unwrap();
    let forger = Signer::generate(&forger_dir, "gateway-1");
    let harness = Harness::start_with(|config| with_assertions(config, &signer)).await;
    let room = testkit::unique("room-");
    let mut client = harness.client.clone();
    let client = &mut client;
    let token = |user: &str| signer.assertion(user, AUDIENCE, 60);
    client
        .create_room(asserted(create(&room, "owner"), &token("owner")))
        .await
        .unwrap();
    client
        .join_room(asserted(join(&room, "alice"), &token("alice")))
        .await
        .unwrap();

    // Bob's assertion cannot spend Alice's money.
    let alice_before = harness.wallet.balance("alice");
    let stolen = gift(&room, &testkit::unique("gift-"), "alice", "owner", 1, 100);
    let stolen_id = stolen.meta.as_ref().unwrap().command_id.clone();
    let refused = client
        .send_gift(asserted(stolen, &token("bob")))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused}");
    assert_eq!(reason(&refused), "user_mismatch");
    assert_eq!(harness.wallet.balance("alice"), alice_before);
    assert_eq!(
        harness
            .count("room_command_log", "command_id", &stolen_id)
            .await,
        0
    );
    assert_eq!(
        harness
            .count("room_gift_saga", "command_id", &stolen_id)
            .await,
        0
    );

    // Missing, expired, for another audience, or signed by a key the JWKS
    // does not hold under that name: UNAUTHENTICATED, nothing written.
    let forged = forger.assertion("alice", AUDIENCE, 60);
    for bad in [
        String::new(),
        signer.assertion("alice", AUDIENCE, -600),
        signer.assertion("alice", "activity-service", 60),
        forged,
        "not.a.jwt".to_owned(),
    ] {
        let attempt = gift(&room, &testkit::unique("gift-"), "alice", "owner", 1, 100);
        let command_id = attempt.meta.as_ref().unwrap().command_id.clone();
        let refused = client.send_gift(asserted(attempt, &bad)).await.unwrap_err();
        assert_eq!(
            refused.code(),
            tonic::Code::Unauthenticated,
            "{bad}: {refused}"
        );
        assert_eq!(reason(&refused), "unauthenticated");
        assert!(
            !refused.message().contains(&bad) || bad.is_empty(),
            "the token is echoed"
        );
        assert_eq!(
            harness
                .count("room_command_log", "command_id", &command_id)
                .await,
            0
        );
    }
    assert_eq!(harness.wallet.balance("alice"), alice_before);

    // Nor may anyone keep another user present.
    let heartbeat = HeartbeatRequest {
        room_id: room.clone(),
        user_id: "alice".into(),
    };
    let refused = client
        .heartbeat(asserted(heartbeat.clone(), &token("bob")))
        .await
        .unwrap_err();
    assert_eq!(reason(&refused), "user_mismatch");
    client
        .heartbeat(asserted(heartbeat, &token("alice")))
        .await
        .unwrap();

    // Alice's own gift goes through, also when another instance takes the
    // call and forwards it to the holder (which is not asked again).
    let second = harness
        .second_node(|config| with_assertions(config, &signer))
        .await;
    let mut via_second = second.client.clone();
    let paid = via_second
        .send_gift(asserted(
            gift(&room, &testkit::unique("gift-"), "alice", "owner", 1, 100),
            &token("alice"),
        ))
        .await
        .expect("alice pays for her own gift");
    assert_eq!(served_by(&paid), harness.node_id);
    assert_eq!(harness.wallet.balance("alice"), alice_before - 100);
    second.stop().await;
    harness.stop().await;
}

#[test]
fn unsafe_or_incomplete_auth_settings_are_refused_at_start_up() {
    let ids = Identities::generate();
    let valid_mtls = || {
        let mut config = Config::default();
        config.grpc_tls = ids.server_tls();
        config.peer_tls = ids.client(Some(&ids.room_service), "");
        config.grpc_auth = room_service::config::GrpcAuthConfig {
            gateway_identities: vec!["gateway".into()],
            peer_identities: vec!["room-service".into()],
            ..Default::default()
        };
        config
    };
    valid_mtls().validate().expect("the base case is valid");
    type Mutation = Box<dyn Fn(&mut Config)>;
    let cases: Vec<(Mutation, &str)> = vec![
        (
            Box::new(|c| c.grpc_auth.peer_identities.clear()),
            "grpc_auth.gateway_identities and grpc_auth.peer_identities",
        ),
        (
            Box::new(|c| c.grpc_tls.client_ca_file.clear()),
            "client_ca_file",
        ),
        (
            Box::new(|c| {
                c.grpc_tls = Default::default();
                c.peer_tls = Default::default();
                c.grpc_auth = Default::default();
                c.grpc_listen = "0.0.0.0:7101".into();
            }),
            "allow_unauthenticated",
        ),
        (
            Box::new(|c| c.grpc_auth.user_assertion.jwks_file = "/x.json".into()),
            "issuer and .audience",
        ),
        (
            Box::new(|c| c.grpc_auth.user_assertion.audience = "room-service".into()),
            "jwks_file is required",
        ),
        (
            Box::new(|c| {
                c.grpc_listen = "0.0.0.0:7101".into();
                c.advertise_url = "https://10.0.0.7:7101".into();
            }),
            "peer_addresses.hosts",
        ),
        (
            Box::new(|c| c.peer_addresses.hosts = vec!["10.0.0.0/40".into()]),
            "peer_addresses.hosts",
        ),
    ];
    for (mutate, key) in cases {
        let mut config = valid_mtls();
        mutate(&mut config);
        let error = config.validate().unwrap_err().to_string();
        assert!(error.contains(key), "{error} should name {key}");
    }
}
