//! The hot-room scenario's rows: the busiest second of each group against
//! Tencent's limit, every gift shown once, and the latency of kicks and of
//! the ordinary rooms beside the storm against their baseline.

use super::{HOT, LIMIT, Outcome, group_of};
use crate::report::{Report, Row};

/// Most messages in any window of 1,000 ms ending at a message: the fake
/// counts the same way on its monotonic clock, so the two agree up to
/// rounding to the millisecond.
fn busiest_second(times: &[u64]) -> u64 {
    let mut times = times.to_vec();
    times.sort_unstable();
    let mut first = 0;
    let window = |last: usize| {
        while times[last] - times[first] >= 1_000 {
            first += 1;
        }
        last - first + 1
    };
    (0..times.len()).map(window).max().unwrap_or(0) as u64
}

/// The `quantile` of `values` (0 when empty).
fn quantile(values: &[i64], quantile: f64) -> f64 {
    let mut values = values.to_vec();
    values.sort_unstable();
    let rank = ((values.len() as f64 * quantile).ceil() as usize).max(1);
    values.get(rank - 1).map_or(0.0, |value| *value as f64)
}

/// An informational row; the callers add target, baseline and verdict where they have one.
fn row(scenario: &str, metric: &str, measured: f64, note: String) -> Row {
    let scenario = format!("hot-room {scenario}");
    let (metric, target, baseline, ratio, pass) = (metric.into(), None, None, None, None);
    Row {
        scenario,
        metric,
        measured,
        target,
        baseline,
        ratio,
        pass,
        note,
    }
}

/// The scenario's rows and its one-line summary.
pub(super) fn add_rows(report: &mut Report, wanted: f64, stormy: &Outcome, alone: &Outcome) {
    let hot = &stormy.hot;
    let slow = if hot.rate() < 0.99 * wanted {
        "; the machine could not sustain the target rate"
    } else {
        ""
    };
    let (gifts, kicks, seconds) = (hot.gifts.len(), hot.kicks, hot.seconds);
    let note = format!("{gifts} gifts + {kicks} kicks in {seconds:.1} s{slow}");
    let mut produced = row("storm produced", "gifts/s", hot.rate(), note);
    produced.target = Some(format!(">= {wanted:.0}"));
    report.add(produced);
    let hot_group = group_of(HOT);
    for (which, group) in [("any group", None), ("hot room", Some(hot_group.as_str()))] {
        let (fake, ours) = busiest_seconds(stormy, group);
        let agree = if fake == ours { "agrees" } else { "DISAGREES" };
        let note = format!("fake's peak_per_second; from received_at_ms {ours} ({agree})");
        let name = format!("busiest second, {which}");
        let mut busiest = row(&name, "msgs/s", fake as f64, note);
        busiest.target = Some(format!("<= {LIMIT}"));
        busiest.pass = Some(fake <= LIMIT && ours <= LIMIT);
        report.add(busiest);
    }
    gift_rows(report, stormy);
    latency_rows(report, stormy, alone);
}

/// The busiest second of `group` (or of any group): the fake's count and ours.
fn busiest_seconds(stormy: &Outcome, group: Option<&str>) -> (u64, u64) {
    let wanted = |id: &String| group.is_none_or(|group| group == id);
    let fake = stormy.stats.groups.iter().filter(|(id, _)| wanted(id));
    let ours = stormy.figures.received.iter().filter(|(id, _)| wanted(id));
    let fake = fake.map(|(_, stats)| stats.peak_per_second).max();
    let ours = ours.map(|(_, times)| busiest_second(times)).max();
    (fake.unwrap_or(0), ours.unwrap_or(0))
}

