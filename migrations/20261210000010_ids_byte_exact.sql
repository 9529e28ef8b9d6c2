-- Ids compare byte-exactly (docs/design.md#identifiers): every id column moves
-- from utf8mb4_general_ci to utf8mb4_bin.
--
-- Why: ids are opaque identifiers of upstream systems, and everything outside
-- MySQL already treats them byte-exactly — Redis keys and room leases, the
-- in-memory room actors, the outbox shard hash, the Kafka key, the Tencent IM
-- group id. With a case-insensitive collation `Room1` and `room1` were two
-- live rooms in memory (two actors, two leases) over one `rooms` row. Now
-- they are two rows, or one room and a room that does not exist.
--
-- Only id columns change. Statuses, event types, titles, errors and payload
-- text keep their collation: they are not identifiers, and sqlx 0.8 refuses to
-- decode a `String` from any column the server flags BINARY — which MySQL and
-- MariaDB do for every `_bin` collation — so each converted column is read
-- through `service_kit::db::IdText`.
--
-- No data needs repair: the rows a room is rebuilt from (meta, snapshots,
-- command log) and its outbox rows — hence every consumer's rows — were always
-- written with the spelling the room's state was created with, whatever
-- spelling the request used (a gift saga keeps the request's, for logs only);
-- and a finer collation cannot make existing unique keys collide. Each ALTER
-- rebuilds its table (a copy);
-- on a large `room_outbox`, purge delivered rows first or run it in a quiet
-- window. relay_shard_leases and relay_instances had no declared character
-- set; their id columns get utf8mb4 explicitly.

ALTER TABLE rooms
    MODIFY room_id  VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    MODIFY app_code VARCHAR(32) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    MODIFY owner_id VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL;

ALTER TABLE room_command_log
    MODIFY command_id VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    MODIFY room_id    VARCHAR(64)  CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL;

ALTER TABLE room_snapshots
    MODIFY room_id VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL;

ALTER TABLE room_outbox
    MODIFY event_id   CHAR(36)     CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    MODIFY app_code   VARCHAR(32)  CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    MODIFY room_id    VARCHAR(64)  CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    MODIFY claimed_by VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '';

ALTER TABLE relay_shard_leases
    MODIFY owner VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '';

ALTER TABLE relay_instances
    MODIFY instance_id VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL;

ALTER TABLE room_gift_saga
    MODIFY command_id   VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    MODIFY room_id      VARCHAR(64)  CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    MODIFY sender_id    VARCHAR(64)  CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    MODIFY wallet_tx_id VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '';

ALTER TABLE consumer_dedup
    MODIFY consumer_group VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    MODIFY event_id       CHAR(36)     CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL;

ALTER TABLE notice_delivery_events
    MODIFY event_id     CHAR(36)    CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    MODIFY recipient_id VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    MODIFY room_id      VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL;

ALTER TABLE activity_gift_leaderboard
    MODIFY activity_id VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    MODIFY user_id     VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL;

ALTER TABLE activity_room_contribution
    MODIFY room_id VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL;

ALTER TABLE activity_broadcasts
    MODIFY event_id    CHAR(36)    CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    MODIFY room_id     VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    MODIFY sender_id   VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    MODIFY receiver_id VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    MODIFY gift_id     VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL;
