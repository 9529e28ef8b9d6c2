-- The relay console's session generation (docs/design.md#operator-console):
-- one row, shared by every relay replica. A session cookie names the
-- generation it was issued in and is valid only while it is current; a
-- console logout or `outbox-relay console revoke-sessions` adds one, which
-- ends every console session at once, copied cookies included.
CREATE TABLE relay_console_sessions (
    -- Always 1: the table has one row (absent = generation 0).
    id          TINYINT UNSIGNED NOT NULL,
    -- The current generation.
    generation  BIGINT UNSIGNED  NOT NULL,
    -- When it last changed (ms), for operators reading the table.
    changed_ms  BIGINT           NOT NULL,
    PRIMARY KEY (id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_general_ci;
