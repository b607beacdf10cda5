-- Configuration changes a running guard did not apply by itself, shared by
-- the processes on one database: a change to the policy (rules, default,
-- mode, limits, server settings) that a wrapped server could have written
-- waits for a person, who applies or dismisses it by its digest.
CREATE TABLE config_changes (
    digest     TEXT PRIMARY KEY,          -- sha256: of the files, as guard policy reload prints it
    summary    TEXT NOT NULL DEFAULT '',  -- what changed, one line each
    state      TEXT NOT NULL,             -- pending | applied | dismissed | superseded
    decided_by TEXT NOT NULL DEFAULT '',
    decided_at TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL
);

-- The contents of rules.d/approved.yaml that guard itself wrote (rules
-- learned from approvals): a change to that file is applied at once only
-- when its digest is here.
CREATE TABLE rules_written (
    digest     TEXT PRIMARY KEY,
    created_at TEXT NOT NULL
);
