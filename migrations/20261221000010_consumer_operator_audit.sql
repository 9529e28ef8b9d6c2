-- What operators did to a consumer group with its binary's operator commands
-- (`dead-letters replay`, `deliveries retry`): one row per mutation, written
-- before the replay starts (its outcome filled in when it ends) or in the same
-- transaction as the delivery reset, so no operator change goes unrecorded.
CREATE TABLE consumer_operator_audit (
    id              BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    -- When the command ran, Unix ms.
    at_ms           BIGINT          NOT NULL,
    -- Who ran it (`--operator`): a person or ticket handle, not a credential.
    operator        VARCHAR(64)     NOT NULL,
    -- The service binary it ran as (`notice-consumer`, ...).
    service         VARCHAR(64)     NOT NULL,
    -- The consumer group it acted for (its dedup group and `<group>.dlq`).
    consumer_group  VARCHAR(128)    CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    -- `dead-letters replay` or `deliveries retry`.
    action          VARCHAR(32)     NOT NULL,
    -- The selection as given: `event_id=...`, `since=2h`, `all`, with flags
    -- such as `force` and the table for a delivery retry.
    target          VARCHAR(255)    NOT NULL,
    -- Why (`--reason`), as the operator wrote it.
    reason          VARCHAR(512)    NOT NULL,
    -- What happened: counts per result (`started` until a replay ends).
    outcome         VARCHAR(1024)   NOT NULL,
    PRIMARY KEY (id),
    -- A group's history, newest last: "who touched this group, when".
    KEY idx_group_time (consumer_group, at_ms)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_general_ci;

-- `deliveries list` / `deliveries retry --since` of notice-consumer: failed
-- notices by creation time (activity_broadcasts has idx_status for the same).
ALTER TABLE notice_delivery_events
    ADD KEY idx_status_created (status, created_at_ms);
