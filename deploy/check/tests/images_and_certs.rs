//! The images (`runtime` holds the five services and no curl, `fakes` the
//! fakes, compose probes with hyapp-probe) and the certificate script:
//! `deploy/certs/issue.sh` is run with the real openssl and its certificates
//! must chain to its CA and name the hosts the manifests dial.

use deploy_check::{images::check_images, yaml};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn deploy_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(path: &str) -> String {
    let file = deploy_dir().join(path);
    std::fs::read_to_string(&file).unwrap_or_else(|error| panic!("{}: {error}", file.display()))
}

fn compose() -> Value {
    let mut documents = yaml::parse_documents(&read("docker-compose.yml")).unwrap();
    documents.remove(0)
}

#[test]
fn the_runtime_image_holds_the_services_only_and_no_curl() {
    let problems = check_images(&read("Dockerfile"), &compose());
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn an_image_regression_is_named() {
    let dockerfile = read("Dockerfile");
    let with_curl = dockerfile.replace("ca-certificates libssl3", "ca-certificates curl libssl3");
    let found = check_images(&with_curl, &compose()).join("\n");
    assert!(found.contains("an image installs curl"), "{found}");

    let with_fakes = dockerfile.replace(
        "/out/im-bridge /out/notice-consumer /usr/local/bin/",
        "/out/im-bridge /out/notice-consumer /out/fake-wallet /usr/local/bin/",
    );
    let found = check_images(&with_fakes, &compose()).join("\n");
    assert!(found.contains("the `runtime` target holds"), "{found}");

    let mut compose = compose();
    compose["services"]["notice-consumer"]["healthcheck"]["test"] =
        serde_json::json!(["CMD", "curl", "-fsS", "http://127.0.0.1:7502/readyz"]);
    compose["services"]["fake-wallet"]["build"]["target"] = Value::String("runtime".into());
    let found = check_images(&dockerfile, &compose).join("\n");
    assert!(
        found.contains("notice-consumer's healthcheck must use hyapp-probe"),
        "{found}"
    );
    assert!(
        found.contains("fake-wallet builds target Some(\"runtime\")"),
        "{found}"
    );
}

/// `openssl x509 -noout <args>` of `cert`.
fn x509(cert: &Path, args: &[&str]) -> String {
    let output = Command::new("openssl")
        .arg("x509")
        .arg("-in")
        .arg(cert)
        .arg("-noout")
        .args(args)
        .output()
        .expect("openssl runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The host of the first `mysql.url` and `rocketmq.name_servers` entry in
/// the outbox-relay ConfigMap: what the certificates must name.
fn dialled_hosts() -> (String, String) {
    let documents = yaml::parse_documents(&read("k8s/outbox-relay.yaml")).unwrap();
    let map = documents
        .iter()
        .find(|doc| doc["kind"] == "ConfigMap")
        .unwrap();
    let config = yaml::parse_one(map["data"]["outbox-relay.yaml"].as_str().unwrap()).unwrap();
    let url = config["mysql"]["url"].as_str().unwrap();
    let mysql = url.split('@').nth(1).unwrap().split(':').next().unwrap();
    let kafka = config["rocketmq"]["name_servers"][0].as_str().unwrap();
    (
        mysql.to_owned(),
        kafka.split(':').next().unwrap().to_owned(),
    )
}

#[test]
fn issued_certificates_chain_to_the_ca_and_name_what_is_dialled() {
    let out = std::env::temp_dir().join(format!("hyapp-issue-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let status = Command::new("bash")
        .arg(deploy_dir().join("certs/issue.sh"))
        .arg(&out)
        .output()
        .expect("issue.sh runs");
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let ca = out.join("ca.crt");
    for name in ["mysql", "redis", "kafka", "room-service", "gateway"] {
        let cert = out.join(format!("{name}.crt"));
        assert!(out.join(format!("{name}.key")).exists(), "{name}.key");
        let verified = Command::new("openssl")
            .args(["verify", "-CAfile"])
            .arg(&ca)
            .arg(&cert)
            .output()
            .unwrap();
        assert!(verified.status.success(), "{name}: {verified:?}");
    }
    let (mysql, kafka) = dialled_hosts();
    let san = |name: &str| {
        x509(
            &out.join(format!("{name}.crt")),
            &["-ext", "subjectAltName"],
        )
    };
    assert!(
        san("mysql").contains(&format!("DNS:{mysql}")),
        "{}",
        san("mysql")
    );
    assert!(
        san("kafka").contains(&format!("DNS:{kafka}")),
        "{}",
        san("kafka")
    );
    assert!(san("redis").contains("DNS:redis.hyapp-infra.svc.cluster.local"));
    let room = san("room-service");
    for name in [
        "DNS:room-service.hyapp-room.svc.cluster.local",
        "DNS:room-service.hyapp-room.svc",
        "DNS:*.room-service-peers.hyapp-room.svc.cluster.local",
    ] {
        assert!(room.contains(name), "{room}");
    }
    let room_usage = x509(&out.join("room-service.crt"), &["-ext", "extendedKeyUsage"]);
    assert!(
        room_usage.contains("Server Authentication")
            && room_usage.contains("Client Authentication")
    );
    let gateway = x509(
        &out.join("gateway.crt"),
        &["-subject", "-ext", "subjectAltName,extendedKeyUsage"],
    );
    assert!(
        (gateway.contains("CN=gateway") || gateway.contains("CN = gateway"))
            && gateway.contains("DNS:gateway"),
        "{gateway}"
    );
    assert!(
        gateway.contains("Client Authentication") && !gateway.contains("Server Authentication")
    );
    let _ = std::fs::remove_dir_all(&out);
}
