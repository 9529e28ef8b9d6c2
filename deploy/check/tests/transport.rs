//! The shipped Kubernetes manifests are secure as shipped, and each way one
//! could regress (the settings they had before: `preferred` MySQL, plaintext
//! Kafka, a `redis://` URL in a ConfigMap, a mounted service-account token,
//! the `latest` tag, a development-only override) is named by the check.

use deploy_check::{transport::check_k8s_transport, yaml};
use serde_json::Value;
use std::path::PathBuf;

fn deploy(path: &str) -> String {
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(path);
    std::fs::read_to_string(&file).unwrap_or_else(|error| panic!("{}: {error}", file.display()))
}

fn manifests() -> Vec<Value> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../k8s");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
        .filter(|path| !path.ends_with("kustomization.yaml"))
        .collect();
    files.sort();
    files
        .iter()
        .flat_map(|file| yaml::parse_documents(&std::fs::read_to_string(file).unwrap()).unwrap())
        .collect()
}

fn kustomization() -> Value {
    yaml::parse_one(&deploy("k8s/kustomization.yaml")).unwrap()
}

/// The check's findings for the shipped manifests with `change` applied.
fn problems_with(change: impl Fn(&mut Vec<Value>, &mut Value)) -> String {
    let mut documents = manifests();
    let mut kustomization = kustomization();
    change(&mut documents, &mut kustomization);
    check_k8s_transport(&documents, &kustomization).join("\n")
}

