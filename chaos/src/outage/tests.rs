//! The measurement on hand-made timelines: which rooms a kill hit, where
//! each room's clock starts and stops, and what other faults excuse.

use super::*;

/// The kill of every case: room-service-2 at t = 10 s, back at 14 s.
const KILL: u64 = 10_000;

fn fault(kind: &str, target: &str, started_ms: u64, ended_ms: u64) -> FaultRecord {
    FaultRecord {
        at_ms: started_ms,
        kind: kind.into(),
        target: target.into(),
        started_ms,
        ended_ms,
        detail: String::new(),
    }
}

fn kill() -> FaultRecord {
    fault("kill", "room-service-2", KILL, 14_000)
}

fn command(
    room: &str,
    outcome: Outcome,
    served_by: &str,
    started: u64,
    answered: u64,
) -> CommandRecord {
    CommandRecord {
        command_id: format!("{room}-{started}"),
        room_id: room.into(),
        kind: "join".into(),
        outcome,
        detail: String::new(),
        attempts: 1,
        gift_value: 0,
        event_ids: vec![],
        sent_to: vec![served_by.into()],
        served_by: served_by.into(),
        reply_version: 0,
        started_ms: started,
        answered_ms: answered,
        retry_info_waits: 0,
    }
}

fn acked(room: &str, served_by: &str, started: u64, answered: u64) -> CommandRecord {
    command(room, Outcome::Acked, served_by, started, answered)
}

/// Room a held by the killed instance, room b by another; b's calls go on.
fn timeline() -> Vec<CommandRecord> {
    vec![
        acked("a", "room-service-2", 9_000, 9_010),
        acked("b", "room-service", 9_500, 9_510),
        // In flight at the kill, answered by the instance that took a over.
        acked("a", "room-service-3", 9_990, 11_200),
        acked("b", "room-service", 10_100, 10_110),
        acked("a", "room-service-3", 11_300, 11_310),
    ]
}

fn only(outages: &[KillOutage]) -> &KillOutage {
    assert_eq!(outages.len(), 1, "{outages:?}");
    &outages[0]
}

#[test]
fn a_room_the_killed_instance_held_counts_from_the_kill_to_its_first_reply() {
    let outages = measure(&timeline(), &[kill()], 3);
    let kill = only(&outages);
    assert_eq!((kill.held, kill.during_workload), (1, true));
    assert_eq!(kill.rooms.len(), 1);
    let room = &kill.rooms[0];
    assert_eq!(room.room_id, "a");
    assert_eq!((room.unavailable_ms, room.counted_ms()), (1_200, 1_200));
    assert!(room.recovered && room.excused_by.is_empty());
}

#[test]
fn the_clock_starts_at_the_first_call_when_none_was_in_flight() {
    let commands = vec![
        acked("a", "room-service-2", 9_000, 9_010),
        acked("a", "room-service", 13_000, 13_100),
    ];
    let outages = measure(&commands, &[kill()], 3);
    assert_eq!(only(&outages).rooms[0].unavailable_ms, 100);
}

#[test]
fn a_room_nobody_asked_about_is_held_but_not_measured() {
    let commands = vec![
        acked("a", "room-service-2", 9_000, 9_010),
        acked("b", "room-service", 9_000, 20_000),
    ];
    let outages = measure(&commands, &[kill()], 3);
    let kill = only(&outages);
    assert_eq!((kill.held, kill.rooms.len()), (1, 0));
}

#[test]
fn a_room_never_answered_again_is_unrecovered_until_the_last_answer() {
    let mut commands = timeline();
    commands.retain(|c| c.room_id != "a" || c.answered_ms < KILL);
    commands.push(command("a", Outcome::Unknown, "", 10_500, 70_500));
    commands.push(acked("b", "room-service", 80_000, 80_010));
    let outages = measure(&commands, &[kill()], 3);
    let room = &only(&outages).rooms[0];
    assert!(!room.recovered);
    assert_eq!(room.unavailable_ms, 80_010 - 10_500);
}

