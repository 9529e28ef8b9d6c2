//! Parses every file in `deploy/` and checks it against the code (see the
//! crate docs for what is checked). The key tree of each service's config is
//! the serialized `Default` of its real config type (a dev-dependency), so an
//! env variable or ConfigMap key is accepted exactly when the service would
//! accept it; ports come from those defaults and the shipped
//! `configs/*.docker.yaml`; metric names from the `registry.register` calls in
//! the sources. The `*_is_caught` tests feed deliberately wrong references
//! into each check and expect a problem naming them.

use deploy_check::{
    Advertise, AppService, FakeService, Infra, Kustomize, Model, Service, check_alerts,
    check_compose, check_dashboard, check_k8s, check_k8s_operations, check_runbooks, pod_env,
    source, yaml,
};
use outbox_schema::groups::{self, TOPIC_ROOM_OUTBOX, TOPIC_TREASURE_OPEN};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn deploy(path: &str) -> String {
    source::read(&root().join("deploy").join(path)).unwrap()
}

/// What one service's instances must keep apart: keys naming the instance and,
/// for a service whose instances call each other, how they find each other.
struct Instances<'a> {
    keys: &'a [&'a str],
    advertise: Option<(&'a str, &'a str)>,
}

/// A service none of whose values name an instance.
const SHARED: Instances<'static> = Instances {
    keys: &[],
    advertise: None,
};

/// The consumer groups `name` runs by outbox-schema's one list, with those of
/// the consumer services it can host in-process (`embeds`).
fn groups_of(name: &str, embeds: &[&str]) -> BTreeSet<String> {
    std::iter::once(name)
        .chain(embeds.iter().copied())
        .flat_map(groups::run_by)
        .map(|group| group.group.to_string())
        .collect()
}

fn app(
    name: &str,
    env_prefix: &str,
    defaults: Value,
    grace_keys: &[&str],
    embeds: &[&str],
    instances: Instances<'_>,
) -> (String, Service) {
    let dir = root().join("services").join(name).join("configs");
    let mut config_files = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).unwrap().flatten() {
        let file = entry.file_name().to_string_lossy().to_string();
        if file.ends_with(".yaml") {
            let text = source::read(&entry.path()).unwrap();
            config_files.insert(file, yaml::parse_one(&text).unwrap());
        }
    }
    let service = AppService {
        env_prefix: env_prefix.to_string(),
        defaults,
        config_files,
        docker_file: format!("{name}.docker.yaml"),
        grace_keys: grace_keys.iter().map(ToString::to_string).collect(),
        consumer_groups: groups_of(name, embeds),
        instance_keys: instances.keys.iter().map(ToString::to_string).collect(),
        advertise: instances.advertise.map(|(key, listen_key)| Advertise {
            key: key.to_string(),
            listen_key: listen_key.to_string(),
        }),
    };
    for key in &service.instance_keys {
        assert!(
            service.has_key(key),
            "{name}: instance key {key} is not a config key"
        );
    }
    (name.to_string(), Service::App(service))
}

fn fake(name: &str) -> (String, Service) {
    let main_rs = source::read(&root().join("fakes").join(name).join("src/main.rs")).unwrap();
    let env_flags = source::clap_env_flags(&main_rs);
    assert!(!env_flags.is_empty(), "{name}: no env flags found");
    (name.to_string(), Service::Fake(FakeService { env_flags }))
}

fn infra(images: &[&str], ports: &[u16]) -> Infra {
    Infra {
        images: images.iter().map(ToString::to_string).collect(),
        ports: ports.iter().copied().collect(),
    }
}

