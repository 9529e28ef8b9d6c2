-- Dead letters (`status = 'failed'`) counted by an index, for the relay's
-- `room_outbox_failed` gauge and its alert, which holds while any row waits
-- for an operator (docs/runbooks.md#roomoutboxfailedrows).
--
-- Why a virtual column and not an index on `status`: `status` changes twice
-- in every row's life (pending -> delivering -> delivered), and each change
-- would move the row inside an index on it. `failed_id` is NULL for every
-- status but `failed`, so the relay's ordinary marks leave this index alone;
-- only a dead letter (and its replay) touches it. VIRTUAL, so adding it does
-- not rebuild the table; only the index is built.
ALTER TABLE room_outbox
    ADD COLUMN failed_id BIGINT UNSIGNED AS (IF(status = 'failed', id, NULL)) VIRTUAL
        COMMENT 'id of a row in status failed, NULL otherwise (indexed by idx_failed)',
    ADD KEY idx_failed (failed_id);
