-- The batches whose call index rows are not written yet (PostgreSQL
-- only). A batch's transaction, under the audit lock, writes its records
-- and tree and hands out the keys of the calls it touches, named here;
-- the call index's rows and words are written after it commits, outside
-- the lock, in a transaction that deletes the batch's row. A query that
-- reads the call index first writes (or waits for) the rows of every
-- batch still here, so that it never misses a committed call.
CREATE TABLE call_pending (
    last_seq  BIGINT PRIMARY KEY,      -- the batch's last record
    first_seq BIGINT NOT NULL,         -- its first
    ids       TEXT[] NOT NULL,         -- the calls it touched
    ks        BIGINT[] NOT NULL        -- their keys, in ids' order
);
