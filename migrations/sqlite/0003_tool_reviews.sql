-- Whether each tool definition (by pin) may be used. The first listing of
-- a server is its baseline; a definition seen later (a changed tool, a new
-- tool, or one whose descriptions were flagged) stays pending until a
-- person accepts or rejects it.
CREATE TABLE tool_reviews (
    server     TEXT NOT NULL,
    name       TEXT NOT NULL,
    pin        TEXT NOT NULL,
    state      TEXT NOT NULL,            -- accepted | pending | rejected
    cause      TEXT NOT NULL,            -- baseline | new | changed | flagged
    flags      TEXT NOT NULL DEFAULT '', -- JSON: what the description scan found
    decided_by TEXT NOT NULL DEFAULT '',
    decided_at TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL,
    PRIMARY KEY (server, name, pin)
);

-- Calls counted against rate limits, shared by the processes on one
-- database: one row per limit key, a token bucket.
CREATE TABLE rate_limits (
    key        TEXT PRIMARY KEY,
    tokens     REAL NOT NULL,
    updated_at INTEGER NOT NULL          -- unix microseconds
);
