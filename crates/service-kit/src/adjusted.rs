//! Values a service's configuration validation replaced instead of refusing
//! (docs/style.md, "Configuration"): a non-positive duration that means its
//! default, a count raised to its floor or cut to its cap. Each is recorded
//! as the key, the value given and the value used, and start-up logs one
//! warning per record, so no replacement is silent. One type and one set of
//! rules for room-service's sections, the relay's settings and the consumer
//! settings, so every service says it in the same words.

use crate::duration::ConfigDuration;
use std::fmt::{self, Display};

/// One replaced value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Adjusted {
    /// The key, as written in the file (`outbox_worker.batch_size`).
    pub key: String,
    /// The value the sources gave.
    pub given: String,
    /// The value used instead.
    pub used: String,
}

impl Display for Adjusted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: given {}, using {}", self.key, self.given, self.used)
    }
}

/// The replacements one validation made, in the order it met them.
#[derive(Debug, Default)]
pub struct Adjustments(Vec<Adjusted>);

impl Adjustments {
    /// Records that `key`'s `given` value was replaced by `used`.
    pub fn note(&mut self, key: &str, given: impl Display, used: impl Display) {
        self.0.push(Adjusted {
            key: key.to_owned(),
            given: given.to_string(),
            used: used.to_string(),
        });
    }

    /// `value` when positive, else `default` (recorded).
    pub fn positive(
        &mut self,
        key: &str,
        value: ConfigDuration,
        default: ConfigDuration,
    ) -> ConfigDuration {
        if value.is_positive() {
            return value;
        }
        self.note(key, value, default);
        default
    }

    /// `value`, raised to `floor` when below it (recorded).
    pub fn at_least<T: PartialOrd + Copy + Display>(&mut self, key: &str, value: T, floor: T) -> T {
        if value < floor {
            self.note(key, value, floor);
            return floor;
        }
        value
    }

    /// `value`, cut to `cap` when above it (recorded).
    pub fn at_most<T: PartialOrd + Copy + Display>(&mut self, key: &str, value: T, cap: T) -> T {
        if value > cap {
            self.note(key, value, cap);
            return cap;
        }
        value
    }

    /// The records, in order.
    pub fn into_vec(self) -> Vec<Adjusted> {
        self.0
    }
}

/// Logs one warning per replaced value, naming `component` (the service or
/// the consumer group whose settings they are).
pub fn warn_each(component: &str, adjusted: &[Adjusted]) {
    for adjusted in adjusted {
        tracing::warn!(component, adjusted = %adjusted, "config value replaced");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_replacement_names_its_key_the_value_given_and_the_value_used() {
        let mut adjustments = Adjustments::default();
        let default = ConfigDuration::from_secs(1);
        assert_eq!(
            adjustments.positive("a.wait", ConfigDuration::from_millis(0), default),
            default
        );
        assert_eq!(
            adjustments.positive("a.kept", ConfigDuration::from_millis(5), default),
            ConfigDuration::from_millis(5)
        );
        assert_eq!(adjustments.at_least("a.batch", 0, 1), 1);
        assert_eq!(adjustments.at_most("a.size", 9_000, 5_000), 5_000);
        assert_eq!(adjustments.at_most("a.small", 10, 5_000), 10);
        let lines: Vec<String> = adjustments
            .into_vec()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            lines,
            [
                "a.wait: given 0ms, using 1s",
                "a.batch: given 0, using 1",
                "a.size: given 9000, using 5000"
            ]
        );
    }
}
