-- Collation note (all tables): ids are restricted by the services to
-- [A-Za-z0-9_.:-]. Tables are utf8mb4_general_ci (in both MySQL 8 and
-- MariaDB); their id columns compare byte-exactly since
-- 20261210000010_ids_byte_exact.sql (docs/design.md#identifiers), and are read
-- through service_kit::db::IdText, as drivers report `_bin` columns as binary.

-- Room meta: one row per room. `version` is the compare-and-set fence of
-- SaveMutation: a stale owner (one whose Redis lease was taken over) commits
-- with an old expected version and matches zero rows.
CREATE TABLE rooms (
    room_id        VARCHAR(64)     NOT NULL,
    app_code       VARCHAR(32)     NOT NULL,
    status         VARCHAR(16)     NOT NULL,
    owner_id       VARCHAR(64)     NOT NULL,
    title          VARCHAR(128)    NOT NULL,
    version        BIGINT UNSIGNED NOT NULL,
    event_seq      BIGINT UNSIGNED NOT NULL,
    heat           BIGINT UNSIGNED NOT NULL DEFAULT 0,
    created_at_ms  BIGINT          NOT NULL,
    updated_at_ms  BIGINT          NOT NULL,
    PRIMARY KEY (room_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_general_ci;

-- Every applied write command, in room version order. The unique
-- `command_id` is the idempotency key; `request_fingerprint` detects a reused
-- id with a different request; `reply` is the stored original answer.
-- (room_id, room_version) lets a cell be rebuilt as snapshot + the commands after it.
CREATE TABLE room_command_log (
    id                  BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    command_id          VARCHAR(128)    NOT NULL,
    room_id             VARCHAR(64)     NOT NULL,
    room_version        BIGINT UNSIGNED NOT NULL,
    command_name        VARCHAR(32)     NOT NULL,
    request_fingerprint BINARY(32)      NOT NULL,
    command             MEDIUMBLOB      NOT NULL,
    applied_at_ms       BIGINT          NOT NULL,
    reply               MEDIUMBLOB      NOT NULL,
    PRIMARY KEY (id),
    UNIQUE KEY uk_command_id (command_id),
    UNIQUE KEY uk_room_version (room_id, room_version)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_general_ci;

-- Periodic full RoomState images (every `snapshot_every_n` versions), so a
-- cell is rebuilt without replaying the whole log. Old ones are pruned.
CREATE TABLE room_snapshots (
    room_id        VARCHAR(64)     NOT NULL,
    version        BIGINT UNSIGNED NOT NULL,
    state          MEDIUMBLOB      NOT NULL,
    created_at_ms  BIGINT          NOT NULL,
    PRIMARY KEY (room_id, version)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_general_ci;
