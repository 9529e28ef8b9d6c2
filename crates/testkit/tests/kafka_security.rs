//! The `rocketmq` security settings against a real broker: TLS with the
//! broker's name verified, mutual TLS, SCRAM-SHA-256/512 — each
//! through the client properties every producer and consumer is built from
//! (`MqConfig::client_properties`), each with the case that must be refused.
//! The broker is Tansu; TLS is terminated in front of it
//! (`testkit::secure_broker`), because Tansu 0.6 does not serve TLS itself.
//!
//! What Tansu 0.6 cannot show is covered by the property mapping's unit
//! tests (`service_kit::mq`) only: PLAIN (Tansu drops librdkafka's PLAIN
//! handshake, and would accept any password anyway) and SASL without TLS
//! (`sasl_plaintext`: librdkafka's sessions to Tansu do not complete, while
//! the same SCRAM credentials succeed over TLS).

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::producer::{FutureProducer, FutureRecord, ProducerContext};
use rdkafka::{ClientConfig, Message};
use service_kit::Secret;
use service_kit::mq::MqConfig;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use testkit::pki::TestPki;
use testkit::secure_broker::{Scram, SecureBroker, Security};

/// How long a client may take to get (or fail to get) broker metadata. It
/// bounds a wait; the assertions are on what the client reports.
const CONNECT: Duration = Duration::from_secs(10);

/// Records what librdkafka reports — its log lines (where TLS handshake and
/// SASL failures are described; they arrive on librdkafka's own threads)
/// and errors — so a refusal is asserted by its reason.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<String>>>);

impl ClientContext for Recorder {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        if (level as i32) <= (RDKafkaLogLevel::Warning as i32) {
            self.0
                .lock()
                .unwrap()
                .push(format!("{facility}: {message}"));
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        self.0.lock().unwrap().push(format!("{error}: {reason}"));
    }
}
impl ConsumerContext for Recorder {}
impl ProducerContext for Recorder {
    type DeliveryOpaque = ();
    fn delivery(&self, _: &rdkafka::message::DeliveryResult<'_>, _: ()) {}
}

impl Recorder {
    fn errors(&self) -> String {
        self.0.lock().unwrap().join("\n")
    }
}

fn mq(broker: &SecureBroker, protocol: &str) -> MqConfig {
    MqConfig {
        name_servers: vec![broker.bootstrap.clone()],
        security_protocol: protocol.into(),
        ..MqConfig::default()
    }
}

fn client_config(mq: &MqConfig) -> ClientConfig {
    let mut config = ClientConfig::new();
    for (key, value) in mq.client_properties().expect("settings are valid") {
        config.set(key, value);
    }
    config
}

/// Whether a client with these settings gets the cluster's metadata, and
/// what it reported on the way.
fn connects(mq: &MqConfig) -> (bool, String) {
    let recorder = Recorder::default();
    let consumer: BaseConsumer<Recorder> = client_config(mq)
        .set("group.id", "security-probe")
        .create_with_context(recorder.clone())
        .expect("client");
    let connected = consumer.fetch_metadata(None, CONNECT).is_ok();
    if !connected {
        // Errors are delivered through the client's queue: serve it until
        // the reason has arrived (or the wait is over).
        let deadline = Instant::now() + CONNECT;
        while recorder.errors().is_empty() && Instant::now() < deadline {
            let _ = consumer.poll(Duration::from_millis(100));
        }
    }
    (connected, recorder.errors())
}

/// Creates a topic, produces one record and consumes it back, all with
/// these settings: the whole path a relay and a consumer use.
async fn round_trip(mq: &MqConfig) {
    let topic = testkit::unique("secure");
    let recorder = Recorder::default();
    let admin: AdminClient<Recorder> = client_config(mq)
        .create_with_context(recorder.clone())
        .expect("admin");
    let created = admin
        .create_topics(
            [&NewTopic::new(&topic, 1, TopicReplication::Fixed(1))],
            &AdminOptions::new().operation_timeout(Some(CONNECT)),
        )
        .await
        .unwrap_or_else(|error| panic!("create_topics: {error}; {}", recorder.errors()));
    assert!(created.iter().all(Result::is_ok), "{created:?}");

    let producer: FutureProducer<Recorder> = client_config(mq)
        .create_with_context(Recorder::default())
        .expect("producer");
    producer
        .send(
            FutureRecord::to(&topic)
                .key("room-1")
                .payload("over the wire"),
            CONNECT,
        )
        .await
        .expect("publish");

    let recorder = Recorder::default();
    let consumer: BaseConsumer<Recorder> = client_config(mq)
        .set("group.id", testkit::unique("secure-group"))
        .set("auto.offset.reset", "earliest")
        .create_with_context(recorder.clone())
        .expect("consumer");
    consumer.subscribe(&[&topic]).expect("subscribe");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(
            Instant::now() < deadline,
            "no record consumed: {}",
            recorder.errors()
        );
        if let Some(message) = consumer.poll(Duration::from_millis(200)) {
            let message = message.expect("consume");
            assert_eq!(message.payload(), Some(&b"over the wire"[..]));
            return;
        }
    }
}

