//! `room_outbox.status` values (docs/design.md#outbox-row-statuses). Legacy
//! `published` rows, written by the phase-1 worker, read as delivered; no
//! current code writes it.

use crate::Error;
use std::str::FromStr;

/// Delivery state of one outbox row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OutboxStatus {
    /// Committed, not yet handled by a relay.
    Pending,
    /// Claimed by a relay until `lock_until_ms`.
    Delivering,
    /// Every publisher the mode requires accepted it (mq: the broker acknowledged it).
    Delivered,
    /// Last attempt failed; due again at `next_retry_at_ms`.
    Retryable,
    /// Dead letter after `max_retry_count`; replayable by an operator.
    Failed,
}

impl OutboxStatus {
    /// Every status the current code writes.
    pub const ALL: [OutboxStatus; 5] = [
        OutboxStatus::Pending,
        OutboxStatus::Delivering,
        OutboxStatus::Delivered,
        OutboxStatus::Retryable,
        OutboxStatus::Failed,
    ];

    /// The column value.
    pub const fn as_str(self) -> &'static str {
        match self {
            OutboxStatus::Pending => "pending",
            OutboxStatus::Delivering => "delivering",
            OutboxStatus::Delivered => "delivered",
            OutboxStatus::Retryable => "retryable",
            OutboxStatus::Failed => "failed",
        }
    }

    /// True while the relay still owes this row a publish.
    pub const fn is_open(self) -> bool {
        matches!(
            self,
            OutboxStatus::Pending | OutboxStatus::Delivering | OutboxStatus::Retryable
        )
    }
}

impl FromStr for OutboxStatus {
    type Err = Error;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        match value {
            "pending" => Ok(OutboxStatus::Pending),
            "delivering" => Ok(OutboxStatus::Delivering),
            // Phase-1 rows: published to IM means delivered for today's relay.
            "delivered" | "published" => Ok(OutboxStatus::Delivered),
            "retryable" => Ok(OutboxStatus::Retryable),
            "failed" => Ok(OutboxStatus::Failed),
            other => Err(Error::UnknownStatus(other.to_string())),
        }
    }
}

impl std::fmt::Display for OutboxStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_reads_legacy_published() {
        for status in OutboxStatus::ALL {
            assert_eq!(status.as_str().parse::<OutboxStatus>().unwrap(), status);
        }
        assert_eq!(
            "published".parse::<OutboxStatus>().unwrap(),
            OutboxStatus::Delivered
        );
        assert_eq!(
            "shipped".parse::<OutboxStatus>().unwrap_err(),
            Error::UnknownStatus("shipped".into())
        );
    }

    #[test]
    fn open_statuses_match_the_generated_column() {
        // migrations/…_room_outbox.sql: open_flag = status IN (pending, delivering, retryable)
        let open: Vec<_> = OutboxStatus::ALL
            .into_iter()
            .filter(|status| status.is_open())
            .collect();
        assert_eq!(
            open,
            [
                OutboxStatus::Pending,
                OutboxStatus::Delivering,
                OutboxStatus::Retryable
            ]
        );
    }
}
