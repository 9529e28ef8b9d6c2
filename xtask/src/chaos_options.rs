//! The options of `cargo xtask chaos` and how they are parsed; durations
//! are read in the one spelling of `service_kit::duration` (its std-only
//! `spelling.rs`, compiled in here), with the unit required.

use crate::replication;
use crate::schedule;
use crate::topology::Topology;
use std::time::Duration;

#[path = "../../crates/service-kit/src/duration/spelling.rs"]
#[allow(dead_code, reason = "xtask reads flags, which require a unit")]
mod spelling;

/// Parsed options.
#[derive(Debug, Clone)]
pub struct Options {
    /// Seed of the workload and the fault schedule.
    pub seed: u64,
    /// How long the workload issues commands.
    pub duration: Duration,
    /// Fault kinds enabled.
    pub faults: Vec<String>,
    /// Rooms of the workload.
    pub rooms: u32,
    /// Fewest acknowledged commands every room must end with (the checker
    /// fails a run that committed less: it would prove nothing).
    pub min_acked_per_room: u32,
    /// room-service instances (1–3).
    pub room_services: usize,
    /// Instances of each consumer in its group (1–2).
    pub consumer_instances: usize,
    /// Longest a room held by a killed room-service instance may stay
    /// unavailable, other faults' time aside.
    pub max_unavailable: Duration,
    /// How the MariaDB replica follows the primary when `mysql-failover`
    /// is among the faults (then MariaDB runs as a primary and a replica).
    pub mysql_replication: replication::Mode,
}

impl Options {
    /// The replication the run's MariaDB needs: none unless a failover is scheduled.
    pub fn replication(&self) -> Option<replication::Mode> {
        self.faults
            .iter()
            .any(|kind| kind == "mysql-failover")
            .then_some(self.mysql_replication)
    }

    /// True when Redis runs behind Sentinel: a Redis failover is scheduled.
    pub fn sentinel(&self) -> bool {
        self.faults.iter().any(|kind| kind == "redis-failover")
    }
}

impl Options {
    /// Parses `--seed`, `--duration`, `--faults`, `--rooms`, `--min-acked-per-room`,
    /// `--room-services`, `--consumer-instances`, `--max-unavailable`,
    /// `--mysql-replication`.
    pub fn parse(args: &[String]) -> Result<Self, String> {
        let mut options = Options {
            seed: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|elapsed| elapsed.as_secs())
                .unwrap_or(1),
            duration: Duration::from_secs(120),
            faults: schedule::KINDS
                .iter()
                .map(|kind| kind.to_string())
                .collect(),
            rooms: 40,
            min_acked_per_room: 1,
            room_services: 3,
            consumer_instances: 2,
            max_unavailable: Duration::from_secs(5),
            mysql_replication: replication::Mode::SemiSync,
        };
        let mut rest = args.iter();
        while let Some(flag) = rest.next() {
            let mut value = || rest.next().ok_or_else(|| format!("{flag} needs a value"));
            match flag.as_str() {
                "--seed" => options.seed = value()?.parse().map_err(|_| "--seed wants a number")?,
                "--duration" => options.duration = parse_duration(value()?)?,
                "--max-unavailable" => options.max_unavailable = parse_duration(value()?)?,
                "--mysql-replication" => {
                    options.mysql_replication = replication::Mode::parse(value()?)?
                }
                "--rooms" => {
                    options.rooms = value()?.parse().map_err(|_| "--rooms wants a number")?
                }
                "--min-acked-per-room" => {
                    options.min_acked_per_room = value()?
                        .parse()
                        .map_err(|_| "--min-acked-per-room wants a number")?
                }
                "--room-services" => {
                    options.room_services = value()?
                        .parse()
                        .map_err(|_| "--room-services wants a number")?
                }
                "--consumer-instances" => {
                    options.consumer_instances = value()?
                        .parse()
                        .map_err(|_| "--consumer-instances wants a number")?
                }
                "--faults" => {
                    let list: Vec<String> = value()?
                        .split(',')
                        .map(|kind| kind.trim().to_string())
                        .collect();
                    if let Some(unknown) = list
                        .iter()
                        .find(|kind| !schedule::KINDS.contains(&kind.as_str()))
                    {
                        return Err(format!(
                            "--faults: unknown kind `{unknown}`; known: {}",
                            schedule::KINDS.join(",")
                        ));
                    }
                    options.faults = list;
                }
                other => {
                    return Err(format!(
                        "unknown option `{other}`; usage: cargo xtask chaos [--seed N] \
                         [--duration 10m] [--faults {}] [--rooms N] [--min-acked-per-room N] \
                         [--room-services 1-3] [--consumer-instances 1-2] \
                         [--max-unavailable 5s] [--mysql-replication semi-sync|async]",
                        schedule::KINDS.join(",")
                    ));
                }
            }
        }
        if options.rooms == 0 {
            return Err("--rooms must be positive".into());
        }
        if options.min_acked_per_room == 0 {
            return Err("--min-acked-per-room must be positive: a run that committed nothing proves nothing".into());
        }
        Topology::new(options.room_services, options.consumer_instances)?;
        Ok(options)
    }
}

