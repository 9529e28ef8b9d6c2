//! Unit tests for membership and roles.

use super::super::test_support::*;
use crate::command::LeaveReason;
use crate::event::EventKind;
use crate::rejection::Rejection;
use crate::rules::RoomRules;
use crate::state::RoomState;

/// An open room with `rules`, the given users joined.
fn capped_room(rules: RoomRules, users: &[&str]) -> RoomState {
    let mut state = open_room_with(rules);
    for user in users {
        state = ok(&state, &join_cmd(user), T0).state;
    }
    state
}

#[test]
fn join_adds_member() {
    let applied = ok(&open_room(), &join_cmd("u1"), T0 + 5);
    assert_eq!(applied.state.members["u1"].joined_at_ms, T0 + 5);
    assert_eq!(
        kinds(&applied),
        vec![EventKind::RoomUserJoined {
            user_id: "u1".into()
        }]
    );
}

#[test]
fn join_twice_is_rejected() {
    let room = room_with(&["u1"]);
    assert_eq!(err(&room, &join_cmd("u1"), T0), Rejection::AlreadyMember);
    assert_eq!(err(&room, &join_cmd("owner"), T0), Rejection::AlreadyMember);
}

#[test]
fn banned_user_cannot_join_until_ban_expires() {
    let room = ok(
        &room_with(&["u1"]),
        &kick_cmd("owner", "u1", T0 + 1_000),
        T0,
    )
    .state;
    assert_eq!(room.bans.get("u1"), Some(&(T0 + 1_000)));
    assert_eq!(
        err(&room, &join_cmd("u1"), T0 + 999),
        Rejection::Banned {
            until_ms: T0 + 1_000
        }
    );
    // The deadline itself is no longer banned, and the dead entry is pruned.
    let rejoined = ok(&room, &join_cmd("u1"), T0 + 1_000).state;
    assert!(rejoined.is_member("u1"));
    assert!(!rejoined.bans.contains_key("u1"));
}

#[test]
fn leave_removes_member() {
    for reason in [LeaveReason::Voluntary, LeaveReason::PresenceExpired] {
        let applied = ok(&room_with(&["u1"]), &leave_cmd("u1", reason), T0);
        assert!(!applied.state.is_member("u1"));
        assert_eq!(
            kinds(&applied),
            vec![EventKind::RoomUserLeft {
                user_id: "u1".into(),
                reason
            }]
        );
    }
}

#[test]
fn seated_user_leaves_mic_before_room() {
    let room = ok(&room_with(&["u1"]), &take_cmd("u1", 4), T0).state;
    let applied = ok(&room, &leave_cmd("u1", LeaveReason::Voluntary), T0);
    assert_eq!(applied.state.seats[4].user_id, None);
    assert_eq!(
        kinds(&applied),
        vec![
            EventKind::RoomMicLeft {
                user_id: "u1".into(),
                seat_index: 4
            },
            EventKind::RoomUserLeft {
                user_id: "u1".into(),
                reason: LeaveReason::Voluntary
            },
        ]
    );
}

#[test]
fn leave_rejections() {
    let room = room_with(&["u1"]);
    assert!(matches!(
        err(&room, &leave_cmd("u1", LeaveReason::Kicked), T0),
        Rejection::InvalidArgument { .. }
    ));
    assert_eq!(
        err(&room, &leave_cmd("u2", LeaveReason::Voluntary), T0),
        Rejection::NotAMember {
            user_id: "u2".into()
        }
    );
}

#[test]
fn owner_may_leave_and_come_back() {
    let room = ok(
        &open_room(),
        &leave_cmd("owner", LeaveReason::Voluntary),
        T0,
    )
    .state;
    assert!(!room.is_member("owner"));
    assert!(ok(&room, &join_cmd("owner"), T0).state.is_member("owner"));
}

#[test]
fn kick_seated_member_with_ban() {
    let room = ok(&room_with(&["u1"]), &take_cmd("u1", 1), T0).state;
    let applied = ok(&room, &kick_cmd("owner", "u1", T0 + 60_000), T0);
    assert!(!applied.state.is_member("u1"));
    assert_eq!(applied.state.seats[1].user_id, None);
    assert_eq!(applied.state.bans.get("u1"), Some(&(T0 + 60_000)));
    assert_eq!(
        kinds(&applied),
        vec![
            EventKind::RoomMicLeft {
                user_id: "u1".into(),
                seat_index: 1
            },
            EventKind::RoomUserKicked {
                actor_id: "owner".into(),
                target_id: "u1".into(),
                ban_until_ms: T0 + 60_000
            },
            EventKind::RoomUserLeft {
                user_id: "u1".into(),
                reason: LeaveReason::Kicked
            },
        ]
    );
}

#[test]
fn kick_without_future_deadline_records_no_ban() {
    for ban_until_ms in [0, T0] {
        let applied = ok(
            &room_with(&["u1"]),
            &kick_cmd("owner", "u1", ban_until_ms),
            T0,
        );
        assert!(applied.state.bans.is_empty());
        assert!(
            ok(&applied.state, &join_cmd("u1"), T0)
                .state
                .is_member("u1")
        );
    }
}