fn model() -> Model {
    let json = |value: Result<Value, serde_json::Error>| value.unwrap();
    let services: BTreeMap<String, Service> = [
        app(
            "room-service",
            "ROOM",
            json(serde_json::to_value(room_service::Config::default())),
            &["shutdown_grace"],
            // Its treasure-open group, and im-bridge's when it hosts the bridge.
            &["im-bridge"],
            // The node id and address go into room leases; the embedded
            // relay's node id into shard leases.
            Instances {
                keys: &["node_id", "advertise_url", "outbox_worker.node_id"],
                advertise: Some(("advertise_url", "grpc_listen")),
            },
        ),
        app(
            "outbox-relay",
            "RELAY",
            json(serde_json::to_value(
                outbox_relay::config::RelayServiceConfig::default(),
            )),
            &["outbox_worker.publish_timeout", "outbox_worker.shard_lease"],
            &[],
            Instances {
                keys: &["outbox_worker.node_id"],
                advertise: None,
            },
        ),
        app(
            "im-bridge",
            "IM_BRIDGE",
            json(serde_json::to_value(im_bridge::config::Config::default())),
            &["consumer.shutdown_grace"],
            &[],
            SHARED,
        ),
        app(
            "activity-consumer",
            "ACTIVITY",
            json(serde_json::to_value(
                activity_consumer::config::Config::default(),
            )),
            &["consumer.shutdown_grace"],
            &[],
            SHARED,
        ),
        app(
            "notice-consumer",
            "NOTICE",
            json(serde_json::to_value(
                notice_consumer::config::Config::default(),
            )),
            &["consumer.shutdown_grace"],
            &[],
            SHARED,
        ),
        fake("fake-wallet"),
        fake("fake-tencent-im"),
    ]
    .into_iter()
    .collect();
    let root = root();
    let metrics = source::exposed_metrics(&[&root.join("services"), &root.join("crates")]).unwrap();
    let binaries = source::workspace_binaries(&root).unwrap();
    for name in services.keys() {
        assert!(
            binaries.contains(name),
            "the model names {name}, which is no binary"
        );
    }
    Model {
        binaries,
        services,
        metrics,
        infra: infrastructure(),
        app_image: "room-outbox-platform".into(),
        subcommands: subcommands(),
        topics: [TOPIC_ROOM_OUTBOX, TOPIC_TREASURE_OPEN]
            .iter()
            .map(ToString::to_string)
            .chain(
                groups::ALL
                    .iter()
                    .map(|group| group.dead_letter_topic.to_string()),
            )
            .collect(),
    }
}

/// Infrastructure containers compose may run, by service name.
fn infrastructure() -> BTreeMap<String, Infra> {
    [
        ("mysql".to_string(), infra(&["mysql:8"], &[3306])),
        ("redis".to_string(), infra(&["redis:7"], &[6379])),
        (
            "kafka".to_string(),
            infra(&["apache/kafka:", "redpandadata/redpanda:"], &[9092, 9093]),
        ),
        (
            "kafka-init".to_string(),
            infra(&["apache/kafka:", "redpandadata/redpanda:"], &[]),
        ),
    ]
    .into_iter()
    .collect()
}

/// Each binary's CLI subcommands, read from the clap definitions: the
/// consumers share the host's CLI.
fn subcommands() -> BTreeMap<String, BTreeSet<String>> {
    let read = |path: &str| source::subcommands(&source::read(&root().join(path)).unwrap());
    let host = read("crates/consumer-runtime/src/host/cli.rs");
    assert!(host.contains("consumer-lag"), "{host:?}");
    let mut out: BTreeMap<String, BTreeSet<String>> = [
        ("room-service", read("services/room-service/src/main.rs")),
        ("outbox-relay", read("services/outbox-relay/src/main.rs")),
    ]
    .into_iter()
    .map(|(name, commands)| (name.to_string(), commands))
    .collect();
    for consumer in ["im-bridge", "activity-consumer", "notice-consumer"] {
        out.insert(consumer.to_string(), host.clone());
    }
    out
}

fn compose() -> Value {
    let docs = yaml::parse_documents(&deploy("docker-compose.yml")).unwrap();
    assert_eq!(docs.len(), 1);
    docs.into_iter().next().unwrap()
}

/// The manifest files of deploy/k8s (the kustomization aside).
fn k8s_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("deploy/k8s"))
        .unwrap()
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| {
            path.extension()
                .is_some_and(|ext| ext == "yaml" || ext == "yml")
                && path
                    .file_name()
                    .is_some_and(|name| name != "kustomization.yaml")
        })
        .collect();
    files.sort();
    files
}

fn kustomization() -> Value {
    yaml::parse_one(&deploy("k8s/kustomization.yaml")).unwrap()
}

fn runbooks() -> String {
    source::read(&root().join(deploy_check::RUNBOOKS)).unwrap()
}

fn k8s_operations(documents: &[Value], kustomization: &Value, alerts: &Value) -> Vec<String> {
    let files = k8s_files()
        .iter()
        .filter_map(|path| path.file_name())
        .map(|name| name.to_string_lossy().to_string())
        .collect();
    check_k8s_operations(
        &model(),
        documents,
        &Kustomize {
            kustomization,
            files,
        },
        alerts,
    )
}

