-- The call a held call's approval belongs to: a call held again (after its
-- tool's review) has an approval of another id, and the decision records
-- in the audit log name both.
ALTER TABLE approvals ADD COLUMN call_id TEXT NOT NULL DEFAULT '';

-- The audit log's verifications on a schedule (audit.verify_every), by any
-- process on the database: the UI and the metrics show the last one, and
-- a process verifies only when no other has within the period.
CREATE TABLE audit_verifications (
    id       INTEGER PRIMARY KEY,
    time     TEXT NOT NULL,
    ok       INTEGER NOT NULL,
    records  INTEGER NOT NULL DEFAULT 0,
    problem  TEXT NOT NULL DEFAULT '',
    took_ms  INTEGER NOT NULL DEFAULT 0
);
