-- The audit log: append-only records, hash-chained in seq order.
CREATE TABLE records (
    seq           INTEGER PRIMARY KEY,
    id            TEXT NOT NULL,
    call_id       TEXT NOT NULL,
    kind          TEXT NOT NULL,
    time          TEXT NOT NULL,
    session       TEXT NOT NULL DEFAULT '',
    client        TEXT NOT NULL DEFAULT '',
    protocol      TEXT NOT NULL DEFAULT '',
    server        TEXT NOT NULL DEFAULT '',
    direction     TEXT NOT NULL DEFAULT '',
    method        TEXT NOT NULL DEFAULT '',
    tool          TEXT NOT NULL DEFAULT '',
    arguments     TEXT NOT NULL DEFAULT '',
    pin           TEXT NOT NULL DEFAULT '',
    decision      TEXT NOT NULL DEFAULT '',
    decided_by    TEXT NOT NULL DEFAULT '',
    reason        TEXT NOT NULL DEFAULT '',
    outcome       TEXT NOT NULL DEFAULT '',
    result        TEXT NOT NULL DEFAULT '',
    request_size  INTEGER NOT NULL DEFAULT 0,
    response_size INTEGER NOT NULL DEFAULT 0,
    duration_ms   INTEGER NOT NULL DEFAULT 0,
    detail        TEXT NOT NULL DEFAULT '',
    prev_hash     TEXT NOT NULL,
    hash          TEXT NOT NULL
);
CREATE INDEX records_call ON records (call_id, kind, seq);
CREATE INDEX records_time ON records (time);

CREATE TRIGGER records_no_update BEFORE UPDATE ON records
BEGIN SELECT RAISE(ABORT, 'audit records are append-only'); END;
CREATE TRIGGER records_no_delete BEFORE DELETE ON records
BEGIN SELECT RAISE(ABORT, 'audit records are append-only'); END;

-- One row per invocation: its first request record and its last outcome
-- record (a 2026-07-28 call may have several rounds). An outcome's decision
-- overrides the request's: a held call's request says "held", its outcome
-- says who decided.
CREATE VIEW calls AS
SELECT
    q.call_id AS id,
    q.time,
    q.session,
    q.client,
    q.protocol,
    q.server,
    q.direction,
    q.method,
    q.tool,
    q.arguments,
    q.pin,
    COALESCE(NULLIF(o.decision, ''), q.decision)     AS decision,
    COALESCE(NULLIF(o.decided_by, ''), q.decided_by) AS decided_by,
    COALESCE(NULLIF(o.reason, ''), q.reason)         AS reason,
    COALESCE(o.outcome, '')                          AS outcome,
    COALESCE(o.result, '')                           AS result,
    q.request_size,
    COALESCE(o.response_size, 0)                     AS response_size,
    COALESCE(o.duration_ms, 0)                       AS duration_ms,
    COALESCE(o.detail, q.detail)                     AS detail,
    COALESCE(o.hash, q.hash)                         AS hash
FROM records q
LEFT JOIN records o ON o.seq = (
    SELECT MAX(seq) FROM records WHERE call_id = q.call_id AND kind = 'outcome')
WHERE q.kind = 'request'
  AND q.seq = (SELECT MIN(seq) FROM records WHERE call_id = q.call_id AND kind = 'request');

-- Every tool definition a server has shown, with when it was first and
-- last seen.
CREATE TABLE tools (
    server     TEXT NOT NULL,
    name       TEXT NOT NULL,
    pin        TEXT NOT NULL,
    def        TEXT NOT NULL,
    first_seen TEXT NOT NULL,
    last_seen  TEXT NOT NULL,
    PRIMARY KEY (server, name, pin)
);

-- Held calls. Arguments are complete until the call is decided.
CREATE TABLE approvals (
    id             TEXT PRIMARY KEY,
    session        TEXT NOT NULL DEFAULT '',
    client         TEXT NOT NULL DEFAULT '',
    server         TEXT NOT NULL,
    tool           TEXT NOT NULL,
    arguments      TEXT NOT NULL,
    digest         TEXT NOT NULL,
    pin            TEXT NOT NULL DEFAULT '',
    policy_version TEXT NOT NULL DEFAULT '',
    rule           TEXT NOT NULL DEFAULT '',
    held_reason    TEXT NOT NULL DEFAULT '',
    state          TEXT NOT NULL,
    decided_by     TEXT NOT NULL DEFAULT '',
    reason         TEXT NOT NULL DEFAULT '',
    created_at     TEXT NOT NULL,
    expires_at     TEXT NOT NULL,
    decided_at     TEXT NOT NULL DEFAULT '',
    used_at        TEXT NOT NULL DEFAULT ''
);
CREATE INDEX approvals_state ON approvals (state, created_at);
CREATE INDEX approvals_shape ON approvals (server, tool, digest, state);