fn k8s_documents() -> Vec<Value> {
    let files = k8s_files();
    assert!(
        files.len() >= 5,
        "expected a manifest per service: {files:?}"
    );
    files
        .iter()
        .flat_map(|file| {
            yaml::parse_documents(&source::read(file).unwrap())
                .unwrap_or_else(|error| panic!("{}: {error}", file.display()))
        })
        .collect()
}

fn alerts() -> Value {
    yaml::parse_one(&deploy("prometheus/alerts.yml")).unwrap()
}

fn dashboard() -> Value {
    serde_json::from_str(&deploy("grafana/room-outbox.json")).unwrap()
}

fn assert_clean(problems: Vec<String>) {
    assert!(
        problems.is_empty(),
        "problems:\n  {}",
        problems.join("\n  ")
    );
}

fn assert_caught(problems: Vec<String>, needle: &str) {
    assert!(
        problems.iter().any(|problem| problem.contains(needle)),
        "expected a problem mentioning `{needle}`, got:\n  {}",
        problems.join("\n  ")
    );
}

// ---- the real files ----

#[test]
fn model_reads_the_code() {
    let model = model();
    for name in [
        "room_outbox_publish_success_total",
        "room_outbox_pending",
        "room_outbox_failed",
        "room_outbox_publish_latency_seconds_bucket",
        "consumer_partition_lag_messages",
        "consumer_delivery_failed_rows",
        "room_gift_sagas_unsettled",
        "consumer_lag_seconds_bucket",
        "room_commands_total",
    ] {
        assert!(
            model.metrics.contains(name),
            "{name} missing from {:?}",
            model.metrics
        );
    }
    assert!(!model.metrics.contains("room_outbox_pending_total"));
    assert!(model.subcommands["room-service"].contains("migrate"));
    assert!(model.subcommands["outbox-relay"].contains("purge"));
    for binary in ["room-service", "fake-wallet", "xtask"] {
        assert!(model.binaries.contains(binary), "{binary}");
    }
}

#[test]
fn compose_agrees_with_the_code() {
    assert_clean(check_compose(&model(), &compose(), &deploy("Dockerfile")));
}

#[test]
fn k8s_agrees_with_the_code() {
    assert_clean(check_k8s(&model(), &k8s_documents()));
}

#[test]
fn alerts_use_exported_metrics() {
    assert_clean(check_alerts(&model(), &alerts()));
}

#[test]
fn metric_names_follow_prometheus_conventions() {
    let root = root();
    let registrations =
        source::registrations(&[&root.join("services"), &root.join("crates")]).unwrap();
    assert!(registrations.len() > 20, "{registrations:?}");
    let problems: Vec<String> = registrations
        .iter()
        .filter_map(|(name, kind)| source::naming_problem(name, *kind))
        .collect();
    assert_clean(problems);
}

#[test]
fn alerts_link_existing_runbook_sections() {
    assert_clean(check_runbooks(&alerts(), &runbooks()));
}

#[test]
fn k8s_operations_agree_with_the_code() {
    assert_clean(k8s_operations(
        &k8s_documents(),
        &kustomization(),
        &alerts(),
    ));
}

#[test]
fn dashboard_uses_exported_metrics() {
    assert_clean(check_dashboard(&model(), &dashboard()));
}

#[test]
fn every_deploy_file_is_checked() {
    let mut seen = BTreeSet::new();
    let deploy_dir = root().join("deploy");
    for entry in std::fs::read_dir(&deploy_dir).unwrap().flatten() {
        seen.insert(entry.file_name().to_string_lossy().to_string());
    }
    let expected: BTreeSet<String> = [
        "Dockerfile",
        "docker-compose.yml",
        "k8s",
        "prometheus",
        "grafana",
        "README.md",
        "check",
        // tests/images_and_certs.rs runs certs/issue.sh and checks the
        // images and compose's use of probe.sh.
        "certs",
        "probe.sh",
    ]
    .iter()
    .map(ToString::to_string)
    .collect();
    assert_eq!(seen, expected, "a new file in deploy/ needs a check here");
    assert_eq!(
        std::fs::read_dir(deploy_dir.join("grafana"))
            .unwrap()
            .count(),
        1,
        "one dashboard, checked by dashboard_uses_exported_metrics"
    );
}

