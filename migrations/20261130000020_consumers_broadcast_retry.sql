-- Retry bookkeeping for big-gift broadcasts, like notice_delivery_events:
-- the broadcast row commits with the gift's effect; its IM delivery is
-- attempted right after and, when that fails, retried from this table
-- (attempts / next_attempt_at_ms / last_error), ending `delivered` or `failed`.
ALTER TABLE activity_broadcasts
    ADD COLUMN attempts           INT UNSIGNED NOT NULL DEFAULT 0,
    ADD COLUMN next_attempt_at_ms BIGINT       NOT NULL DEFAULT 0,
    ADD COLUMN last_error         VARCHAR(512) NOT NULL DEFAULT '',
    ADD KEY idx_due (status, next_attempt_at_ms);
