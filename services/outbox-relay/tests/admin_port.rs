//! The relay's admin port runs on a thread of its own at a lower CPU
//! priority (`admin_cpu_nice`), serves there with a pool of its own, and
//! has closed its port once the relay has stopped.

mod common;

use common::service::service_config;
use common::*;
use outbox_relay::{app::App, config::RelayServiceConfig};
use service_kit::{Secret, low_priority::this_thread_nice};
use tokio_util::sync::CancellationToken;

/// The nice value of each of this process's threads named `name`, read from
/// `/proc/self/task/<tid>/stat` (field 19; the name in field 2 may hold
/// spaces and parentheses, so the fields are counted after its last `)`).
fn nice_of_threads_named(name: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let path = task.unwrap().path();
        let Ok(comm) = std::fs::read_to_string(path.join("comm")) else {
            continue; // the thread ended meanwhile
        };
        if comm.trim_end() != name {
            continue;
        }
        let stat = std::fs::read_to_string(path.join("stat")).unwrap();
        let after_name = &stat[stat.rfind(')').unwrap() + 2..];
        // Fields 3.. follow the name; the nice value is field 19.
        let nice = after_name.split(' ').nth(19 - 3).unwrap();
        found.push(nice.parse().unwrap());
    }
    found
}

#[tokio::test]
async fn the_admin_port_serves_from_its_own_lower_priority_thread_until_the_relay_stops() {
    let db = testkit::TestDb::new().await;
    let config = RelayServiceConfig {
        admin_token: Secret::new("admin-port-token"),
        admin_cpu_nice: 6,
        admin_max_connections: 1,
        rocketmq: mq_config(&testkit::kafka_bootstrap(), &testkit::unique("ns")),
        ..service_config(&db.url, "relay-admin-port")
    };
    let app = App::build(config).await.unwrap();
    let addr = app.http_addr().unwrap();
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(app.run(shutdown.clone()));
    let client = reqwest::Client::new();

    // A database read through the port's own pool (one connection), twice
    // at once: the second waits for the first's connection and both answer.
    let status = || {
        client
            .get(format!("http://{addr}/admin/status"))
            .bearer_auth("admin-port-token")
            .send()
    };
    let (first, second) = tokio::join!(status(), status());
    assert_eq!(first.unwrap().status(), 200);
    assert_eq!(second.unwrap().status(), 200);

    let own = this_thread_nice().unwrap();
    assert_eq!(
        nice_of_threads_named("relay-admin"),
        vec![(own + 6).min(19)],
        "one admin thread, 6 below this thread's priority"
    );

    shutdown.cancel();
    running.await.unwrap().unwrap();
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "nothing listens on the admin port any more"
    );
}
