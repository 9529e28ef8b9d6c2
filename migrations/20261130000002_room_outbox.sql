-- The transactional outbox: every room fact, written in the same transaction
-- as the command that produced it, and the durable source the relay publishes from.
--
-- `id` order is commit order within a room (a room's commands are serialised),
-- so it is the per-room publish order. `lane` 0 is the room's ordered chain;
-- lane 1 holds delayed wake-ups (treasure open), which are outside the chain
-- and not due before `next_retry_at_ms`.
CREATE TABLE room_outbox (
    id                BIGINT UNSIGNED  NOT NULL AUTO_INCREMENT,
    event_id          CHAR(36)         NOT NULL,
    app_code          VARCHAR(32)      NOT NULL,
    room_id           VARCHAR(64)      NOT NULL,
    -- FNV-1a 32 of room_id mod the shard count (outbox_schema::shard_of); the unit relays lease.
    shard             SMALLINT UNSIGNED NOT NULL,
    lane              TINYINT UNSIGNED NOT NULL DEFAULT 0,
    room_event_seq    BIGINT UNSIGNED  NOT NULL,
    event_type        VARCHAR(64)      NOT NULL,
    topic             VARCHAR(128)     NOT NULL,
    -- Encoded protobuf (RoomOutboxEvent, or TreasureOpenWakeup on lane 1).
    payload           MEDIUMBLOB       NOT NULL,
    traceparent       VARCHAR(64)      NOT NULL DEFAULT '',
    status            VARCHAR(16)      NOT NULL DEFAULT 'pending',
    retry_count       INT UNSIGNED     NOT NULL DEFAULT 0,
    -- Earliest publish time: retry due time, or open_at_ms for a wake-up.
    next_retry_at_ms  BIGINT           NOT NULL,
    -- A claim (status delivering) is exclusive until this time.
    lock_until_ms     BIGINT           NOT NULL DEFAULT 0,
    -- Fencing token of the claim: a random token drawn per claim; marks require it.
    claim_token       BIGINT UNSIGNED  NOT NULL DEFAULT 0,
    claimed_by        VARCHAR(128)     NOT NULL DEFAULT '',
    last_error        VARCHAR(512)     NOT NULL DEFAULT '',
    created_at_ms     BIGINT           NOT NULL,
    delivered_at_ms   BIGINT           NULL,
    -- 1 while the row still needs the relay; derived so it can never disagree
    -- with `status`. Indexed so the claim scan only touches the backlog.
    open_flag         TINYINT AS (IF(status IN ('pending', 'delivering', 'retryable'), 1, 0)) STORED,
    -- Due time of an open delayed wake-up, NULL otherwise. Chain rows stay NULL
    -- for life, so their status changes never touch idx_delayed.
    delayed_due_ms    BIGINT AS (IF(lane = 1 AND status IN ('pending', 'delivering', 'retryable'),
                                    next_retry_at_ms, NULL)) STORED,
    PRIMARY KEY (id),
    UNIQUE KEY uk_event_id (event_id),
    -- Claim scan of the ordered chain: backlog rows in commit order, with the
    -- shard in the index so foreign shards are filtered without a row lookup.
    -- Only `open_flag` flips here (at delivered/failed); claiming changes no
    -- indexed column, which keeps a backlog drain cheap for InnoDB.
    KEY idx_claim (lane, open_flag, id, shard),
    -- Due delayed wake-ups, earliest first.
    KEY idx_delayed (delayed_due_ms),
    -- A room's rows in commit order (dead-letter listing and replay per room);
    -- never changes after insert.
    KEY idx_room (room_id, id)
    -- Purge walks the primary key from the oldest row, so it needs no index.
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_general_ci;

-- Shard leases of the relay instances. `epoch` increments on every change of
-- owner; claims require a live lease in the same statement, so a relay whose
-- lease was taken over claims nothing more, and its marks are refused by the
-- random claim token of any newer claim.
CREATE TABLE relay_shard_leases (
    shard           SMALLINT UNSIGNED NOT NULL,
    owner           VARCHAR(128)      NOT NULL DEFAULT '',
    epoch           BIGINT UNSIGNED   NOT NULL DEFAULT 0,
    lease_until_ms  BIGINT            NOT NULL DEFAULT 0,
    PRIMARY KEY (shard)
) ENGINE = InnoDB;

-- Live relay instances (heartbeats), from which each instance derives its
-- fair share of shards.
CREATE TABLE relay_instances (
    instance_id      VARCHAR(128) NOT NULL,
    heartbeat_at_ms  BIGINT       NOT NULL,
    started_at_ms    BIGINT       NOT NULL,
    PRIMARY KEY (instance_id),
    KEY idx_heartbeat (heartbeat_at_ms)
) ENGINE = InnoDB;
