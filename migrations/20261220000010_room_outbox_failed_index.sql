-- Dead letters (`status = 'failed'`) counted by an index, for the relay's
-- `room_outbox_failed` gauge and its alert, which holds while any row waits
-- for an operator (docs/runbooks.md#roomoutboxfailedrows).
--
-- Why a virtual column and not an index on `status`: `status` changes twice
-- in every row's life (pending -> delivering -> delivered), and each change
-- would move the row inside an index on it. `failed_flag` is NULL for every
-- status but `failed`, so the relay's ordinary marks leave its index entry
-- where it is; only a dead letter (and its replay) moves one. The flag is a
-- constant, not the row's id: a generated column may not read an
-- AUTO_INCREMENT column (MariaDB error 1901), and the index entry carries
-- the primary key anyway. VIRTUAL, so adding it does not rebuild the table;
-- only the index is built.
ALTER TABLE room_outbox
    ADD COLUMN failed_flag TINYINT AS (IF(status = 'failed', 1, NULL)) VIRTUAL
        COMMENT '1 for a row in status failed, NULL otherwise (indexed by idx_failed)',
    ADD KEY idx_failed (failed_flag);
