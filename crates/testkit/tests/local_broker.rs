//! The broker binary's commands (`tools/local-broker`), run the way xtask
//! and testkit run them: a broker on a free port, then `topic create` and
//! `user create` against it. SCRAM logins with the users it creates are
//! proved by `kafka_security.rs`.

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};

/// A broker process, killed when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("a free port")
}

fn broker_args(port: u16, storage: &str) -> Vec<String> {
    let url = format!("tcp://127.0.0.1:{port}");
    [
        "broker",
        "--listener-url",
        &url,
        "--advertised-listener-url",
        &url,
    ]
    .into_iter()
    .map(String::from)
    .chain(["--storage-engine".into(), storage.into()])
    .collect()
}

/// Starts an in-memory broker on `port` and waits until it accepts connections.
fn start_broker(port: u16) -> Running {
    let child = Command::new(testkit::tansu_binary())
        .args(broker_args(port, "memory://tansu/"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the broker");
    let mut running = Running(child);
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            running.0.try_wait().expect("poll broker").is_none(),
            "the broker exited during start-up"
        );
        assert!(
            Instant::now() < deadline,
            "the broker did not listen within 30 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    running
}

/// Runs a command of the binary, failing the test if it has not ended
/// within a minute (a client that retried forever would hang the suite).
fn run<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Output {
    let mut child = Command::new(testkit::tansu_binary())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the broker binary");
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().expect("poll command").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the broker binary did not end within a minute");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("command output")
}

#[test]
fn version_names_the_tansu_release() {
    let output = run(&["--version"]);
    assert!(output.status.success());
    assert!(String::from_utf8_lossy(&output.stdout).contains("0.6.0"));
}

#[test]
fn topic_create_makes_the_partitions_asked_for() {
    let port = free_port();
    let _broker = start_broker(port);
    let url = format!("tcp://127.0.0.1:{port}");
    let output = run(&[
        "topic",
        "create",
        "orders",
        "--partitions",
        "4",
        "--broker",
        &url,
    ]);
    assert!(
        output.status.success(),
        "topic create failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", format!("127.0.0.1:{port}"))
        .set("group.id", "local-broker-test")
        .create()
        .expect("consumer");
    let metadata = consumer
        .fetch_metadata(Some("orders"), Duration::from_secs(10))
        .expect("metadata");
    let topic = &metadata.topics()[0];
    assert_eq!(topic.name(), "orders");
    assert_eq!(topic.error(), None);
    assert_eq!(topic.partitions().len(), 4);
}

#[test]
fn user_create_without_a_broker_fails_and_says_where_it_looked() {
    let port = free_port();
    let url = format!("tcp://127.0.0.1:{port}");
    let output = run(&["user", "create", "alice", "secret", "--broker", &url]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains(&port.to_string()), "stderr: {stderr}");
}

#[test]
fn an_unknown_storage_engine_is_refused_at_start() {
    let output = run(&broker_args(free_port(), "nosuch://x"));
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("cannot build the broker"),
        "stderr: {stderr}"
    );
}
