//! The replay's pages: a dry run — what a replay would change, and which of
//! those rows `ops.replay_max_age` refuses and why — with the replay form
//! for exactly that set, and the replay's result.

use super::html::hidden;
use super::pages::{FilterForm, dead_letter_table, operator_field};
use crate::ops::Replay;
use maud::{Markup, html};

/// A dry run's result and the replay form for exactly that set (its
/// filter, frozen at the dry run's time and count). When rows are too old,
/// the form has a force box, unticked. `operator` is the session's named
/// operator: then the form asks for no name.
pub fn dry_run(
    filter: &FilterForm,
    replay: &Replay,
    csrf: &str,
    read_only: bool,
    operator: Option<&str>,
) -> Markup {
    let letters = &replay.replayed;
    html! {
        p id="dry-run-count" {
            "A replay would put " b { (letters.len()) }
            " dead letters back to pending (same event ids, fresh retry budget):"
        }
        (dead_letter_table("would-replay", letters))
        @if !replay.too_old.is_empty() {
            p class="err" id="too-old-count" {
                (replay.too_old.len()) " of them are refused unless forced:"
            }
            ul id="too-old" {
                @for row in &replay.too_old { li { "event " (row.event_id) ": " (row.why) } }
            }
        }
        @if !letters.is_empty() {
            @if read_only {
                p class="muted" { "Read-only session: no replay." }
            } @else {
                (replay_form(filter, replay, csrf, operator))
            }
        }
    }
}

/// The form that replays exactly the dry run's set.
fn replay_form(filter: &FilterForm, replay: &Replay, csrf: &str, operator: Option<&str>) -> Markup {
    html! {
        form method="post" action="/console/dead-letters/replay" {
            (hidden("csrf", csrf))
            (filter.hidden_fields())
            (operator_field(operator))
            input name="reason" placeholder="reason (optional)" maxlength="512";
            @if !replay.too_old.is_empty() {
                label {
                    input type="checkbox" name="force" value="true" id="force";
                    " replay the rows older than ops.replay_max_age too"
                }
            }
            button type="submit" id="replay" { "Replay these " (replay.replayed.len()) }
        }
    }
}

/// A replay's result.
pub fn replayed(replay: &Replay) -> Markup {
    let letters = &replay.replayed;
    let forced = if replay.forced {
        " (forced past ops.replay_max_age)"
    } else {
        ""
    };
    html! {
        p class="ok" id="result" {
            "Replayed " (letters.len()) " dead letters: back to pending" (forced) "."
        }
        (dead_letter_table("replayed", letters))
        p { a href="/console/audit" { "Audit log" } }
    }
}
