-- Refund retry budget of the gift saga (docs/design.md#gift-saga). Every
-- claim for compensation (the pipeline's or the recovery sweep's) is followed
-- by exactly one refund call and counts it here; once the refund of a claim
-- that reached `saga.max_refund_attempts` fails, the sweep moves the row to
-- the terminal status `failed` (the sender was debited and not refunded; the
-- wallet's error stays in last_error for the operator who refunds by hand).
-- `failed` rows are outside the sweep's status list, so idx_sweep no longer
-- finds them and no sweep retries them.
ALTER TABLE room_gift_saga
    ADD COLUMN refund_attempts INT UNSIGNED NOT NULL DEFAULT 0
        COMMENT 'Refund calls made (or about to be made) for this saga: one per claim for compensation';
