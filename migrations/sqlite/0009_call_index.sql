-- The calls view's rows, kept by the audit ingester in the transaction
-- that commits their records, so that queries need not join every call's
-- records again: one row per invocation, keyed by k, which sorts as the
-- call's time and then its arrival (the unix milliseconds of its first
-- request record times 2^20, plus its rank among the calls of that
-- millisecond). It is not part of the chain: everything in it is derived
-- from the records, and store.RebuildCallIndex makes it again from them.
CREATE TABLE call_index (
    k          INTEGER PRIMARY KEY,
    call_id    TEXT NOT NULL UNIQUE,
    req_seq    INTEGER NOT NULL,            -- the call's first request record
    out_seq    INTEGER NOT NULL DEFAULT 0,  -- its latest outcome record (0: none yet)
    dec_seq    INTEGER NOT NULL,            -- the record whose decision the call shows
    server     TEXT NOT NULL DEFAULT '',
    tool       TEXT NOT NULL DEFAULT '',
    client     TEXT NOT NULL DEFAULT '',
    session    TEXT NOT NULL DEFAULT '',
    decision   TEXT NOT NULL DEFAULT '',
    decided_by TEXT NOT NULL DEFAULT '',
    outcome    TEXT NOT NULL DEFAULT '',
    approval   TEXT NOT NULL DEFAULT ''
);
-- Each filter's column, followed (implicitly) by k: the newest calls that
-- match are the index's last entries for the value.
CREATE INDEX call_index_server ON call_index (server);
CREATE INDEX call_index_tool ON call_index (tool);
CREATE INDEX call_index_client ON call_index (client);
CREATE INDEX call_index_session ON call_index (session);
CREATE INDEX call_index_decision ON call_index (decision);
CREATE INDEX call_index_decided_by ON call_index (decided_by);
CREATE INDEX call_index_outcome ON call_index (outcome);

-- The words of each call's redacted arguments and latest result, by k.
-- Contentless: the text stays in records alone, and a row is removed
-- with FTS5's delete command, given the text it was made of.
CREATE VIRTUAL TABLE call_text USING fts5 (
    arguments, result,
    content = '', columnsize = 0,
    tokenize = 'unicode61 remove_diacritics 2'
);

-- The records that carry an approval, to find the calls that concern one.
CREATE INDEX records_approval ON records (approval) WHERE approval != '';

-- The view keeps its columns, now read through the index.
DROP VIEW IF EXISTS calls;
CREATE VIEW calls AS
SELECT
    c.call_id                AS id,
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
    d.decision,
    d.decided_by,
    d.reason,
    COALESCE(o.outcome, '')       AS outcome,
    COALESCE(o.result, '')        AS result,
    q.request_size,
    COALESCE(o.response_size, 0)  AS response_size,
    COALESCE(o.duration_ms, 0)    AS duration_ms,
    COALESCE(o.detail, q.detail)  AS detail,
    COALESCE(o.hash, q.hash)      AS hash,
    c.approval
FROM call_index c
JOIN records q ON q.seq = c.req_seq
JOIN records d ON d.seq = c.dec_seq
LEFT JOIN records o ON o.seq = c.out_seq;

-- The records that are not a call's (decisions, tool reviews, learned
-- rules, configuration loads, lifecycle, events), by kind and time, for
-- guard audit query --kind. Calls' records are not in it.
CREATE INDEX records_kind ON records (kind, time) WHERE kind NOT IN ('request', 'outcome');
