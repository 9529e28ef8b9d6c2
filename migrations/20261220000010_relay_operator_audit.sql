-- Operator commands of the relay (docs/design.md#operator-commands): indexes
-- so every operator query reads an index range instead of the whole outbox,
-- and the audit table every operator mutation writes in its own transaction.
--
-- This ALTER adds a stored column, so it rebuilds room_outbox (a copy); on a
-- large table, purge delivered rows first or run it in a quiet window.

ALTER TABLE room_outbox
    -- The status of a row that failed and is not in flight: `retryable`
    -- (waiting out its backoff) or `failed` (dead letter); NULL otherwise.
    -- Derived so it can never disagree with `status`. A row that is never
    -- retried stays NULL for life, so the relay's claims and delivered marks
    -- never touch idx_failing; only failing rows pay for it.
    ADD COLUMN failing_status VARCHAR(16)
        AS (IF(status IN ('retryable', 'failed'), status, NULL)) STORED,
    -- Dead letters and retrying heads in commit order: the unfiltered
    -- dead-letter list, the status counts of both, the retrying heads on
    -- `status` — each an index range instead of a walk of the whole table.
    ADD KEY idx_failing (failing_status, id),
    DROP KEY idx_room,
    -- A room's rows by open/closed, lane, commit order: the room's open chain
    -- (its head and the rows queued behind it) without walking the room's
    -- delivered history, and a room's dead letters among its closed rows.
    -- `open_flag` flips once per row (at delivered/failed), as in idx_claim.
    ADD KEY idx_room (room_id, open_flag, lane, id);

-- Every operator mutation of room_outbox — replay, retry-now, skip, purge —
-- one row each, written in the same transaction as the mutation, so there is
-- no change without its record and no record of a change that rolled back.
-- Rows older than 90 days are deleted by purge (ops::AUDIT_RETENTION_MS).
CREATE TABLE relay_operator_audit (
    id          BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    -- When the mutation committed (the server clock of the operator's process).
    at_ms       BIGINT          NOT NULL,
    -- Who: the CLI's `--operator`, or the admin HTTP `x-operator` header.
    operator    VARCHAR(64)     CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    -- `replay`, `retry_now`, `skip` or `purge`.
    action      VARCHAR(16)     NOT NULL,
    -- The room acted on ('' for actions not about one room, e.g. purge).
    room_id     VARCHAR(64)     CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '',
    -- The event acted on ('' for actions on several rows or none).
    event_id    CHAR(36)        CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '',
    -- Rows the mutation changed (replayed, released, skipped, deleted).
    row_count   BIGINT UNSIGNED NOT NULL,
    -- The operator's reason (required for skip).
    reason      VARCHAR(512)    NOT NULL DEFAULT '',
    -- What else identifies the change: the filter of a replay and the ids it
    -- replayed, the previous schedule or error of a row, a purge's retention.
    detail      VARCHAR(4096)   NOT NULL DEFAULT '',
    PRIMARY KEY (id),
    -- `audit --since`: newest first within a time window.
    KEY idx_audit_at (at_ms),
    -- `audit --action`: one kind of change within a time window.
    KEY idx_audit_action (action, at_ms),
    -- `audit --room-id`: everything done to one room within a time window.
    KEY idx_audit_room (room_id, at_ms)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_general_ci;
