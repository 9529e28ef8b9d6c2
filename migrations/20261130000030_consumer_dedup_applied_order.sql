-- The order in which each consumer group applied events. `applied_seq` is
-- assigned by the dedup insert itself (AUTO_INCREMENT), so it needs no change
-- to any consumer; audits (the reliability checker of `cargo xtask chaos`)
-- read it per room to show that effects never went backwards in a room.
ALTER TABLE consumer_dedup
    ADD COLUMN applied_seq BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    ADD UNIQUE KEY uk_applied_seq (applied_seq);