/// Gifts shown vs published, the merge ratio and the frequency drops.
fn gift_rows(report: &mut Report, stormy: &Outcome) {
    let (figures, published) = (&stormy.figures, &stormy.hot.gifts);
    let shown = &figures.gifts_shown;
    let times_shown = |id: &String| shown.get(id).copied().unwrap_or(0);
    let once = published.iter().filter(|id| times_shown(id) == 1).count();
    let missing = published.iter().filter(|id| times_shown(id) == 0).count();
    let repeated = shown.values().filter(|times| **times > 1).count();
    // The ids shown are distinct: those not missing were published, the rest were not.
    let (total, forgotten) = (published.len(), stormy.stats.forgotten);
    let unknown = shown.len() - (total - missing);
    let note = format!(
        "{total} published; {repeated} repeated, {missing} missing, {unknown} never published; \
         {forgotten} messages forgotten by the fake"
    );
    let mut gifts = row("gifts shown once", "gifts", once as f64, note);
    gifts.target = Some(format!("= {total}"));
    gifts.pass = Some(once == total && repeated + missing + unknown == 0);
    report.add(gifts);
    let groups = &stormy.stats.groups;
    let hot = groups.get(&group_of(HOT)).cloned().unwrap_or_default();
    let (times, batches) = (&figures.gift_times, figures.gift_batches);
    let merge = shown.len() as f64 / times.len().max(1) as f64;
    let span = (times.last().unwrap_or(&0) - times.first().unwrap_or(&0)) as f64 / 1e3;
    let rate = times.len() as f64 / span.max(1e-3);
    let note = format!(
        "{} messages to the hot room; {} with gifts ({batches} batches) over {span:.1} s, \
         {rate:.1} a second",
        hot.delivered,
        times.len()
    );
    report.add(row("merge ratio", "gifts/msg", merge, note));
    let (dropped, oversized) = (stormy.stats.freq_dropped, stormy.stats.oversized);
    let note = format!("hot room {}; {oversized} oversized", hot.freq_dropped);
    let mut drops = row("freq_dropped, all groups", "messages", dropped as f64, note);
    drops.target = Some("= 0".into());
    drops.pass = Some(dropped == 0);
    report.add(drops);
}

/// Kick → IM, the ordinary rooms' publish → IM against them alone, and the
/// lag's return to zero; then the summary line.
fn latency_rows(report: &mut Report, stormy: &Outcome, alone: &Outcome) {
    let (storm, calm) = (&stormy.figures, &alone.figures);
    let (kick_p50, kick_max) = (quantile(&storm.kick_ms, 0.5), quantile(&storm.kick_ms, 1.0));
    let note = format!(
        "{} of {} kicks shown",
        storm.kick_ms.len(),
        stormy.hot.kicks
    );
    report.add(row("kick -> IM", "p50 ms", kick_p50, note.clone()));
    report.add(row("kick -> IM", "max ms", kick_max, note));
    let (ordinary, ordinary_calm) = (storm.ordinary_ms(), calm.ordinary_ms());
    let (p50, p50_calm) = (quantile(&ordinary, 0.5), quantile(&ordinary_calm, 0.5));
    let shown = format!("{} of {} shown", ordinary.len(), stormy.ordinary);
    let note = format!("{shown}; p50 {p50:.0} ms ({p50_calm:.0} alone)");
    report.add(compared(
        "ordinary pub -> IM",
        &ordinary,
        &ordinary_calm,
        note,
    ));
    let note = format!("the {} rooms on the hot room's partition", storm.neighbours);
    let (near, near_calm) = (&storm.neighbour_ms, &calm.neighbour_ms);
    report.add(compared("ordinary, hot partition", near, near_calm, note));
    let note = "the rooms on the other partitions".to_string();
    let (far, far_calm) = (&storm.other_ms, &calm.other_ms);
    report.add(compared("ordinary, other partitions", far, far_calm, note));
    let lag = stormy.lag_zero_after.as_secs_f64();
    let lag_calm = alone.lag_zero_after.as_secs_f64();
    let note = "committed offsets = high watermarks, commits every 100 ms; baseline: alone".into();
    let mut lag_row = row("lag 0 after the storm", "s", lag, note);
    lag_row.baseline = Some(lag_calm);
    lag_row.ratio = Some(lag / lag_calm.max(1e-3));
    report.add(lag_row);
    let (rate, seconds) = (stormy.hot.rate(), stormy.hot.seconds);
    let (p99, p99_calm) = (quantile(&ordinary, 0.99), quantile(&ordinary_calm, 0.99));
    println!(
        "  hot-room: {rate:.0} gifts/s for {seconds:.1} s; kick p50 {kick_p50:.0} ms; \
         ordinary p99 {p99:.0} ms ({p99_calm:.0} ms alone); lag 0 {lag:.1} s after the storm"
    );
}

/// A publish → IM p99 row against the same rooms' p99 without the storm.
fn compared(name: &str, stormy_ms: &[i64], alone_ms: &[i64], note: String) -> Row {
    let (p99, p99_alone) = (quantile(stormy_ms, 0.99), quantile(alone_ms, 0.99));
    let mut row = row(name, "p99 ms", p99, format!("{note}; baseline: alone"));
    row.baseline = Some(p99_alone);
    row.ratio = Some(p99 / p99_alone.max(1.0));
    row
}
