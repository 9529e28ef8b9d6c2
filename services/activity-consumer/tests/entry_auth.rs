//! The `activity.v1` direct entry authenticates its callers: with
//! `grpc_auth_token` a call without the token or with a wrong one is refused
//! `UNAUTHENTICATED` and the right one is applied; with mutual TLS
//! (`grpc_tls.client_ca_file`) a client presenting a certificate signed by
//! that CA is served and one without a certificate is refused. Certificates
//! are generated at test time (`testkit::pki`).

use activity_consumer::{App, config::Config};
use consumer_runtime::testing::envelope;
use hyapp_api::activity::{
    ConsumeRoomEventRequest, activity_service_client::ActivityServiceClient,
};
use outbox_schema::pb::{self, room_outbox_event::Payload};
use service_kit::{Secret, grpc_tls::ClientTls, grpc_tls::ServerTls};
use testkit::pki::TestPki;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

/// A running activity-consumer with its database and fake IM.
struct Running {
    _db: testkit::TestDb,
    _fake: fake_tencent_im::FakeImHandle,
    url: String,
    shutdown: CancellationToken,
    task: JoinHandle<()>,
}

impl Running {
    async fn start(tweak: impl FnOnce(&mut Config)) -> Running {
        let db = testkit::TestDb::new().await;
        let fake = fake_tencent_im::spawn(fake_tencent_im::FakeImConfig::new(
            1_400_000_004,
            "entry-key",
            "admin",
        ))
        .await
        .unwrap();
        let topic = testkit::unique("entry_topic_");
        testkit::create_topic(&topic, 1).await;
        let mut config = Config::default();
        config.mysql.url = db.url.clone();
        config.rocketmq.enabled = true;
        config.rocketmq.name_servers = vec![testkit::kafka_bootstrap()];
        config.rocketmq.room_outbox.topic = topic;
        config.consumer.group = testkit::unique("entry_group_");
        config.tencent_im.base_url = fake.base_url();
        config.tencent_im.sdk_app_id = 1_400_000_004;
        config.tencent_im.admin_identifier = "admin".into();
        config.tencent_im.secret_key = Secret::new("entry-key");
        config.activity.big_gift_threshold = 0;
        config.grpc_listen = "127.0.0.1:0".into();
        config.http_listen = "127.0.0.1:0".into();
        tweak(&mut config);
        let scheme = if config.grpc_tls.is_enabled() {
            "https"
        } else {
            "http"
        };
        let app = App::build(config).await.unwrap();
        let grpc = app.server_addr(activity_consumer::GRPC_SERVER).unwrap();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn({
            let shutdown = shutdown.clone();
            async move { app.run(shutdown).await.unwrap() }
        });
        Running {
            _db: db,
            _fake: fake,
            url: format!("{scheme}://localhost:{}", grpc.port()),
            shutdown,
            task,
        }
    }

    async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.unwrap();
    }

    /// A client of the entry, over TLS with `tls` when the entry speaks it.
    fn client(&self, tls: &ClientTls) -> ActivityServiceClient<Channel> {
        let endpoint = tls.endpoint("tls", "endpoint", &self.url).unwrap();
        ActivityServiceClient::new(endpoint.connect_lazy())
    }
}

fn gift() -> ConsumeRoomEventRequest {
    let event = envelope(
        &uuid::Uuid::new_v4().to_string(),
        &testkit::unique("room-"),
        1,
        Payload::RoomGiftSent(pb::RoomGiftSent {
            sender_id: "sender".into(),
            receiver_id: "receiver".into(),
            gift_id: "rose".into(),
            count: 1,
            unit_value: 5,
            total_value: 5,
        }),
    );
    ConsumeRoomEventRequest { event: Some(event) }
}

fn with_authorization(value: Option<&str>) -> tonic::Request<ConsumeRoomEventRequest> {
    let mut request = tonic::Request::new(gift());
    if let Some(value) = value {
        request
            .metadata_mut()
            .insert("authorization", value.parse().unwrap());
    }
    request
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_is_required_when_configured() {
    let pki = TestPki::generate(&["localhost"]);
    // TLS without client certificates: the token is what authenticates.
    let entry = Running::start(|config| {
        config.grpc_listen = "127.0.0.1:0".into();
        config.grpc_auth_token = Secret::new("entry-token-0123456789abcdef012345");
        config.grpc_tls = ServerTls {
            cert_file: pki.server_cert.display().to_string(),
            key_file: pki.server_key.display().to_string(),
            client_ca_file: String::new(),
        };
    })
    .await;
    let mut client = entry.client(&ClientTls {
        ca_file: pki.ca.display().to_string(),
        ..ClientTls::default()
    });
    for refused in [
        None,
        Some("Bearer wrong-token"),
        Some("entry-token-0123456789abcdef012345"),
    ] {
        let status = client
            .consume_room_event(with_authorization(refused))
            .await
            .unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unauthenticated, "{refused:?}");
    }
    let reply = client
        .consume_room_event(with_authorization(Some(
            "Bearer entry-token-0123456789abcdef012345",
        )))
        .await
        .unwrap();
    assert!(!reply.into_inner().duplicate);
    entry.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_admits_only_clients_with_a_certificate() {
    let pki = TestPki::generate(&["localhost"]);
    let entry = Running::start(|config| {
        config.grpc_tls = ServerTls {
            cert_file: pki.server_cert.display().to_string(),
            key_file: pki.server_key.display().to_string(),
            client_ca_file: pki.ca.display().to_string(),
        };
    })
    .await;
    let with_certificate = ClientTls {
        ca_file: pki.ca.display().to_string(),
        cert_file: pki.client_cert.display().to_string(),
        key_file: pki.client_key.display().to_string(),
        domain: String::new(),
    };
    let reply = entry
        .client(&with_certificate)
        .consume_room_event(gift())
        .await
        .unwrap();
    assert!(!reply.into_inner().duplicate);

    let without_certificate = ClientTls {
        cert_file: String::new(),
        key_file: String::new(),
        ..with_certificate
    };
    let refused = entry
        .client(&without_certificate)
        .consume_room_event(gift())
        .await;
    assert!(
        refused.is_err(),
        "a client without a certificate was served"
    );
    entry.stop().await;
}
