//! Kafka consumer runtime: per-partition order, dedup by event_id, retries, dead letters.