#[test]
fn a_rule_refusal_of_a_call_sent_after_the_kill_is_an_answer() {
    let mut commands = timeline();
    // In flight at the kill: may have been refused by the killed instance.
    commands.push(command("a", Outcome::Rejected, "", 9_995, 10_300));
    let outages = measure(&commands, &[kill()], 3);
    assert_eq!(only(&outages).rooms[0].unavailable_ms, 1_200);
    commands.push(command("a", Outcome::Rejected, "", 10_400, 10_700));
    let outages = measure(&commands, &[kill()], 3);
    assert_eq!(only(&outages).rooms[0].unavailable_ms, 700);
}

#[test]
fn a_reply_the_killed_instance_sent_before_dying_is_no_recovery() {
    let mut commands = timeline();
    commands.push(acked("a", "room-service-2", 9_995, 10_002));
    let outages = measure(&commands, &[kill()], 3);
    assert_eq!(only(&outages).rooms[0].unavailable_ms, 1_200);
}

#[test]
fn other_faults_on_the_command_path_excuse_what_they_cover() {
    let commands = vec![
        acked("a", "room-service-2", 9_000, 9_010),
        acked("a", "room-service", 9_999, 15_000),
    ];
    let faults = [
        kill(),
        // Covers 10.5 s to 13.5 s (its end plus the linger).
        fault("mysql-restart", "mariadb", 10_500, 11_500),
        fault("im-fault", "fake-tencent-im", 10_000, 10_000),
        fault("kill", "notice-consumer", 9_000, 12_000),
    ];
    let outages = measure(&commands, &faults, 3);
    let room = &only(&outages).rooms[0];
    assert_eq!((room.unavailable_ms, room.excused_ms), (5_000, 3_000));
    assert_eq!(room.counted_ms(), 2_000);
    assert_eq!(
        room.excused_by.iter().collect::<Vec<_>>(),
        ["mysql-restart mariadb"]
    );
}

#[test]
fn only_room_service_kills_are_measured_and_other_room_service_faults_excuse() {
    let faults = [
        fault("kill", "outbox-relay", 9_000, 9_500),
        kill(),
        // Covers 10.8 s to 13 s; room a answered at 11.2 s.
        fault("graceful-restart", "room-service-3", 10_800, 11_000),
    ];
    let outages = measure(&timeline(), &faults, 3);
    let room = &only(&outages).rooms[0];
    assert_eq!((room.unavailable_ms, room.excused_ms), (1_200, 400));
}

#[test]
fn a_sole_instance_is_held_to_its_time_once_back() {
    let commands = vec![
        acked("a", "room-service", 9_000, 9_010),
        acked("a", "room-service", 9_999, 17_000),
    ];
    let sole = fault("kill", "room-service", KILL, 14_000);
    let alone = measure(&commands, std::slice::from_ref(&sole), 1);
    let room = &only(&alone).rooms[0];
    // Down until 14 s, then the linger to 16 s: 1 s counted.
    assert_eq!((room.unavailable_ms, room.counted_ms()), (7_000, 1_000));
    let scaled = measure(&commands, &[sole], 3);
    assert_eq!(only(&scaled).rooms[0].counted_ms(), 7_000);
}

#[test]
fn a_kill_after_the_workload_is_marked_so() {
    let late = fault("kill", "room-service-2", 50_000, 52_000);
    assert!(!only(&measure(&timeline(), &[late], 3)).during_workload);
}

#[test]
fn percentiles_and_unions() {
    assert_eq!(percentile(&mut [], 99), 0);
    assert_eq!(percentile(&mut [5], 99), 5);
    let mut hundred: Vec<u64> = (1..=100).rev().collect();
    assert_eq!(percentile(&mut hundred, 99), 99);
    assert_eq!(percentile(&mut hundred, 50), 50);
    assert_eq!(union_length(vec![(0, 10), (5, 15), (20, 25)]), 20);
    assert_eq!(union_length(vec![(0, 10), (2, 3)]), 10);
    assert_eq!(union_length(Vec::new()), 0);
}
