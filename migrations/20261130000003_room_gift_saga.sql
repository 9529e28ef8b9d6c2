-- Local message table of the SendGift wallet saga (docs/design.md#gift-saga): written before
-- the wallet debit, moved to `committed` in the room's SaveMutation
-- transaction, or to `compensated` after a refund. The recovery sweep finds
-- rows stuck in `debiting`/`debited`/`compensating` via idx_sweep.
CREATE TABLE room_gift_saga (
    command_id      VARCHAR(128)    NOT NULL,
    room_id         VARCHAR(64)     NOT NULL,
    sender_id       VARCHAR(64)     NOT NULL,
    amount          BIGINT UNSIGNED NOT NULL,
    status          VARCHAR(16)     NOT NULL,
    wallet_tx_id    VARCHAR(128)    NOT NULL DEFAULT '',
    last_error      VARCHAR(512)    NOT NULL DEFAULT '',
    created_at_ms   BIGINT          NOT NULL,
    updated_at_ms   BIGINT          NOT NULL,
    PRIMARY KEY (command_id),
    KEY idx_sweep (status, updated_at_ms)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_general_ci;