#[test]
fn kick_permissions() {
    let room = room_with(&["adm", "adm2", "u1", "u2"]);
    let room = ok(&room, &admin_cmd("owner", "adm", true), T0).state;
    let room = ok(&room, &admin_cmd("owner", "adm2", true), T0).state;
    // A present admin may kick a plain member.
    assert!(
        !ok(&room, &kick_cmd("adm", "u1", 0), T0)
            .state
            .is_member("u1")
    );
    // Plain members and strangers may not kick.
    for actor in ["u2", "stranger"] {
        assert_eq!(
            err(&room, &kick_cmd(actor, "u1", 0), T0),
            Rejection::PermissionDenied {
                actor_id: actor.into()
            }
        );
    }
    // Nobody kicks the owner.
    assert_eq!(
        err(&room, &kick_cmd("owner", "owner", 0), T0),
        Rejection::CannotKickOwner
    );
    assert_eq!(
        err(&room, &kick_cmd("adm", "owner", 0), T0),
        Rejection::CannotKickOwner
    );
    // Admins cannot kick admins (themselves included).
    for target in ["adm2", "adm"] {
        assert_eq!(
            err(&room, &kick_cmd("adm", target, 0), T0),
            Rejection::PermissionDenied {
                actor_id: "adm".into()
            }
        );
    }
    // Target must be present.
    assert_eq!(
        err(&room, &kick_cmd("owner", "ghost", 0), T0),
        Rejection::NotAMember {
            user_id: "ghost".into()
        }
    );
}

#[test]
fn owner_kicking_admin_revokes_role() {
    let room = ok(&room_with(&["adm"]), &admin_cmd("owner", "adm", true), T0).state;
    let applied = ok(&room, &kick_cmd("owner", "adm", 0), T0);
    assert!(!applied.state.admins.contains("adm"));
    assert_eq!(
        kinds(&applied).last(),
        Some(&EventKind::RoomAdminChanged {
            target_id: "adm".into(),
            admin: false
        })
    );
}

#[test]
fn absent_admin_loses_management_rights() {
    let room = ok(
        &room_with(&["adm", "u1"]),
        &admin_cmd("owner", "adm", true),
        T0,
    )
    .state;
    let room = ok(&room, &leave_cmd("adm", LeaveReason::Voluntary), T0).state;
    assert!(room.admins.contains("adm"), "role survives leaving");
    assert_eq!(
        err(&room, &kick_cmd("adm", "u1", 0), T0),
        Rejection::PermissionDenied {
            actor_id: "adm".into()
        }
    );
    let back = ok(&room, &join_cmd("adm"), T0).state;
    assert!(
        !ok(&back, &kick_cmd("adm", "u1", 0), T0)
            .state
            .is_member("u1")
    );
}

#[test]
fn owner_grants_and_revokes_admin() {
    let granted = ok(&room_with(&["u1"]), &admin_cmd("owner", "u1", true), T0);
    assert!(granted.state.admins.contains("u1"));
    assert_eq!(
        kinds(&granted),
        vec![EventKind::RoomAdminChanged {
            target_id: "u1".into(),
            admin: true
        }]
    );
    let revoked = ok(&granted.state, &admin_cmd("owner", "u1", false), T0);
    assert!(!revoked.state.admins.contains("u1"));
    assert_eq!(
        kinds(&revoked),
        vec![EventKind::RoomAdminChanged {
            target_id: "u1".into(),
            admin: false
        }]
    );
}

#[test]
fn absent_admin_can_still_be_revoked() {
    let room = ok(&room_with(&["u1"]), &admin_cmd("owner", "u1", true), T0).state;
    let room = ok(&room, &leave_cmd("u1", LeaveReason::PresenceExpired), T0).state;
    assert!(
        !ok(&room, &admin_cmd("owner", "u1", false), T0)
            .state
            .admins
            .contains("u1")
    );
}

#[test]
fn set_admin_rejections() {
    let room = ok(
        &room_with(&["adm", "u1"]),
        &admin_cmd("owner", "adm", true),
        T0,
    )
    .state;
    // Only the owner manages roles, not admins.
    assert_eq!(
        err(&room, &admin_cmd("adm", "u1", true), T0),
        Rejection::PermissionDenied {
            actor_id: "adm".into()
        }
    );
    assert!(matches!(
        err(&room, &admin_cmd("owner", "owner", false), T0),
        Rejection::InvalidArgument { .. }
    ));
    for admin in [true, false] {
        assert_eq!(
            err(&room, &admin_cmd("owner", "ghost", admin), T0),
            Rejection::NotAMember {
                user_id: "ghost".into()
            }
        );
    }
    assert_eq!(
        err(&room, &admin_cmd("owner", "adm", true), T0),
        Rejection::AdminUnchanged {
            target_id: "adm".into(),
            admin: true
        }
    );
    assert_eq!(
        err(&room, &admin_cmd("owner", "u1", false), T0),
        Rejection::AdminUnchanged {
            target_id: "u1".into(),
            admin: false
        }
    );
}