#[tokio::test]
async fn tls_carries_records_with_the_right_ca_and_is_refused_with_a_wrong_one() {
    let pki = TestPki::generate(&["localhost"]);
    let broker = SecureBroker::start(Security {
        tls: Some(&pki),
        ..Security::default()
    })
    .await;

    let mut right = mq(&broker, "ssl");
    right.tls.ca_file = pki.ca.display().to_string();
    round_trip(&right).await;

    let mut wrong = mq(&broker, "ssl");
    wrong.tls.ca_file = pki.wrong_ca.display().to_string();
    let (connected, errors) = connects(&wrong);
    assert!(!connected, "a broker signed by another CA was trusted");
    assert!(errors.contains("certificate verify failed"), "{errors}");

    // Plaintext to a TLS listener gets nowhere either.
    let (connected, _) = connects(&mq(&broker, "plaintext"));
    assert!(!connected, "plaintext reached a TLS listener");
}

#[tokio::test]
async fn the_brokers_certificate_must_name_the_host_the_client_dialled() {
    // Signed by the trusted CA, but for another name.
    let pki = TestPki::generate(&["broker.example"]);
    let broker = SecureBroker::start(Security {
        tls: Some(&pki),
        ..Security::default()
    })
    .await;
    let mut config = mq(&broker, "ssl");
    config.tls.ca_file = pki.ca.display().to_string();
    let (connected, errors) = connects(&config);
    assert!(
        !connected,
        "a certificate for broker.example was accepted for localhost"
    );
    assert!(errors.contains("certificate verify failed"), "{errors}");
}

#[tokio::test]
async fn mutual_tls_needs_the_client_certificate() {
    let pki = TestPki::generate(&["localhost"]);
    let broker = SecureBroker::start(Security {
        tls: Some(&pki),
        require_client_cert: true,
        ..Security::default()
    })
    .await;

    let mut anonymous = mq(&broker, "ssl");
    anonymous.tls.ca_file = pki.ca.display().to_string();
    let (connected, _) = connects(&anonymous);
    assert!(!connected, "a client without a certificate was admitted");

    let mut identified = anonymous.clone();
    identified.tls.cert_file = pki.client_cert.display().to_string();
    identified.tls.key_file = pki.client_key.display().to_string();
    round_trip(&identified).await;
}

#[tokio::test]
async fn scram_over_tls_authenticates_and_a_wrong_password_is_refused() {
    let pki = TestPki::generate(&["localhost"]);
    let broker = SecureBroker::start(Security {
        tls: Some(&pki),
        sasl_users: Some(vec![
            ("relay", "s3cret-512", Scram::Sha512),
            ("im-bridge", "s3cret-256", Scram::Sha256),
        ]),
        ..Security::default()
    })
    .await;
    let mut config = mq(&broker, "sasl_ssl");
    config.tls.ca_file = pki.ca.display().to_string();
    config.access_key = "relay".into();
    config.secret_key = Secret::new("s3cret-512");
    config.sasl_mechanism = Scram::Sha512.mechanism().into();
    round_trip(&config).await;

    let mut sha256 = config.clone();
    sha256.access_key = "im-bridge".into();
    sha256.secret_key = Secret::new("s3cret-256");
    sha256.sasl_mechanism = Scram::Sha256.mechanism().into();
    let (connected, errors) = connects(&sha256);
    assert!(connected, "SCRAM-SHA-256 did not sign in: {errors}");

    let mut wrong = config.clone();
    wrong.secret_key = Secret::new("not-the-password");
    let (connected, errors) = connects(&wrong);
    assert!(!connected, "a wrong SCRAM password was accepted");
    assert!(errors.contains("Authentication"), "{errors}");

    // No credentials at all: the broker answers nothing but the handshake.
    let mut anonymous = config.clone();
    anonymous.security_protocol = "ssl".into();
    let (connected, _) = connects(&anonymous);
    assert!(!connected, "an unauthenticated client got metadata");
}
