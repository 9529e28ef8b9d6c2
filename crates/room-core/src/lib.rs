//! Room Cell: the pure, deterministic room state machine (commands in, new state + events out).
//!
//! [`apply`] takes the current [`RoomState`], a [`Command`] and the time, and
//! returns either the next state plus the [`RoomEvent`]s it produced, or a
//! [`Rejection`] (in which case nothing changed). The crate does no I/O, reads
//! no clock, draws no randomness and iterates only ordered collections, so the
//! service can rebuild a room by replaying its command log on any node and get
//! exactly the same state and events.

mod apply;
mod command;
mod event;
mod rejection;
mod rules;
mod state;

pub use apply::{Applied, apply, gift_total};
pub use command::{Command, LeaveReason};
pub use event::{EventKind, RoomEvent};
pub use rejection::{Rejection, RejectionKind};
pub use rules::{DAY_MS, RoomRules, SEAT_HARD_LIMIT, utc_day};
pub use state::{Member, RankEntry, RoomState, RoomStatus, Seat, TreasureBox, TreasureState};