#[test]
fn a_full_room_refuses_newcomers_but_not_members_or_its_owner() {
    let rules = RoomRules {
        max_members: 3,
        ..RoomRules::default()
    };
    // The owner and two users: the room is full.
    let room = capped_room(rules, &["u1", "u2"]);
    assert_eq!(
        err(&room, &join_cmd("u3"), T0),
        Rejection::RoomFull { max_members: 3 }
    );
    // A member joining again is told so, not that the room is full.
    assert_eq!(err(&room, &join_cmd("u1"), T0), Rejection::AlreadyMember);
    // A seat freed by a leave lets the next one in.
    let left = ok(&room, &leave_cmd("u2", LeaveReason::Voluntary), T0).state;
    assert!(ok(&left, &join_cmd("u3"), T0).state.is_member("u3"));
    // The owner always gets back into their own room, full or not.
    let owner_out = ok(&room, &leave_cmd("owner", LeaveReason::Voluntary), T0).state;
    let refilled = ok(&owner_out, &join_cmd("u3"), T0).state;
    assert_eq!(refilled.members.len(), 3);
    let back = ok(&refilled, &join_cmd("owner"), T0).state;
    assert!(back.is_member("owner"));
    assert_eq!(back.members.len(), 4);
}

#[test]
fn a_join_refused_by_the_member_cap_changes_nothing() {
    let rules = RoomRules {
        max_members: 2,
        ..RoomRules::default()
    };
    // An expired ban would be pruned by an accepted join; a refused one keeps it.
    let room = capped_room(rules, &["u1"]);
    let room = ok(&room, &kick_cmd("owner", "u1", T0 + 10), T0).state;
    let room = ok(&room, &join_cmd("u2"), T0).state;
    let before = room.clone();
    assert_eq!(
        err(&room, &join_cmd("u1"), T0 + 20),
        Rejection::RoomFull { max_members: 2 }
    );
    assert_eq!(room, before);
    assert!(room.bans.contains_key("u1"));
}

#[test]
fn admins_are_capped_but_existing_admins_and_revocations_are_not_refused() {
    let rules = RoomRules {
        max_admins: 2,
        ..RoomRules::default()
    };
    let mut room = capped_room(rules, &["a1", "a2", "u1"]);
    room = ok(&room, &admin_cmd("owner", "a1", true), T0).state;
    room = ok(&room, &admin_cmd("owner", "a2", true), T0).state;
    let before = room.clone();
    assert_eq!(
        err(&room, &admin_cmd("owner", "u1", true), T0),
        Rejection::TooManyAdmins { max_admins: 2 }
    );
    assert_eq!(room, before);
    // Granting an existing admin again is the usual no-op refusal, not the cap.
    assert_eq!(
        err(&room, &admin_cmd("owner", "a1", true), T0),
        Rejection::AdminUnchanged {
            target_id: "a1".into(),
            admin: true
        }
    );
    // Revoking is never refused, and frees a place.
    let revoked = ok(&room, &admin_cmd("owner", "a1", false), T0).state;
    assert!(
        ok(&revoked, &admin_cmd("owner", "u1", true), T0)
            .state
            .admins
            .contains("u1")
    );
}

#[test]
fn bans_in_force_are_capped() {
    let rules = RoomRules {
        max_bans: 2,
        ..RoomRules::default()
    };
    let mut room = capped_room(rules, &["u1", "u2", "u3"]);
    room = ok(&room, &kick_cmd("owner", "u1", T0 + 60_000), T0).state;
    room = ok(&room, &kick_cmd("owner", "u2", T0 + 60_000), T0).state;
    let before = room.clone();
    assert_eq!(
        err(&room, &kick_cmd("owner", "u3", T0 + 60_000), T0),
        Rejection::TooManyBans { max_bans: 2 }
    );
    assert_eq!(room, before);
    // A kick without a ban adds none, so the cap never refuses it.
    let kicked = ok(&room, &kick_cmd("owner", "u3", 0), T0).state;
    assert!(!kicked.is_member("u3"));
    assert_eq!(kicked.bans.len(), 2);
}

#[test]
fn expired_bans_are_pruned_before_counting() {
    let rules = RoomRules {
        max_bans: 2,
        ..RoomRules::default()
    };
    let mut room = capped_room(rules, &["u1", "u2", "u3"]);
    room = ok(&room, &kick_cmd("owner", "u1", T0 + 1_000), T0).state;
    room = ok(&room, &kick_cmd("owner", "u2", T0 + 60_000), T0).state;
    // At T0 + 1 000 u1's ban has run out: it no longer counts, and goes.
    let applied = ok(&room, &kick_cmd("owner", "u3", T0 + 60_000), T0 + 1_000);
    assert!(!applied.state.bans.contains_key("u1"));
    assert_eq!(applied.state.bans.len(), 2);
    assert_eq!(applied.state.bans.get("u3"), Some(&(T0 + 60_000)));
}
