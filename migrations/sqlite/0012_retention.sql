-- Retention (audit.retention): a record past it keeps its row and its
-- leaf in the tree, and loses its body once an archive holds it. pruned
-- marks such a row: seq, id, call_id, kind, time, prev_hash and hash
-- stay; every other text column is empty and every number zero.
ALTER TABLE records ADD COLUMN pruned INTEGER NOT NULL DEFAULT 0;

-- The grant the retention job holds inside its transaction: it inserts
-- the one row, blanks the records of the range, and deletes the row
-- before it commits. Only records the latest checkpoint covers may be
-- granted: their proofs stay checkable against it.
CREATE TABLE IF NOT EXISTS retention_grant (
    id        INTEGER PRIMARY KEY CHECK (id = 1),
    first_seq INTEGER NOT NULL,
    last_seq  INTEGER NOT NULL
);
DROP TRIGGER IF EXISTS retention_grant_checkpointed;
CREATE TRIGGER retention_grant_checkpointed BEFORE INSERT ON retention_grant
WHEN NEW.last_seq > (SELECT COALESCE(MAX(size), 0) FROM checkpoints) OR NEW.first_seq < 1
BEGIN SELECT RAISE(ABORT, 'retention may remove only the bodies of records a checkpoint covers'); END;

-- An update of a record is refused unless it is the retention job's
-- blanking of a record its grant covers. Anyone holding the file can
-- drop these triggers: the chain, the tree and the checkpoints kept
-- elsewhere are what catch that.
DROP TRIGGER IF EXISTS records_no_update;
CREATE TRIGGER records_no_update BEFORE UPDATE ON records
WHEN NOT EXISTS (SELECT 1 FROM retention_grant g WHERE OLD.seq BETWEEN g.first_seq AND g.last_seq)
    OR OLD.pruned != 0 OR NEW.pruned != 1
    OR NEW.seq IS NOT OLD.seq OR NEW.id IS NOT OLD.id OR NEW.call_id IS NOT OLD.call_id
    OR NEW.kind IS NOT OLD.kind OR NEW.time IS NOT OLD.time
    OR NEW.prev_hash IS NOT OLD.prev_hash OR NEW.hash IS NOT OLD.hash
    OR NEW.session != '' OR NEW.client != '' OR NEW.protocol != '' OR NEW.server != ''
    OR NEW.direction != '' OR NEW.method != '' OR NEW.tool != '' OR NEW.arguments != ''
    OR NEW.pin != '' OR NEW.decision != '' OR NEW.decided_by != '' OR NEW.reason != ''
    OR NEW.outcome != '' OR NEW.result != '' OR NEW.detail != '' OR NEW.approval != ''
    OR NEW.request_size != 0 OR NEW.response_size != 0 OR NEW.duration_ms != 0
BEGIN SELECT RAISE(ABORT, 'audit records are append-only: only the retention job removes a body, under its grant'); END;

-- Records are never deleted, not even by retention.
DROP TRIGGER IF EXISTS records_no_delete;
CREATE TRIGGER records_no_delete BEFORE DELETE ON records
BEGIN SELECT RAISE(ABORT, 'audit records are append-only'); END;

-- The retention records, which Verify reads before it walks the log: each
-- names the records whose bodies it removed.
CREATE INDEX IF NOT EXISTS records_retention ON records (seq) WHERE kind = 'retention';

-- The retention job's runs, by any process on the database: a process
-- runs it only when no other has within the period. A run that removed
-- bodies names its archive and its retention record; resume is the
-- first record the next run looks at.
CREATE TABLE IF NOT EXISTS retention_runs (
    id       INTEGER PRIMARY KEY,
    time     TEXT NOT NULL,
    first    INTEGER NOT NULL DEFAULT 0,
    last     INTEGER NOT NULL DEFAULT 0,
    pruned   INTEGER NOT NULL DEFAULT 0,
    archive  TEXT NOT NULL DEFAULT '',
    sha256   TEXT NOT NULL DEFAULT '',
    record   TEXT NOT NULL DEFAULT '',
    resume   INTEGER NOT NULL DEFAULT 1,
    problem  TEXT NOT NULL DEFAULT ''
);
