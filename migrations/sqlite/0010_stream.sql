-- Leases: which one of the processes sharing this database does a job that
-- only one may do at a time (streaming the audit log, writing
-- checkpoints). A holder renews its lease before it expires; another
-- process takes it once it has expired, or at once when it was released.
CREATE TABLE IF NOT EXISTS leases (
    name     TEXT PRIMARY KEY,
    holder   TEXT NOT NULL,
    expires  INTEGER NOT NULL,          -- unix milliseconds
    acquired TEXT NOT NULL              -- when this holder took it
);

-- How far the audit log has been streamed to each receiver: the seq of the
-- last record it is known to have. Streaming resumes after it.
CREATE TABLE IF NOT EXISTS stream_cursors (
    receiver TEXT PRIMARY KEY,          -- policy.Stream.Name()
    seq      INTEGER NOT NULL,
    updated  TEXT NOT NULL
);