/// A flag's duration in the one spelling of `service_kit::duration` (`2500ms`,
/// `90s`, `10m`, `1h`, `7d`), with the unit required: a bare `45` could mean
/// seconds to the person typing it and milliseconds to a config file, so it
/// is refused rather than guessed. Negative durations are refused too.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let millis = spelling::parse_millis_with_unit(text)?;
    u64::try_from(millis)
        .map(Duration::from_millis)
        .map_err(|_| {
            format!(
                "`{}` is negative; a duration flag needs one >= 0",
                text.trim()
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_options_parse() {
        assert_eq!(parse_duration("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("10m").unwrap(), Duration::from_secs(600));
        assert_eq!(
            parse_duration("7d").unwrap(),
            Duration::from_secs(7 * 86_400)
        );
        assert_eq!(
            parse_duration("2500ms").unwrap(),
            Duration::from_millis(2_500)
        );
        assert!(parse_duration("ten").is_err());
        // As in config files: the same units, no fractions, no other units;
        // a bare number (seconds here once, milliseconds in config) is refused.
        let bare = parse_duration("45").unwrap_err();
        assert!(bare.contains("45") && bare.contains("unit"), "{bare}");
        assert!(parse_duration("1.5s").is_err());
        assert!(parse_duration("5S").is_err());
        assert!(parse_duration("-1s").unwrap_err().contains("negative"));
        let args: Vec<String> = ["--seed", "7", "--faults", "kill,broker", "--duration", "2m"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let options = Options::parse(&args).unwrap();
        assert_eq!((options.seed, options.duration.as_secs()), (7, 120));
        assert_eq!(options.faults, ["kill", "broker"]);
        assert_eq!(options.min_acked_per_room, 1);
        assert_eq!(options.max_unavailable, Duration::from_secs(5));
        let strict: Vec<String> = ["--max-unavailable", "1500ms"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            Options::parse(&strict).unwrap().max_unavailable,
            Duration::from_millis(1_500)
        );
        assert_eq!((options.room_services, options.consumer_instances), (3, 2));
        let single: Vec<String> = ["--room-services", "1", "--consumer-instances", "1"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let single = Options::parse(&single).unwrap();
        assert_eq!((single.room_services, single.consumer_instances), (1, 1));
        let four: Vec<String> = ["--room-services", "4"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert!(Options::parse(&four).is_err());
        let strict: Vec<String> = ["--min-acked-per-room", "5"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(Options::parse(&strict).unwrap().min_acked_per_room, 5);
        let vacuous: Vec<String> = ["--min-acked-per-room", "0"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert!(Options::parse(&vacuous).is_err());
        assert_eq!(options.replication(), None);
        let failover: Vec<String> = ["--faults", "mysql-failover", "--mysql-replication", "async"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            Options::parse(&failover).unwrap().replication(),
            Some(replication::Mode::Async)
        );
        let bad: Vec<String> = ["--faults", "meteor"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert!(Options::parse(&bad).unwrap_err().contains("meteor"));
    }
}
