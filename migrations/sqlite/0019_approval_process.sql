-- Which guard process held a call: its id among the replicas, the rows
-- every relaying process keeps beating (on SQLite too, from this version
-- on). A session before 2026-07-28 lives in one process: once that
-- process is gone, a hold scoped to the session can never be used, and
-- the next guard on the database withdraws it. Approvals held before
-- have no process and are left as they are.
ALTER TABLE approvals ADD COLUMN process TEXT NOT NULL DEFAULT '';

-- What a process's beats say of its liveness: when its unbroken run of
-- beats began (a beat later than lapse_ms after the one before starts a
-- new run: the machine slept, or the process hung), and how long after
-- its last beat it is to be taken as gone. A process is judged gone only
-- on the evidence of another's run that went on that long after its last
-- beat: never by a process that has just woken with it.
ALTER TABLE replicas ADD COLUMN awake_since TEXT NOT NULL DEFAULT '';
ALTER TABLE replicas ADD COLUMN lapse_ms INTEGER NOT NULL DEFAULT 0;
