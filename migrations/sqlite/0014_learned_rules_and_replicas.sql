-- Rules learned from approvals, kept in the database (PostgreSQL mode: on
-- SQLite they are rules.d/approved.yaml), and the guard processes on the
-- database with the configuration each runs. See PostgreSQL's 0014.
CREATE TABLE learned_rules (
    seq       INTEGER PRIMARY KEY,
    name      TEXT NOT NULL UNIQUE,
    server    TEXT NOT NULL,
    tool      TEXT NOT NULL,
    method    TEXT NOT NULL,
    uri       TEXT NOT NULL DEFAULT '',
    when_expr TEXT NOT NULL DEFAULT '',
    action    TEXT NOT NULL,
    reason    TEXT NOT NULL DEFAULT '',
    added     TEXT NOT NULL
);

CREATE TABLE replicas (
    id             TEXT PRIMARY KEY,
    host           TEXT NOT NULL,
    pid            INTEGER NOT NULL,
    process        TEXT NOT NULL,
    version        TEXT NOT NULL,
    config_digest  TEXT NOT NULL,
    policy_version TEXT NOT NULL,
    started        TEXT NOT NULL,
    seen           TEXT NOT NULL
);

-- 2026-07-28 tool calls a server answered input_required (see
-- PostgreSQL's 0014).
CREATE TABLE rounds (
    key        TEXT PRIMARY KEY,
    call_id    TEXT NOT NULL,
    tool       TEXT NOT NULL,
    digest     TEXT NOT NULL,
    pin        TEXT NOT NULL,
    decision   TEXT NOT NULL,
    decided_by TEXT NOT NULL,
    reason     TEXT NOT NULL,
    expires    INTEGER NOT NULL
);
