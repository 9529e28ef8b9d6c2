//! The schedule's determinism, its coverage round and the instances it names.

use super::*;

fn all() -> Vec<String> {
    KINDS.iter().map(|kind| kind.to_string()).collect()
}

fn scaled() -> Topology {
    Topology::new(3, 2).unwrap()
}

fn round(schedule: &mut Schedule) -> Vec<Fault> {
    let mut round = Vec::new();
    while !schedule.covered() {
        round.push(schedule.next());
    }
    round
}

#[test]
fn the_same_seed_gives_the_same_schedule() {
    let draw = |seed| {
        let mut schedule = Schedule::new(seed, &all(), &scaled());
        (0..30)
            .map(|_| (schedule.next(), schedule.gap()))
            .collect::<Vec<_>>()
    };
    assert_eq!(draw(11), draw(11));
    assert_ne!(draw(11), draw(12));
}

#[test]
fn the_coverage_round_crashes_and_restarts_every_service_and_stops_the_broker() {
    let topology = scaled();
    let round = round(&mut Schedule::new(3, &all(), &topology));
    let killed = |target: &str| {
        round
            .iter()
            .any(|f| matches!(f, Fault::Kill { target: t, .. } if *t == target))
    };
    for instance in ["room-service", "room-service-2", "room-service-3"] {
        assert!(killed(instance), "{instance}");
    }
    assert!(killed("outbox-relay") && killed("outbox-relay-2"));
    for instances in topology.services() {
        let service = instances[0];
        let hits = |kind: &str| {
            round
                .iter()
                .filter(|f| f.kind() == kind && topology::role_of(f.target()) == service)
                .count()
        };
        assert!(hits("kill") >= 1, "kill {service}");
        assert_eq!(hits("graceful-restart"), 1, "restart {service}");
        if crate::groups::is_consumer_service(service) {
            // One twin per group: each consumer crash costs a session timeout.
            assert_eq!(hits("kill"), 1, "kill {service}");
        }
    }
    for kind in [
        "broker-outage",
        "redis-restart",
        "mysql-restart",
        "im-fault",
        "wallet-fault",
        "net-latency",
        "net-stall",
        "net-reset",
        "net-half-open",
        "mysql-failover",
        "redis-failover",
    ] {
        assert!(round.iter().any(|f| f.kind() == kind), "{kind}");
    }
    let first_elsewhere = round.iter().position(|f| !f.on_command_path()).unwrap();
    assert!(
        round[first_elsewhere..]
            .iter()
            .all(|f| !f.on_command_path()),
        "room-service, MariaDB, Redis and wallet faults come first: {round:?}"
    );
    assert!(first_elsewhere >= 7, "{round:?}");
    let only_im = Schedule::new(3, &["im".to_string()], &topology).next();
    assert_eq!(only_im.kind(), "im-fault");
}

#[test]
fn process_faults_name_only_instances_that_run() {
    let single = Topology::new(1, 1).unwrap();
    let mut schedule = Schedule::new(5, &["kill".into(), "restart".into()], &single);
    let targets: Vec<&str> = (0..200).map(|_| schedule.next().target()).collect();
    assert!(targets.iter().all(|t| !t.ends_with("-3")), "{targets:?}");
    assert!(
        targets
            .iter()
            .all(|t| !t.ends_with("-2") || *t == "outbox-relay-2"),
        "{targets:?}"
    );
    let mut scaled = Schedule::new(5, &["kill".into(), "restart".into()], &scaled());
    let drawn: std::collections::BTreeSet<&str> =
        (0..400).map(|_| scaled.next().target()).collect();
    assert!(drawn.contains("room-service-3") && drawn.contains("notice-consumer-2"));
}
