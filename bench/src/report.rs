//! The result table: one row per measured figure with its target, the
//! same-run baseline and the ratio, printed and written as JSON with machine info.

use serde::Serialize;

/// One measured figure.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Scenario and variant, e.g. `relay-drain (2 relays)`.
    pub scenario: String,
    /// What was measured, e.g. `events/s`.
    pub metric: String,
    /// Measured value.
    pub measured: f64,
    /// Target from the issue, as text (e.g. `>= 30000`), if any.
    pub target: Option<String>,
    /// Same-run baseline value, if any.
    pub baseline: Option<f64>,
    /// measured / baseline.
    pub ratio: Option<f64>,
    /// Whether the target (and ratio target) was met; `None` = informational.
    pub pass: Option<bool>,
    /// Free-form note (baseline name, limits).
    pub note: String,
}

/// All rows of a run.
#[derive(Debug, Serialize)]
pub struct Report {
    smoke: bool,
    machine: Machine,
    rows: Vec<Row>,
}

#[derive(Debug, Serialize)]
struct Machine {
    cpus: usize,
    memory_kib: u64,
    kernel: String,
}

impl Report {
    /// An empty report with machine info.
    pub fn new(smoke: bool) -> Self {
        let memory_kib = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|text| {
                text.lines()
                    .next()
                    .and_then(|line| line.split_whitespace().nth(1)?.parse().ok())
            })
            .unwrap_or(0);
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .to_string();
        let cpus = std::thread::available_parallelism()
            .map(usize::from)
            .unwrap_or(1);
        Self {
            smoke,
            machine: Machine {
                cpus,
                memory_kib,
                kernel,
            },
            rows: Vec::new(),
        }
    }

    /// Adds a row and prints it at once (long runs show progress).
    pub fn add(&mut self, row: Row) {
        println!(
            "  {:<38} {:>12.1} {:<10} {}",
            row.scenario,
            row.measured,
            row.metric,
            row.pass
                .map_or("", |pass| if pass { "PASS" } else { "MISS" })
        );
        self.rows.push(row);
    }

    /// Prints the final table.
    pub fn print(&self) {
        println!();
        println!(
            "{:<38} | {:<10} | {:>12} | {:<12} | {:>12} | {:>6} | {:<4} | note",
            "scenario", "metric", "measured", "target", "baseline", "ratio", "ok"
        );
        println!("{}", "-".repeat(130));
        for row in &self.rows {
            println!(
                "{:<38} | {:<10} | {:>12.1} | {:<12} | {:>12} | {:>6} | {:<4} | {}",
                row.scenario,
                row.metric,
                row.measured,
                row.target.clone().unwrap_or_default(),
                row.baseline
                    .map(|value| format!("{value:.1}"))
                    .unwrap_or_default(),
                row.ratio
                    .map(|value| format!("{value:.2}"))
                    .unwrap_or_default(),
                row.pass
                    .map_or("", |pass| if pass { "PASS" } else { "MISS" }),
                row.note
            );
        }
        if self.smoke {
            println!("(smoke run: sizes are tiny; figures are not meaningful)");
        }
    }

    /// Writes `results.json` into `dir`.
    pub fn write(&self, dir: &std::path::Path) -> anyhow::Result<()> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(if self.smoke {
            "results-smoke.json"
        } else {
            "results.json"
        });
        std::fs::write(&path, serde_json::to_vec_pretty(self)?)?;
        println!("results written to {}", path.display());
        Ok(())
    }
}
