-- Merged IM group messages not yet known to be sent (docs/design.md#hot-rooms).
--
-- When a hot room's IM budget is short, im-bridge merges several gift events
-- into one group message. Before that message leaves, its exact body, its
-- `Random` and the events it carries are written here; once Tencent answered,
-- the events go to consumer_dedup and these rows are deleted in one
-- transaction. A crash in between leaves the rows: the redelivered events
-- find their batch here and the very same message (same body, same Random)
-- is sent again, which Tencent drops as a duplicate within its dedup window,
-- so no gift is lost and none is shown twice. The rows of a batch whose
-- resend was dead-lettered are removed by the consumer's dedup purge.
CREATE TABLE im_pending_batches (
    -- The consumer group whose batch it is (its dedup group).
    consumer_group  VARCHAR(128)  CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    -- The batch: the event id of its first event.
    batch_id        CHAR(36)      CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    -- The IM group it goes to.
    group_id        VARCHAR(128)  CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    -- The message's `Random`, derived from the events it carries.
    msg_random      INT UNSIGNED  NOT NULL,
    -- The `MsgBody` exactly as sent (JSON, at most Tencent's 12 KB).
    msg_body        MEDIUMTEXT    NOT NULL,
    -- When the batch was planned, Unix ms (the purge's horizon).
    created_at_ms   BIGINT        NOT NULL,
    PRIMARY KEY (consumer_group, batch_id),
    -- The purge of batches older than the dedup retention.
    KEY idx_purge (consumer_group, created_at_ms)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_general_ci;

-- The events each pending batch carries: looked up by event id when events
-- are redelivered.
CREATE TABLE im_pending_batch_events (
    consumer_group  VARCHAR(128)  CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    -- An event carried by the batch.
    event_id        CHAR(36)      CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    -- Its batch (im_pending_batches.batch_id).
    batch_id        CHAR(36)      CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    PRIMARY KEY (consumer_group, event_id),
    -- A batch's events, to record and delete them together.
    KEY idx_batch (consumer_group, batch_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_general_ci;