// ---- each check fails on a wrong reference ----

fn compose_with(edit: impl FnOnce(&mut Value)) -> Vec<String> {
    let mut compose = compose();
    edit(&mut compose);
    check_compose(&model(), &compose, &deploy("Dockerfile"))
}

#[test]
fn compose_unknown_service_is_caught() {
    let problems = compose_with(|compose| {
        let service = compose["services"]["notice-consumer"].clone();
        compose["services"]["notice-worker"] = service;
    });
    assert_caught(problems, "notice-worker is not a workspace binary");
}

#[test]
fn compose_unknown_env_key_is_caught() {
    let problems = compose_with(|compose| {
        compose["services"]["outbox-relay"]["environment"]["RELAY__OUTBOX_WORKER__BATCH_SISE"] =
            Value::from("5");
        compose["services"]["im-bridge"]["environment"]["ROOM__MYSQL__URL"] = Value::from("x");
        compose["services"]["fake-wallet"]["environment"]["FAKE_WALLET_PORT"] = Value::from("1");
    });
    assert_caught(problems.clone(), "RELAY__OUTBOX_WORKER__BATCH_SISE");
    assert_caught(
        problems.clone(),
        "ROOM__MYSQL__URL does not start with IM_BRIDGE__",
    );
    assert_caught(problems, "FAKE_WALLET_PORT is not one of its flags");
}

#[test]
fn compose_wrong_ports_are_caught() {
    let problems = compose_with(|compose| {
        compose["services"]["room-service"]["ports"] =
            serde_json::json!(["7101:7101", "7103:7103"]);
        compose["services"]["notice-consumer"]["environment"]["NOTICE__HTTP_LISTEN"] =
            Value::from("0.0.0.0:7999");
        compose["services"]["room-service"]["environment"]["ROOM__WALLET__ENDPOINT"] =
            Value::from("http://fake-wallet:7401");
        compose["services"]["im-bridge"]["healthcheck"]["test"] =
            serde_json::json!(["CMD", "curl", "-fsS", "http://127.0.0.1:7402/readyz"]);
    });
    assert_caught(problems.clone(), "room-service publishes 7103:7103");
    assert_caught(
        problems.clone(),
        "room-service publishes 7101:7101 on every interface",
    );
    assert_caught(problems.clone(), "http_listen port 7999");
    assert_caught(problems.clone(), "refers to fake-wallet:7401");
    assert_caught(
        problems,
        "im-bridge healthcheck http://127.0.0.1:7402/readyz",
    );
}

#[test]
fn compose_unknown_hosts_and_dependencies_are_caught() {
    let problems = compose_with(|compose| {
        // The consumers' docker configs say `mariadb` and `tansu`; compose
        // overrides them. Drop an override and the stale host shows.
        let env = compose["services"]["notice-consumer"]["environment"]
            .as_object_mut()
            .unwrap();
        env.remove("NOTICE__ROCKETMQ__NAME_SERVERS");
        compose["services"]["im-bridge"]["depends_on"]["postgres"] =
            serde_json::json!({"condition": "service_healthy"});
    });
    assert_caught(problems.clone(), "refers to tansu:9092");
    assert_caught(problems, "depends on unknown service postgres");
}

#[test]
fn dockerfile_gaps_are_caught() {
    let dockerfile = deploy("Dockerfile")
        .replace("--bin im-bridge", "")
        .replace(
            "services/notice-consumer/configs/notice-consumer.docker.yaml",
            "",
        )
        .replace("USER 10001:10001", "USER root");
    let problems = check_compose(&model(), &compose(), &dockerfile);
    assert_caught(problems.clone(), "does not build --bin im-bridge");
    assert_caught(
        problems.clone(),
        "does not copy notice-consumer.docker.yaml",
    );
    assert_caught(problems, "no non-root USER");
}

