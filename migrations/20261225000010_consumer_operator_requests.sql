-- Operator requests the relay's console writes for a consumer group's own
-- service to carry out: replaying one dead letter of `<group>.dlq` with the
-- group's handler (or only checking it would be: a dry run), or retrying one
-- event's failed delivery rows. The console
-- only writes the row; a running instance of the group's service claims it
-- (a guarded UPDATE on `claimed_by = ''`, so two instances never both run
-- one), runs the same code as its `dead-letters replay` / `deliveries retry`
-- command, audits it in `consumer_operator_audit` and writes the outcome.
CREATE TABLE consumer_operator_requests (
    id              BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    -- The consumer group whose service carries the request out.
    consumer_group  VARCHAR(128)    CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    -- `replay_dead_letter`, `dry_run_replay` or `retry_delivery`.
    action          VARCHAR(32)     NOT NULL,
    -- The event replayed or retried.
    event_id        VARCHAR(64)     CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    -- The dead letter's place in `<group>.dlq`, `<partition>/<offset>`, for a
    -- replay or its dry run; '' for a retry.
    dlq_position    VARCHAR(48)     NOT NULL DEFAULT '',
    -- Who asked (the console's operator): a person or ticket handle.
    operator        VARCHAR(64)     NOT NULL,
    -- Why, as the operator wrote it; copied into the audit row.
    reason          VARCHAR(512)    NOT NULL,
    -- When the console wrote the request, Unix ms.
    requested_at_ms BIGINT          NOT NULL,
    -- The instance that claimed it (host and process id); '' until claimed.
    claimed_by      VARCHAR(128)    CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '',
    -- When it was claimed, Unix ms; 0 until then.
    claimed_at_ms   BIGINT          NOT NULL DEFAULT 0,
    -- When it ended, Unix ms; 0 until then.
    finished_at_ms  BIGINT          NOT NULL DEFAULT 0,
    -- '' while pending or running, then `done`, `refused` or `failed`; or
    -- `abandoned`, marked from the console when its instance died mid-run.
    outcome         VARCHAR(16)     NOT NULL DEFAULT '',
    -- What came of it, or why it was refused or failed.
    detail          TEXT            NOT NULL,
    PRIMARY KEY (id),
    -- A group's pending requests, oldest first (the service's claim), and a
    -- group's recent requests (the console's group page).
    KEY idx_group_outcome (consumer_group, outcome, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_general_ci;
