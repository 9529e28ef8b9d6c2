-- `delivered_at_ms` becomes NOT NULL with 0 meaning "not delivered yet".
--
-- Why: InnoDB stores nothing for a NULL column, so marking a row delivered
-- (NULL -> a value) grew every row by 8 bytes and turned each mark into a
-- delete-and-reinsert of the record inside its page, with page
-- reorganisations on the densely packed backlog. With the 8 bytes present
-- from the insert, the mark updates the record in place. Measured on 2,000-row
-- marks of a 100k-row backlog: the mark statement took half the time.
UPDATE room_outbox SET delivered_at_ms = 0 WHERE delivered_at_ms IS NULL;
ALTER TABLE room_outbox
    MODIFY delivered_at_ms BIGINT NOT NULL DEFAULT 0
        COMMENT 'When the relay marked the row delivered; 0 until then';
