-- A delivered mark changes one secondary index, idx_claim, instead of two
-- (docs/design.md#operator-commands).
--
-- Why: every index holding `open_flag` moves an entry when a row is marked
-- delivered (a delete-mark and an insert). idx_room (room_id, open_flag,
-- lane, id) made every mark pay that twice, for the operator views alone.
-- Measured on this schema with 2,000-row marks of a 200k-row backlog, one
-- connection: the mark loop ran ~1.5× faster with idx_room back to
-- (room_id, lane, id). The room views now read a room's open rows from
-- idx_claim, which carries room_id for that, and a room's dead letters from
-- idx_failing, which carries it too: both bounded by the backlog (or the
-- dead letters), never by a room's delivered history.
--
-- Each change is an index rebuild in place (no table copy); on a large
-- room_outbox, purge delivered rows first or run it in a quiet window.

ALTER TABLE room_outbox
    DROP KEY idx_room,
    -- A room's rows by lane in commit order; never changes after insert.
    ADD KEY idx_room (room_id, lane, id),
    DROP KEY idx_claim,
    -- The claim scan (lane, open rows, commit order, shard filtered in the
    -- index), and a room's open rows filtered by room_id in the index.
    ADD KEY idx_claim (lane, open_flag, id, shard, room_id),
    DROP KEY idx_failing,
    -- Dead letters and retrying heads in commit order, a room's filtered in
    -- the index.
    ADD KEY idx_failing (failing_status, id, room_id);