#[test]
fn compose_replicas_are_checked() {
    let problems = compose_with(|compose| {
        let room = &mut compose["services"]["room-service"];
        room["ports"] = serde_json::json!(["7101:7101", "7111-7112:7102"]);
        room["hostname"] = Value::from("room");
        room["environment"]["ROOM__NODE_ID"] = Value::from("room-1");
        room["environment"]["ROOM__ADVERTISE_URL"] = Value::from("http://room-service:7101");
        compose["services"]["im-bridge"]["ports"] = serde_json::json!(["7112:7401"]);
    });
    for needle in [
        "room-service publishes 7101:7101 (1 host port(s)) for 3 replicas",
        "publish \"7101-7103:7101\"",
        "room-service publishes 7111-7112:7102 (2 host port(s)) for 3 replicas",
        "room-service runs 3 replicas but sets hostname",
        "node_id is `room-1` in every instance",
        "every instance advertises http://room-service:7101",
        "im-bridge publishes 7112:7401 and room-service publishes 7111-7112:7102: the host ports overlap",
    ] {
        assert_caught(problems.clone(), needle);
    }

    let problems = compose_with(|compose| {
        let room = &mut compose["services"]["room-service"];
        room["scale"] = Value::from(2);
        room["environment"]["ROOM__GRPC_LISTEN"] = Value::from("127.0.0.1:7101");
    });
    assert_caught(problems.clone(), "deploy.replicas 3 and scale 2");
    assert_caught(
        problems,
        "advertises http://127.0.0.1:7101 (advertise_url), which other instances cannot reach",
    );

    // One replica may bind fixed ports and name itself.
    assert_clean(compose_with(|compose| {
        let room = &mut compose["services"]["room-service"];
        room["deploy"]["replicas"] = Value::from(1);
        room["ports"] = serde_json::json!(["127.0.0.1:7101:7101", "127.0.0.1:7102:7102"]);
        room["environment"]["ROOM__NODE_ID"] = Value::from("room-1");
    }));
}

fn k8s_with(edit: impl FnOnce(&mut Vec<Value>)) -> Vec<String> {
    let mut documents = k8s_documents();
    edit(&mut documents);
    check_k8s(&model(), &documents)
}

