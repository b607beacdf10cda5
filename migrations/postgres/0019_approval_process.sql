-- Which guard process held a call, and what a process's beats say of its
-- liveness (see SQLite's 0019).
ALTER TABLE approvals ADD COLUMN process TEXT COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE replicas ADD COLUMN awake_since TEXT COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE replicas ADD COLUMN lapse_ms BIGINT NOT NULL DEFAULT 0;
