//! The mapping of the `rocketmq` section onto client properties, and
//! every setting it refuses.

use super::*;

#[test]
fn maps_the_original_rocketmq_keys_onto_kafka_properties() {
    let config = MqConfig {
        name_servers: vec!["b1:9092".into(), "b2:9092".into()],
        access_key: "user".into(),
        secret_key: Secret::new("pw"),
        namespace: "prod".into(),
        ..MqConfig::default()
    };
    let properties = config.client_properties().unwrap();
    assert!(properties.contains(&("bootstrap.servers", "b1:9092,b2:9092".into())));
    assert!(properties.contains(&("security.protocol", "sasl_ssl".into())));
    assert!(properties.contains(&("sasl.username", "user".into())));
    assert_eq!(config.topic("hyapp_room_outbox"), "prod.hyapp_room_outbox");
    assert!(
        !format!("{config:?}").contains("pw\""),
        "secret must not be in Debug"
    );
}

#[test]
fn missing_servers_and_bad_protocol_name_the_key() {
    let error = MqConfig::default()
        .client_properties()
        .unwrap_err()
        .to_string();
    assert!(error.contains("rocketmq.name_servers"), "{error}");
    let config = MqConfig {
        name_servers: vec!["b:1".into()],
        security_protocol: "tls".into(),
        ..MqConfig::default()
    };
    assert!(
        config
            .client_properties()
            .unwrap_err()
            .to_string()
            .contains("rocketmq.security_protocol")
    );
    let config = MqConfig {
        name_servers: vec!["b:1".into()],
        security_protocol: "sasl_plaintext".into(),
        ..MqConfig::default()
    };
    assert!(
        config
            .client_properties()
            .unwrap_err()
            .to_string()
            .contains("rocketmq.access_key")
    );
}

fn secure(protocol: &str) -> MqConfig {
    MqConfig {
        name_servers: vec!["broker.example:9093".into()],
        access_key: "user".into(),
        secret_key: Secret::new("pw"),
        security_protocol: protocol.into(),
        ..MqConfig::default()
    }
}

fn refusal(config: &MqConfig) -> String {
    match config.client_properties() {
        Ok(properties) => panic!("accepted: {:?}", properties.len()),
        Err(error) => error.to_string(),
    }
}

fn pem_file(name: &str, body: &str) -> String {
    let dir = std::env::temp_dir().join(format!("mq-tls-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    path.display().to_string()
}

#[test]
fn scram_over_tls_maps_to_librdkafka_properties_with_hostname_verification() {
    let ca = pem_file(
        "ca.pem",
        "-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n",
    );
    let mut config = secure("sasl_ssl");
    config.sasl_mechanism = "scram-sha-512".into();
    config.tls.ca_file = ca.clone();
    let properties = config.client_properties().unwrap();
    assert!(properties.contains(&("sasl.mechanism", "SCRAM-SHA-512".into())));
    assert!(properties.contains(&("ssl.ca.location", ca)));
    assert!(properties.contains(&("ssl.endpoint.identification.algorithm", "https".into())));
    assert!(!config.sends_password_in_clear());
}

#[test]
fn settings_that_cannot_work_are_refused_naming_the_key() {
    let mut config = secure("sasl_ssl");
    config.sasl_mechanism = "GSSAPI".into();
    assert!(refusal(&config).contains("rocketmq.sasl_mechanism `GSSAPI`"));

    let mut config = secure("sasl_plaintext");
    config.tls.ca_file = "/etc/ca.pem".into();
    assert!(
        refusal(&config).contains("rocketmq.tls is set but security_protocol is sasl_plaintext")
    );

    let mut config = secure("ssl");
    config.tls.cert_file = "/etc/client.pem".into();
    assert!(refusal(&config).contains("must be set together"));

    let mut config = secure("ssl");
    config.tls.key_password = Secret::new("k");
    assert!(refusal(&config).contains("rocketmq.tls.key_password"));

    let mut config = secure("ssl");
    config.tls.ca_file = "/nonexistent/ca.pem".into();
    assert!(refusal(&config).contains("rocketmq.tls.ca_file `/nonexistent/ca.pem`"));

    let mut config = secure("ssl");
    config.tls.ca_file = pem_file("junk.pem", "not a certificate");
    assert!(refusal(&config).contains("holds no PEM"));
}

#[test]
fn plain_over_plaintext_is_flagged_as_sending_the_password_in_clear() {
    assert!(secure("sasl_plaintext").sends_password_in_clear());
    let mut scram = secure("sasl_plaintext");
    scram.sasl_mechanism = "SCRAM-SHA-256".into();
    assert!(!scram.sends_password_in_clear());
    assert!(!secure("sasl_ssl").sends_password_in_clear());
}

#[test]
fn plaintext_to_a_remote_broker_is_refused_unless_allowed() {
    for protocol in ["plaintext", "sasl_plaintext"] {
        let mut config = secure(protocol);
        let error = refusal(&config);
        assert!(
            error.contains(&format!(
                "rocketmq.security_protocol {protocol} is not encrypted"
            )) && error.contains("`broker.example:9093`")
                && error.contains("rocketmq.allow_insecure_transport"),
            "{error}"
        );
        config.allow_insecure_transport = true;
        config.client_properties().expect("explicitly allowed");
        let mut local = secure(protocol);
        local.name_servers = vec![
            "127.0.0.1:9092".into(),
            "[::1]:9092".into(),
            "localhost:1".into(),
        ];
        local
            .client_properties()
            .expect("loopback brokers accepted");
    }
    // One remote broker among local ones is enough to refuse; so is a domain.
    let mut mixed = secure("plaintext");
    mixed.name_servers = vec!["127.0.0.1:9092".into(), "kafka:9092".into()];
    assert!(refusal(&mixed).contains("`kafka:9092`"));
    let mut domain = secure("plaintext");
    domain.name_servers.clear();
    domain.name_server_domain = "brokers.example:9092".into();
    assert!(refusal(&domain).contains("`brokers.example:9092`"));
    secure("sasl_ssl")
        .client_properties()
        .expect("TLS to a remote broker");
}

#[test]
fn extra_properties_may_not_set_what_the_section_owns() {
    for key in [
        "security.protocol",
        "enable.ssl.certificate.verification",
        "ssl.endpoint.identification.algorithm",
        "ssl.ca.location",
        "ssl.certificate.location",
        "ssl.key.location",
        "ssl_engine_callback_data",
        "sasl.mechanism",
        "sasl.username",
        "enable.sasl.oauthbearer.unsecure.jwt",
        "https.ca.location",
        "bootstrap.servers",
        "Security.Protocol",
    ] {
        let keys = ["fetch.min.bytes".to_owned(), key.to_owned()];
        let error = check_extra_properties("consumer.client_properties", &keys)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains(&format!("consumer.client_properties.{key} may not be set")),
            "{error}"
        );
    }
    let tuning = ["fetch.min.bytes".to_owned(), "client.rack".to_owned()];
    check_extra_properties("consumer.client_properties", &tuning).expect("tuning accepted");
}
