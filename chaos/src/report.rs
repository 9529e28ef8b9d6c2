//! The checker's printed table: faults injected by kind, the counts (with
//! how the calls spread over the room-service instances), how long each
//! room-service kill left its rooms unavailable ([`kills`]), then one row
//! per promise with PASS/FAIL and the offending ids of a failure.

mod kills;

use crate::checks::Check;
use crate::ledger::{CommandRecord, FaultRecord, Outcome};
use crate::observe::Observation;
use crate::outage::KillOutage;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::Duration;

/// One line summarising the workload.
pub fn workload_line(records: &[CommandRecord]) -> String {
    let count = |outcome| records.iter().filter(|r| r.outcome == outcome).count();
    let retried = records.iter().filter(|r| r.attempts > 1).count();
    format!(
        "workload: {} commands issued, {} acknowledged, {} rejected, {} unknown, {retried} needed retries",
        records.len(),
        count(Outcome::Acked),
        count(Outcome::Rejected),
        count(Outcome::Unknown)
    )
}

/// `name count, …` over instance names; an empty name (no `x-room-served-by`
/// header on the answer) counts as `unnamed`.
fn per_instance<'a>(names: impl Iterator<Item = &'a String>) -> String {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for name in names {
        let name = if name.is_empty() { "unnamed" } else { name };
        *counts.entry(name).or_default() += 1;
    }
    if counts.is_empty() {
        return "none".into();
    }
    counts
        .iter()
        .map(|(name, count)| format!("{name} {count}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `batches (gifts)` over the recorded gift batches.
fn gift_batches(seen: &Observation) -> String {
    let batches: Vec<usize> = seen
        .im_messages
        .iter()
        .filter(|message| message.gift_batch)
        .map(|message| message.event_ids.len())
        .collect();
    format!("{} ({})", batches.len(), batches.iter().sum::<usize>())
}

/// What the workload and the fault schedule did.
#[derive(Debug, Clone, Copy)]
pub struct Run<'a> {
    /// The ledger.
    pub commands: &'a [CommandRecord],
    /// The faults applied.
    pub faults: &'a [FaultRecord],
    /// The room-service kills, measured.
    pub kills: &'a [KillOutage],
}

/// Which faults were injected, by kind and target, with the longest a
/// command waited for its answer during a fault of the kind ([`longest_wait`]).
fn faults_section(faults: &[FaultRecord], commands: &[CommandRecord]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nFaults injected (kind, count, longest wait of a command, targets)"
    );
    let mut by_kind: BTreeMap<&str, Vec<&FaultRecord>> = BTreeMap::new();
    for fault in faults {
        by_kind.entry(fault.kind.as_str()).or_default().push(fault);
    }
    if by_kind.is_empty() {
        let _ = writeln!(out, "  (none)");
    }
    for (kind, records) in &by_kind {
        let mut per_target: BTreeMap<&str, usize> = BTreeMap::new();
        for record in records {
            *per_target.entry(record.target.as_str()).or_default() += 1;
        }
        let listed: Vec<String> = per_target.iter().map(|(t, n)| format!("{t}×{n}")).collect();
        let longest = records
            .iter()
            .map(|fault| longest_wait(fault, commands))
            .max()
            .unwrap_or(0);
        let _ = writeln!(
            out,
            "  {kind:<16} {:>3}  {:>6.1}s  {}",
            records.len(),
            longest as f64 / 1000.0,
            listed.join(", ")
        );
    }
    out
}

/// The longest a command waited for its final answer while `fault` was on
/// (from the fault's start, or the command's first call if later, to the
/// answer): the unavailability a client following the gateway contract saw.
/// Faults run one after the other, so the wait is this fault's; a command
/// whose outcome stayed unknown counts until its retry budget ran out.
pub fn longest_wait(fault: &FaultRecord, commands: &[CommandRecord]) -> u64 {
    commands
        .iter()
        .filter(|command| command.started_ms > 0)
        .filter(|command| {
            command.started_ms <= fault.ended_ms && command.answered_ms >= fault.started_ms
        })
        .map(|command| {
            command
                .answered_ms
                .saturating_sub(command.started_ms.max(fault.started_ms))
        })
        .max()
        .unwrap_or(0)
}

/// What the workload issued and what the stores recorded.
fn counts_section(commands: &[CommandRecord], seen: &Observation) -> String {
    let mut out = String::new();
    let count = |outcome| commands.iter().filter(|r| r.outcome == outcome).count();
    let unknown_committed = commands
        .iter()
        .filter(|r| r.outcome == Outcome::Unknown && seen.log.contains_key(&r.command_id))
        .count();
    let _ = writeln!(out, "\nCounts");
    let rows = [
        ("commands issued", commands.len().to_string()),
        ("acknowledged", count(Outcome::Acked).to_string()),
        (
            "rejected (business rules)",
            count(Outcome::Rejected).to_string(),
        ),
        (
            "unknown outcome (committed / not)",
            format!(
                "{} ({unknown_committed} / {})",
                count(Outcome::Unknown),
                count(Outcome::Unknown) - unknown_committed
            ),
        ),
        (
            "retried with the same command_id",
            commands
                .iter()
                .filter(|r| r.attempts > 1)
                .count()
                .to_string(),
        ),
        (
            "retries after RetryInfo's delay",
            commands
                .iter()
                .map(|r| u64::from(r.retry_info_waits))
                .sum::<u64>()
                .to_string(),
        ),
        (
            "calls per room-service instance",
            per_instance(commands.iter().flat_map(|r| r.sent_to.iter())),
        ),
        (
            "acknowledged, by executing instance",
            per_instance(
                commands
                    .iter()
                    .filter(|r| r.outcome == Outcome::Acked)
                    .map(|r| &r.served_by),
            ),
        ),
        (
            "commands in the log (incl. system)",
            seen.log.len().to_string(),
        ),
        ("outbox events", seen.outbox.len().to_string()),
        (
            "IM resends absorbed by Random",
            seen.im_deduplicated.to_string(),
        ),
        ("IM gift batches (gifts they carried)", gift_batches(seen)),
        (
            "IM messages refused by the group limit",
            seen.im_freq_dropped.to_string(),
        ),
        (
            "wallet debits answered from idempotency",
            seen.wallet.debit_replays.to_string(),
        ),
    ];
    for (label, value) in rows {
        let _ = writeln!(out, "  {label:<40} {value}");
    }
    for (service, duplicates) in &seen.duplicates {
        let _ = writeln!(
            out,
            "  {:<40} {duplicates}",
            format!("duplicates suppressed, {service}*")
        );
    }
    if !seen.duplicates.is_empty() {
        let _ = writeln!(
            out,
            "  * since that process last started (counters restart with it)"
        );
    }
    out
}

/// The whole report.
pub fn render(run: &Run<'_>, seen: &Observation, checks: &[Check], settled_in: Duration) -> String {
    let mut out = faults_section(run.faults, run.commands);
    out.push_str(&counts_section(run.commands, seen));
    out.push_str(&kills::section(run.kills));
    let violations: usize = checks.iter().filter(|c| !c.passed).count();
    let _ = writeln!(
        out,
        "\nChecks (settled after {:.0}s)",
        settled_in.as_secs_f64()
    );
    for check in checks {
        let _ = writeln!(
            out,
            "  {} {:<70} {}",
            if check.passed { "PASS" } else { "FAIL" },
            check.name,
            check.summary
        );
        for offender in &check.offenders {
            let _ = writeln!(out, "         ✗ {offender}");
        }
    }
    let _ = writeln!(out, "\nviolations: {violations}");
    out
}
