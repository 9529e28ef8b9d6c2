-- Consumed event ids per consumer group. Where a consumer's effect is a DB
-- write, this row and the effect commit in one transaction (exactly-once
-- effect); idx_purge bounds the purge of rows older than the dedup horizon.
CREATE TABLE consumer_dedup (
    consumer_group   VARCHAR(128) NOT NULL,
    event_id         CHAR(36)     NOT NULL,
    processed_at_ms  BIGINT       NOT NULL,
    PRIMARY KEY (consumer_group, event_id),
    KEY idx_purge (consumer_group, processed_at_ms)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_general_ci;

-- Private notices to deliver as C2C IM messages, one per (event, recipient).
-- The unique key makes a redelivered event a no-op; idx_due feeds the retry
-- of deliveries that failed.
CREATE TABLE notice_delivery_events (
    id                  BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    event_id            CHAR(36)        NOT NULL,
    recipient_id        VARCHAR(64)     NOT NULL,
    notice_type         VARCHAR(64)     NOT NULL,
    room_id             VARCHAR(64)     NOT NULL,
    content             TEXT            NOT NULL,
    status              VARCHAR(16)     NOT NULL DEFAULT 'pending',
    attempts            INT UNSIGNED    NOT NULL DEFAULT 0,
    next_attempt_at_ms  BIGINT          NOT NULL,
    last_error          VARCHAR(512)    NOT NULL DEFAULT '',
    created_at_ms       BIGINT          NOT NULL,
    delivered_at_ms     BIGINT          NULL,
    PRIMARY KEY (id),
    UNIQUE KEY uk_event_recipient (event_id, recipient_id),
    KEY idx_due (status, next_attempt_at_ms)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_general_ci;

-- Daily (UTC) gift leaderboard per activity: score per user per day.
-- idx_rank serves "top N of a day" without a sort of the whole day.
CREATE TABLE activity_gift_leaderboard (
    activity_id  VARCHAR(64)     NOT NULL,
    day          INT             NOT NULL,
    user_id      VARCHAR(64)     NOT NULL,
    score        BIGINT UNSIGNED NOT NULL,
    updated_at_ms BIGINT         NOT NULL,
    PRIMARY KEY (activity_id, day, user_id),
    KEY idx_rank (activity_id, day, score)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_general_ci;

-- Lifetime gift totals per room as seen by the activity service.
CREATE TABLE activity_room_contribution (
    room_id        VARCHAR(64)     NOT NULL,
    total_value    BIGINT UNSIGNED NOT NULL,
    gift_count     BIGINT UNSIGNED NOT NULL,
    updated_at_ms  BIGINT          NOT NULL,
    PRIMARY KEY (room_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_general_ci;

-- Big-gift broadcasts: one row per qualifying gift event (the primary key
-- makes it once per event); `status` tracks the global-group IM message.
CREATE TABLE activity_broadcasts (
    event_id        CHAR(36)        NOT NULL,
    room_id         VARCHAR(64)     NOT NULL,
    sender_id       VARCHAR(64)     NOT NULL,
    receiver_id     VARCHAR(64)     NOT NULL,
    gift_id         VARCHAR(64)     NOT NULL,
    total_value     BIGINT UNSIGNED NOT NULL,
    status          VARCHAR(16)     NOT NULL DEFAULT 'pending',
    created_at_ms   BIGINT          NOT NULL,
    delivered_at_ms BIGINT          NULL,
    PRIMARY KEY (event_id),
    KEY idx_status (status, created_at_ms)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_general_ci;