fn find<'a>(documents: &'a mut [Value], kind: &str, name: &str) -> &'a mut Value {
    documents
        .iter_mut()
        .find(|doc| doc["kind"] == kind && doc["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

#[test]
fn k8s_wrong_references_are_caught() {
    let problems = k8s_with(|documents| {
        let relay = find(documents, "Deployment", "outbox-relay");
        let container = &mut relay["spec"]["template"]["spec"]["containers"][0];
        container["readinessProbe"]["httpGet"]["path"] = Value::from("/ready");
        container["livenessProbe"]["httpGet"]["port"] = Value::from(7202);
        container["env"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!({"name": "RELAY__OUTBOX_WORKER__NUDGE", "value": "true"}));
        relay["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = Value::from(5);

        let notice = find(documents, "ConfigMap", "notice-consumer-config");
        let text = notice["data"]["notice-consumer.yaml"]
            .as_str()
            .unwrap()
            .to_string();
        notice["data"]["notice-consumer.yaml"] =
            Value::from(text.replace("max_attempts: 16", "max_attempt: 16"));

        let activity = find(documents, "Service", "activity-consumer");
        activity["spec"]["ports"][0]["targetPort"] = Value::from(7303);

        let pdb = find(documents, "PodDisruptionBudget", "room-service");
        pdb["spec"]["minAvailable"] = Value::from(3);

        let bridge = find(documents, "Deployment", "im-bridge");
        bridge["spec"]["template"]["metadata"]["labels"]["hyapp.io/consumer-group"] =
            Value::from("hyapp-activity-room-outbox");
    });
    for needle in [
        "outbox-relay readinessProbe must GET /readyz",
        "outbox-relay livenessProbe port Some(7202)",
        "RELAY__OUTBOX_WORKER__NUDGE",
        "terminationGracePeriodSeconds 5",
        "`notice.delivery.max_attempt` is not a key",
        "Service activity-consumer targets port Some(7303)",
        "minAvailable 3 >= replicas 3",
        "im-bridge is labelled consumer group hyapp-activity-room-outbox",
    ] {
        assert_caught(problems.clone(), needle);
    }
}

#[test]
fn k8s_unknown_deployment_and_missing_pdb_are_caught() {
    let problems = k8s_with(|documents| {
        find(documents, "Deployment", "notice-consumer")["metadata"]["name"] =
            Value::from("notice-service");
        documents.retain(|doc| {
            !(doc["kind"] == "PodDisruptionBudget" && doc["metadata"]["name"] == "im-bridge")
        });
    });
    assert_caught(
        problems.clone(),
        "Deployment notice-service is not one of the services",
    );
    assert_caught(
        problems.clone(),
        "Deployment im-bridge has no PodDisruptionBudget",
    );
    assert_caught(problems, "service notice-consumer has no Deployment");
}

/// The env list of the room-service container.
fn room_env(documents: &mut [Value]) -> &mut Vec<Value> {
    find(documents, "Deployment", "room-service")["spec"]["template"]["spec"]["containers"][0]
        ["env"]
        .as_array_mut()
        .unwrap()
}

fn remove_env(documents: &mut [Value], name: &str) -> Value {
    let env = room_env(documents);
    let at = env.iter().position(|item| item["name"] == name).unwrap();
    env.remove(at)
}

#[test]
fn k8s_scale_out_mistakes_are_caught() {
    // $(POD_IP) used above its definition stays literal text.
    let problems = k8s_with(|documents| {
        let pod_ip = remove_env(documents, "POD_IP");
        room_env(documents).push(pod_ip);
    });
    assert_caught(
        problems.clone(),
        "env ROOM__ADVERTISE_URL: $(POD_IP) is not defined above it",
    );
    assert_caught(
        problems.clone(),
        "env POD_IP does not start with ROOM__, and no later variable uses it",
    );
    assert_caught(problems, "every instance advertises https://$(POD_IP):7101");

    // Without an advertise URL the pods would advertise their unresolvable names.
    let problems = k8s_with(|documents| {
        remove_env(documents, "ROOM__ADVERTISE_URL");
    });
    assert_caught(
        problems.clone(),
        "advertises http://$HOSTNAME:7101 (advertise_url), but a Deployment pod is reachable only at its IP",
    );
    assert_caught(problems, "env POD_IP does not start with ROOM__");

    let problems = k8s_with(|documents| {
        for item in room_env(documents) {
            if item["name"] == "POD_IP" {
                item["valueFrom"]["fieldRef"]["fieldPath"] = Value::from("metadata.name");
            }
            if item["name"] == "ROOM__NODE_ID" {
                *item = serde_json::json!({"name": "ROOM__NODE_ID", "value": "room-service-0"});
            }
        }
        room_env(documents).push(serde_json::json!(
            {"name": "ROOM__APP_CODE", "valueFrom": {"fieldRef": {"fieldPath": "status.phase"}}}
        ));
    });
    assert_caught(
        problems.clone(),
        "advertises https://room-service-6d9f7c8b5-x7k2q:7101",
    );
    assert_caught(
        problems.clone(),
        "node_id is `room-service-0` in every instance",
    );
    assert_caught(problems, "fieldRef status.phase is not a pod field");

    // The NetworkPolicy must let the pods reach each other and leave no port dead.
    let problems = k8s_with(|documents| {
        let policy = find(documents, "NetworkPolicy", "room-service");
        policy["spec"]["ingress"][0]["from"]
            .as_array_mut()
            .unwrap()
            .remove(0);
        policy["spec"]["ingress"][1]["ports"][0]["port"] = Value::from(7103);
    });
    for needle in [
        "does not admit room-service's own pods to port 7101",
        "admits port 7103 of room-service",
        "admits nobody to room-service port 7102",
    ] {
        assert_caught(problems.clone(), needle);
    }
    let problems = k8s_with(|documents| {
        documents.retain(|doc| doc["kind"] != "NetworkPolicy");
    });
    assert_caught(problems, "Deployment room-service has no NetworkPolicy");
}

#[test]
fn unknown_metrics_are_caught() {
    let mut alerts = alerts();
    alerts["groups"][0]["rules"][0]["expr"] =
        Value::from("max(room_outbox_oldest_pending_age_ms) > 60000");
    assert_caught(
        check_alerts(&model(), &alerts),
        "room_outbox_oldest_pending_age_ms is not exported",
    );
    let mut dashboard = dashboard();
    dashboard["panels"][0]["targets"][0]["expr"] =
        Value::from("sum(rate(room_outbox_publish_success[5m]))");
    dashboard["templating"]["list"][1]["query"] =
        Value::from("label_values(consumer_messages_consumed, consumer_group)");
    let problems = check_dashboard(&model(), &dashboard);
    assert_caught(
        problems.clone(),
        "room_outbox_publish_success is not exported",
    );
    assert_caught(problems, "unknown metric consumer_messages_consumed");
}

#[test]
fn missing_runbooks_are_caught() {
    let mut alerts = alerts();
    alerts["groups"][0]["rules"][0]["annotations"]["runbook_url"] =
        Value::from("docs/runbooks.md#no-such-section");
    alerts["groups"][0]["rules"][1]["annotations"]
        .as_object_mut()
        .unwrap()
        .remove("runbook_url");
    let problems = check_runbooks(&alerts, &runbooks());
    assert_caught(problems.clone(), "anchor #no-such-section is no heading");
    assert_caught(
        problems,
        "RoomOutboxShardOwnershipAbsent has no annotations.runbook_url",
    );
}

#[test]
fn k8s_operation_mistakes_are_caught() {
    let mut documents = k8s_documents();
    documents
        .retain(|doc| !(doc["kind"] == "Job" && doc["metadata"]["name"] == "room-service-migrate"));
    documents.retain(|doc| {
        !(doc["kind"] == "ServiceMonitor" && doc["metadata"]["name"] == "notice-consumer")
    });
    let purge = find(&mut documents, "CronJob", "outbox-relay-purge");
    purge["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["command"][3] =
        Value::from("prune");
    let relay = find(&mut documents, "Deployment", "outbox-relay");
    relay["spec"]["template"]["spec"]["containers"][0]["image"] =
        Value::from("room-outbox-platform:1.0");
    let topics = find(&mut documents, "Job", "kafka-topics");
    let script = topics["spec"]["template"]["spec"]["containers"][0]["args"][0]
        .as_str()
        .unwrap()
        .replace("hyapp-notice-room-outbox.dlq:1", "");
    topics["spec"]["template"]["spec"]["containers"][0]["args"][0] = Value::from(script);
    let rule = find(&mut documents, "PrometheusRule", "room-outbox-platform");
    rule["spec"]["groups"][0]["rules"][0]["for"] = Value::from("10m");
    let mut kustomization = kustomization();
    kustomization["resources"].as_array_mut().unwrap().pop();
    kustomization["images"] = Value::Array(Vec::new());
    let problems = k8s_operations(&documents, &kustomization, &alerts());
    for needle in [
        "no Job runs `room-service migrate`",
        "runs `outbox-relay prune`, which is not a subcommand of outbox-relay",
        "no Job runs `outbox-relay purge`",
        "uses image room-outbox-platform:1.0",
        "does not create hyapp-notice-room-outbox.dlq",
        "PrometheusRule room-outbox-platform spec.groups differs",
        "Deployment notice-consumer is scraped by no ServiceMonitor",
        "matches job \"notice-consumer\", which no ServiceMonitor scrapes",
        "kustomization.yaml does not list prometheus-rule.yaml",
        "must set image room-outbox-platform exactly once",
    ] {
        assert_caught(problems.clone(), needle);
    }
}

// ---- the real loaders accept the deploy configs ----

/// Loads `file` + `env` through the service's real layered loader into `T`
/// (list keys: every key whose default is an array, as the services declare).
fn load<T: serde::de::DeserializeOwned>(
    service: &'static str,
    app: &AppService,
    file: &Path,
    env: &BTreeMap<String, String>,
) -> Result<T, String> {
    let list_keys: Vec<&'static str> = yaml::key_paths(&app.defaults)
        .into_iter()
        .filter(|path| matches!(yaml::get(&app.defaults, path), Some(Value::Array(_))))
        .map(|path| &*Box::leak(path.into_boxed_str()))
        .collect();
    service_kit::config::ConfigSources {
        service,
        env_prefix: Box::leak(app.env_prefix.clone().into_boxed_str()),
        file: Some(file.to_path_buf()),
        list_keys: Box::leak(list_keys.into_boxed_slice()),
        secret_keys: &[],
    }
    .load_with_env::<T>(Some(env.clone().into_iter().collect()))
    .map_err(|error| error.to_string())
}

fn load_any(
    name: &str,
    app: &AppService,
    file: &Path,
    env: &BTreeMap<String, String>,
) -> Result<(), String> {
    match name {
        // room-service's own validation too: it parses advertise_url and node_id.
        "room-service" => load::<room_service::Config>("room-service", app, file, env)?
            .validate()
            .map(drop)
            .map_err(|error| error.to_string()),
        "outbox-relay" => {
            load::<outbox_relay::config::RelayServiceConfig>("outbox-relay", app, file, env)
                .map(drop)
        }
        "im-bridge" => load::<im_bridge::config::Config>("im-bridge", app, file, env).map(drop),
        "activity-consumer" => {
            load::<activity_consumer::config::Config>("activity-consumer", app, file, env).map(drop)
        }
        "notice-consumer" => {
            load::<notice_consumer::config::Config>("notice-consumer", app, file, env).map(drop)
        }
        other => Err(format!("no loader for {other}")),
    }
}

#[test]
fn services_load_their_deploy_configs() {
    let model = model();
    let mut problems = Vec::new();
    // Compose: the docker config plus the compose environment.
    let compose = compose();
    for (name, service) in compose["services"].as_object().unwrap() {
        let Some(app) = model.app(name) else { continue };
        let file = root()
            .join("services")
            .join(name)
            .join("configs")
            .join(&app.docker_file);
        let env = deploy_check::env_map(service.get("environment"));
        if let Err(error) = load_any(name, app, &file, &env) {
            problems.push(format!("compose {name}: {error}"));
        }
    }
    // Kubernetes: each ConfigMap's file plus the Deployment's env as a pod
    // sees it (downward API fields and secrets as samples, `$(VAR)` expanded).
    let dir = std::env::temp_dir().join(format!("deploy-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let documents = k8s_documents();
    let pki = testkit::pki::TestPki::generate(&["localhost"]);
    for doc in documents.iter().filter(|doc| doc["kind"] == "ConfigMap") {
        for (file, text) in doc["data"].as_object().unwrap() {
            let name = file.trim_end_matches(".yaml");
            let Some(app) = model.app(name) else {
                problems.push(format!("k8s ConfigMap file {file} names no service"));
                continue;
            };
            let env_items = documents
                .iter()
                .find(|doc| doc["kind"] == "Deployment" && doc["metadata"]["name"] == name)
                .and_then(|doc| doc["spec"]["template"]["spec"]["containers"][0]["env"].as_array())
                .cloned()
                .unwrap_or_default();
            let (pod, _) = pod_env::resolve("k8s", name, "hyapp-room", &env_items);
            let env: BTreeMap<String, String> = pod
                .values
                .into_iter()
                .filter(|(variable, _)| app.env_path(variable).is_some())
                .collect();
            let path = dir.join(file);
            let text = with_sample_mounted_files(text.as_str().unwrap(), &pki, &dir);
            std::fs::write(&path, text).unwrap();
            if let Err(error) = load_any(name, app, &path, &env) {
                problems.push(format!("k8s {file}: {error}"));
            }
        }
    }
    assert_clean(problems);
}

/// `text` with every file a pod mounts under `/etc/hyapp/tls/` or
/// `/etc/hyapp/grpc-tls/` (CA bundles, certificates and keys from Secrets)
/// moved to a sample under `dir`: a PEM key for a name with `key` in it, the
/// matching server certificate for `tls.crt`, a CA certificate otherwise, so
/// the services' start-up checks read real files (a certificate and its key
/// must belong together).
fn with_sample_mounted_files(text: &str, pki: &testkit::pki::TestPki, dir: &Path) -> String {
    let mut text = text.to_owned();
    for mount in ["/etc/hyapp/tls/", "/etc/hyapp/grpc-tls/"] {
        let names: BTreeSet<String> = text
            .match_indices(mount)
            .map(|(at, _)| {
                text[at + mount.len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || "._-/".contains(*c))
                    .collect()
            })
            .collect();
        let samples = dir.join("mounted");
        std::fs::create_dir_all(&samples).unwrap();
        for name in names {
            let source = if name.contains("key") {
                &pki.server_key
            } else if name == "tls.crt" {
                &pki.server_cert
            } else {
                &pki.ca
            };
            let sample = samples.join(&name);
            std::fs::create_dir_all(sample.parent().unwrap()).unwrap();
            std::fs::copy(source, sample).unwrap();
        }
        text = text.replace(mount, &format!("{}/", samples.display()));
    }
    text
}

#[test]
fn loader_rejects_a_bad_value() {
    let model = model();
    let app = model.app("outbox-relay").unwrap();
    let file = root().join("services/outbox-relay/configs/outbox-relay.docker.yaml");
    let env = [(
        "RELAY__OUTBOX_WORKER__POLL_INTERVAL".to_string(),
        "soon".to_string(),
    )]
    .into();
    let error = load_any("outbox-relay", app, &file, &env).unwrap_err();
    assert!(error.contains("soon"), "{error}");
}
