//! The replay's pages: a dry run — what a replay would change, and which of
//! those rows `ops.replay_max_age` refuses and why — with the replay form
//! for exactly that set, and the replay's result.

use super::html::{escape, hidden};
use super::pages::{FilterForm, dead_letter_table};
use crate::ops::Replay;
use std::fmt::Write as _;

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
) -> String {
    let letters = &replay.replayed;
    let mut out = format!(
        "<p id=\"dry-run-count\">A replay would put <b>{}</b> dead letters back to pending \
         (same event ids, fresh retry budget):</p>",
        letters.len()
    );
    out.push_str(&dead_letter_table("would-replay", letters));
    if !replay.too_old.is_empty() {
        let _ = write!(
            out,
            "<p class=\"err\" id=\"too-old-count\">{} of them are refused unless forced:</p><ul id=\"too-old\">",
            replay.too_old.len()
        );
        for row in &replay.too_old {
            let _ = write!(
                out,
                "<li>event {}: {}</li>",
                escape(&row.event_id),
                escape(&row.why)
            );
        }
        out.push_str("</ul>");
    }
    if letters.is_empty() {
        return out;
    }
    if read_only {
        out.push_str("<p class=\"muted\">Read-only session: no replay.</p>");
        return out;
    }
    let who = match operator {
        Some(name) => format!("<span class=\"muted\">as {}</span>", escape(name)),
        None => "<input name=\"operator\" placeholder=\"operator\" required \
                 pattern=\"[A-Za-z0-9_.:@-]{1,64}\">"
            .to_owned(),
    };
    let force = if replay.too_old.is_empty() {
        ""
    } else {
        "<label><input type=\"checkbox\" name=\"force\" value=\"true\" id=\"force\"> \
         replay the rows older than ops.replay_max_age too</label>"
    };
    let _ = write!(
        out,
        "<form method=\"post\" action=\"/console/dead-letters/replay\">{csrf}{fields}{who}\
         <input name=\"reason\" placeholder=\"reason (optional)\" maxlength=\"512\">{force}\
         <button type=\"submit\" id=\"replay\">Replay these {count}</button></form>",
        csrf = hidden("csrf", csrf),
        fields = filter.hidden_fields(),
        count = letters.len()
    );
    out
}

/// A replay's result.
pub fn replayed(replay: &Replay) -> String {
    let letters = &replay.replayed;
    let forced = if replay.forced {
        " (forced past ops.replay_max_age)"
    } else {
        ""
    };
    let mut out = format!(
        "<p class=\"ok\" id=\"result\">Replayed {} dead letters: back to pending{forced}.</p>",
        letters.len()
    );
    out.push_str(&dead_letter_table("replayed", letters));
    out.push_str("<p><a href=\"/console/audit\">Audit log</a></p>");
    out
}