/// The document of `kind` named `name`.
fn object<'a>(documents: &'a mut [Value], kind: &str, name: &str) -> &'a mut Value {
    documents
        .iter_mut()
        .find(|doc| doc["kind"] == kind && doc["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

/// Rewrites one ConfigMap file through `edit` on its parsed text's lines.
fn edit_config(documents: &mut [Value], map: &str, file: &str, edit: impl Fn(&str) -> String) {
    let config = object(documents, "ConfigMap", map);
    let text = config["data"][file].as_str().unwrap().to_owned();
    config["data"][file] = Value::String(edit(&text));
}

#[test]
fn the_shipped_manifests_are_secure() {
    let problems = check_k8s_transport(&manifests(), &kustomization());
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn an_unverified_mysql_mode_is_named() {
    let file = "outbox-relay.yaml";
    let found = problems_with(|documents, _| {
        edit_config(documents, "outbox-relay-config", file, |text| {
            text.replace("verify_identity", "preferred")
        });
    });
    assert!(
        found.contains(
            "ConfigMap outbox-relay-config outbox-relay.yaml: mysql.ssl_mode is `preferred`"
        ),
        "{found}"
    );
    // The manifests of before: no ssl_mode at all, which means preferred.
    let found = problems_with(|documents, _| {
        edit_config(documents, "outbox-relay-config", file, |text| {
            text.lines()
                .filter(|line| !line.contains("ssl_mode"))
                .collect::<Vec<_>>()
                .join("\n")
        });
    });
    assert!(
        found.contains("mysql.ssl_mode is `preferred (default)`"),
        "{found}"
    );
}

#[test]
fn plaintext_kafka_is_named() {
    let found = problems_with(|documents, _| {
        edit_config(documents, "im-bridge-config", "im-bridge.yaml", |text| {
            text.replace("\"sasl_ssl\"", "\"plaintext\"")
                .replace("SCRAM-SHA-512", "PLAIN")
        });
    });
    assert!(
        found.contains("im-bridge.yaml: rocketmq.security_protocol is `plaintext`"),
        "{found}"
    );
    assert!(
        found.contains("rocketmq.sasl_mechanism must be SCRAM"),
        "{found}"
    );
}

#[test]
fn a_redis_url_in_a_config_map_or_a_plain_env_value_is_named() {
    let found = problems_with(|documents, _| {
        edit_config(
            documents,
            "room-service-config",
            "room-service.yaml",
            |text| {
                text.replace(
                    "\nredis:\n",
                    "\nredis:\n  url: \"redis://redis.hyapp-infra.svc.cluster.local:6379\"\n",
                )
            },
        );
    });
    assert!(
        found.contains("room-service.yaml: redis.url is written in the ConfigMap"),
        "{found}"
    );

    let found = problems_with(|documents, _| {
        let deployment = object(documents, "Deployment", "room-service");
        let env = deployment
            .pointer_mut("/spec/template/spec/containers/0/env")
            .and_then(Value::as_array_mut)
            .unwrap();
        let redis = env
            .iter_mut()
            .find(|item| item["name"] == "ROOM__REDIS__URL")
            .unwrap();
        *redis = serde_json::json!({"name": "ROOM__REDIS__URL", "value": "redis://redis:6379"});
    });
    assert!(
        found.contains("ROOM__REDIS__URL must come from a secretKeyRef"),
        "{found}"
    );
    assert!(
        found.contains("room-service needs ROOM__REDIS__URL from a secretKeyRef"),
        "{found}"
    );
}

#[test]
fn a_development_override_is_named() {
    let found = problems_with(|documents, _| {
        edit_config(
            documents,
            "notice-consumer-config",
            "notice-consumer.yaml",
            |text| text.replace("\nmysql:\n", "\nmysql:\n  allow_insecure_transport: true\n"),
        );
    });
    assert!(
        found.contains("notice-consumer.yaml: mysql.allow_insecure_transport is set"),
        "{found}"
    );
}

#[test]
fn a_mounted_token_and_an_unpinned_image_are_named() {
    let found = problems_with(|documents, kustomization| {
        let cron = object(documents, "CronJob", "outbox-relay-purge");
        cron.pointer_mut("/spec/jobTemplate/spec/template/spec")
            .and_then(Value::as_object_mut)
            .unwrap()
            .remove("automountServiceAccountToken");
        kustomization["images"][0]["newTag"] = Value::String("latest".into());
    });
    assert!(
        found.contains("CronJob outbox-relay-purge: automountServiceAccountToken must be false"),
        "{found}"
    );
    assert!(
        found.contains("image room-outbox-platform has tag `latest`"),
        "{found}"
    );
    let found = problems_with(|_, kustomization| {
        kustomization["images"][0]
            .as_object_mut()
            .unwrap()
            .remove("newTag");
    });
    assert!(
        found.contains("image room-outbox-platform has tag ``"),
        "{found}"
    );
}

#[test]
fn room_services_port_without_mutual_tls_and_identities_is_named() {
    let (map, file) = ("room-service-config", "room-service.yaml");
    let at = "ConfigMap room-service-config room-service.yaml";
    let cases: [(&dyn Fn(&str) -> String, &str); 5] = [
        (
            &|text| {
                text.lines()
                    .filter(|line| !line.contains("client_ca_file"))
                    .collect::<Vec<_>>()
                    .join("\n")
            },
            "grpc_tls.client_ca_file is missing",
        ),
        (
            &|text| {
                text.replace(
                    r#"peer_identities: ["room-service"]"#,
                    "peer_identities: []",
                )
            },
            "grpc_auth.peer_identities must list",
        ),
        (
            &|text| text.replace(r#"hosts: ["10.0.0.0/8"]"#, r#"hosts: ["*"]"#),
            "peer_addresses.hosts holds `*`",
        ),
        (
            &|text| format!("{text}\ngrpc_reflection: true\n"),
            "grpc_reflection is on",
        ),
        (
            &|text| {
                text.replace(
                    "grpc_auth:\n",
                    "grpc_auth:\n  allow_unauthenticated: true\n",
                )
            },
            "grpc_auth.allow_unauthenticated is on",
        ),
    ];
    for (edit, needle) in cases {
        let found = problems_with(|documents, _| edit_config(documents, map, file, edit));
        assert!(
            found.contains(&format!("{at}: {needle}")),
            "{needle}: {found}"
        );
    }
}
