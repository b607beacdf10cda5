-- guard's schema on PostgreSQL, as SQLite's migrations 0001 to 0012 left
-- it: the same tables, columns and meaning, so that the same statements
-- read and write both and `guard store copy` moves rows as they are.
-- Text compares byte by byte (COLLATE "C") as in SQLite; integers are
-- 64-bit; hashes are bytea.

-- Refuses a change to an append-only table; its argument is the message.
CREATE FUNCTION guard_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '%', TG_ARGV[0] USING ERRCODE = 'restrict_violation';
END $$;

-- The audit log: append-only records, hash-chained in seq order.
CREATE TABLE records (
    seq           BIGINT PRIMARY KEY,
    id            TEXT COLLATE "C" NOT NULL,
    call_id       TEXT COLLATE "C" NOT NULL,
    kind          TEXT COLLATE "C" NOT NULL,
    time          TEXT COLLATE "C" NOT NULL,
    session       TEXT COLLATE "C" NOT NULL DEFAULT '',
    client        TEXT COLLATE "C" NOT NULL DEFAULT '',
    protocol      TEXT COLLATE "C" NOT NULL DEFAULT '',
    server        TEXT COLLATE "C" NOT NULL DEFAULT '',
    direction     TEXT COLLATE "C" NOT NULL DEFAULT '',
    method        TEXT COLLATE "C" NOT NULL DEFAULT '',
    tool          TEXT COLLATE "C" NOT NULL DEFAULT '',
    arguments     TEXT COLLATE "C" NOT NULL DEFAULT '',
    pin           TEXT COLLATE "C" NOT NULL DEFAULT '',
    decision      TEXT COLLATE "C" NOT NULL DEFAULT '',
    decided_by    TEXT COLLATE "C" NOT NULL DEFAULT '',
    reason        TEXT COLLATE "C" NOT NULL DEFAULT '',
    outcome       TEXT COLLATE "C" NOT NULL DEFAULT '',
    result        TEXT COLLATE "C" NOT NULL DEFAULT '',
    request_size  BIGINT NOT NULL DEFAULT 0,
    response_size BIGINT NOT NULL DEFAULT 0,
    duration_ms   BIGINT NOT NULL DEFAULT 0,
    detail        TEXT COLLATE "C" NOT NULL DEFAULT '',
    prev_hash     TEXT COLLATE "C" NOT NULL,
    hash          TEXT COLLATE "C" NOT NULL,
    approval      TEXT COLLATE "C" NOT NULL DEFAULT '',
    pruned        BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX records_call ON records (call_id, kind, seq);
CREATE INDEX records_time ON records (time);
CREATE INDEX records_approval ON records (approval) WHERE approval <> '';
CREATE INDEX records_kind ON records (kind, time) WHERE kind NOT IN ('request', 'outcome');
CREATE INDEX records_retention ON records (seq) WHERE kind = 'retention';

-- The grant the retention job holds inside its transaction: it inserts
-- the one row, blanks the records of the range, and deletes the row
-- before it commits. Only records the latest checkpoint covers may be
-- granted.
CREATE TABLE retention_grant (
    id        BIGINT PRIMARY KEY CHECK (id = 1),
    first_seq BIGINT NOT NULL,
    last_seq  BIGINT NOT NULL
);

-- An update of a record is refused unless it is the retention job's
-- blanking of a record its grant covers; records are never deleted.
CREATE FUNCTION guard_records_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM retention_grant g WHERE OLD.seq BETWEEN g.first_seq AND g.last_seq)
        OR OLD.pruned <> 0 OR NEW.pruned <> 1
        OR NEW.seq IS DISTINCT FROM OLD.seq OR NEW.id IS DISTINCT FROM OLD.id
        OR NEW.call_id IS DISTINCT FROM OLD.call_id OR NEW.kind IS DISTINCT FROM OLD.kind
        OR NEW.time IS DISTINCT FROM OLD.time OR NEW.prev_hash IS DISTINCT FROM OLD.prev_hash
        OR NEW.hash IS DISTINCT FROM OLD.hash
        OR NEW.session <> '' OR NEW.client <> '' OR NEW.protocol <> '' OR NEW.server <> ''
        OR NEW.direction <> '' OR NEW.method <> '' OR NEW.tool <> '' OR NEW.arguments <> ''
        OR NEW.pin <> '' OR NEW.decision <> '' OR NEW.decided_by <> '' OR NEW.reason <> ''
        OR NEW.outcome <> '' OR NEW.result <> '' OR NEW.detail <> '' OR NEW.approval <> ''
        OR NEW.request_size <> 0 OR NEW.response_size <> 0 OR NEW.duration_ms <> 0 THEN
        RAISE EXCEPTION 'audit records are append-only: only the retention job removes a body, under its grant'
            USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER records_no_update BEFORE UPDATE ON records
    FOR EACH ROW EXECUTE FUNCTION guard_records_update();
CREATE TRIGGER records_no_delete BEFORE DELETE ON records
    FOR EACH ROW EXECUTE FUNCTION guard_append_only('audit records are append-only');
CREATE TRIGGER records_no_truncate BEFORE TRUNCATE ON records
    FOR EACH STATEMENT EXECUTE FUNCTION guard_append_only('audit records are append-only');

-- The Merkle tree over the records: every hash the tree keeps, by tlog's
-- stored hash index.
CREATE TABLE tree_hashes (
    idx  BIGINT PRIMARY KEY,
    hash BYTEA NOT NULL
);
CREATE TRIGGER tree_hashes_no_update BEFORE UPDATE OR DELETE ON tree_hashes
    FOR EACH ROW EXECUTE FUNCTION guard_append_only('the audit tree is append-only');
CREATE TRIGGER tree_hashes_no_truncate BEFORE TRUNCATE ON tree_hashes
    FOR EACH STATEMENT EXECUTE FUNCTION guard_append_only('the audit tree is append-only');

-- Every checkpoint signed, in the C2SP signed-note form.
CREATE TABLE checkpoints (
    size BIGINT PRIMARY KEY,
    note TEXT COLLATE "C" NOT NULL,
    time TEXT COLLATE "C" NOT NULL
);
CREATE TRIGGER checkpoints_no_update BEFORE UPDATE OR DELETE ON checkpoints
    FOR EACH ROW EXECUTE FUNCTION guard_append_only('audit checkpoints are append-only');
CREATE TRIGGER checkpoints_no_truncate BEFORE TRUNCATE ON checkpoints
    FOR EACH STATEMENT EXECUTE FUNCTION guard_append_only('audit checkpoints are append-only');

CREATE FUNCTION guard_retention_grant() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.last_seq > (SELECT COALESCE(MAX(size), 0) FROM checkpoints) OR NEW.first_seq < 1 THEN
        RAISE EXCEPTION 'retention may remove only the bodies of records a checkpoint covers'
            USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER retention_grant_checkpointed BEFORE INSERT ON retention_grant
    FOR EACH ROW EXECUTE FUNCTION guard_retention_grant();

-- The retention job's runs, by any replica.
CREATE TABLE retention_runs (
    id       BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    time     TEXT COLLATE "C" NOT NULL,
    first    BIGINT NOT NULL DEFAULT 0,
    last     BIGINT NOT NULL DEFAULT 0,
    pruned   BIGINT NOT NULL DEFAULT 0,
    archive  TEXT COLLATE "C" NOT NULL DEFAULT '',
    sha256   TEXT COLLATE "C" NOT NULL DEFAULT '',
    record   TEXT COLLATE "C" NOT NULL DEFAULT '',
    resume   BIGINT NOT NULL DEFAULT 1,
    problem  TEXT COLLATE "C" NOT NULL DEFAULT ''
);

-- The calls view's rows, kept by the audit writer in the transaction that
-- commits their records (see SQLite's 0009).
CREATE TABLE call_index (
    k          BIGINT PRIMARY KEY,
    call_id    TEXT COLLATE "C" NOT NULL UNIQUE,
    req_seq    BIGINT NOT NULL,
    out_seq    BIGINT NOT NULL DEFAULT 0,
    dec_seq    BIGINT NOT NULL,
    server     TEXT COLLATE "C" NOT NULL DEFAULT '',
    tool       TEXT COLLATE "C" NOT NULL DEFAULT '',
    client     TEXT COLLATE "C" NOT NULL DEFAULT '',
    session    TEXT COLLATE "C" NOT NULL DEFAULT '',
    decision   TEXT COLLATE "C" NOT NULL DEFAULT '',
    decided_by TEXT COLLATE "C" NOT NULL DEFAULT '',
    outcome    TEXT COLLATE "C" NOT NULL DEFAULT '',
    approval   TEXT COLLATE "C" NOT NULL DEFAULT ''
);
-- Each filter's column, then k: the newest calls that match are the
-- index's last entries for the value (SQLite adds the key by itself).
CREATE INDEX call_index_server ON call_index (server, k);
CREATE INDEX call_index_tool ON call_index (tool, k);
CREATE INDEX call_index_client ON call_index (client, k);
CREATE INDEX call_index_session ON call_index (session, k);
CREATE INDEX call_index_decision ON call_index (decision, k);
CREATE INDEX call_index_decided_by ON call_index (decided_by, k);
CREATE INDEX call_index_outcome ON call_index (outcome, k);

-- The words of each call's redacted arguments and latest result, by k.
CREATE TABLE call_text (
    k     BIGINT PRIMARY KEY,
    words TSVECTOR NOT NULL
);
CREATE INDEX call_text_words ON call_text USING GIN (words);

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

-- Every tool definition a server has shown. rowid, here and below, is
-- SQLite's implicit one: the order rows were made in, which queries sort
-- on.
CREATE TABLE tools (
    rowid      BIGINT GENERATED BY DEFAULT AS IDENTITY UNIQUE,
    server     TEXT COLLATE "C" NOT NULL,
    name       TEXT COLLATE "C" NOT NULL,
    pin        TEXT COLLATE "C" NOT NULL,
    def        TEXT COLLATE "C" NOT NULL,
    first_seen TEXT COLLATE "C" NOT NULL,
    last_seen  TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (server, name, pin)
);

-- Held calls. Arguments are complete until the call is decided.
CREATE TABLE approvals (
    id             TEXT COLLATE "C" PRIMARY KEY,
    session        TEXT COLLATE "C" NOT NULL DEFAULT '',
    client         TEXT COLLATE "C" NOT NULL DEFAULT '',
    server         TEXT COLLATE "C" NOT NULL,
    tool           TEXT COLLATE "C" NOT NULL,
    arguments      TEXT COLLATE "C" NOT NULL,
    digest         TEXT COLLATE "C" NOT NULL,
    pin            TEXT COLLATE "C" NOT NULL DEFAULT '',
    policy_version TEXT COLLATE "C" NOT NULL DEFAULT '',
    rule           TEXT COLLATE "C" NOT NULL DEFAULT '',
    held_reason    TEXT COLLATE "C" NOT NULL DEFAULT '',
    state          TEXT COLLATE "C" NOT NULL,
    decided_by     TEXT COLLATE "C" NOT NULL DEFAULT '',
    reason         TEXT COLLATE "C" NOT NULL DEFAULT '',
    created_at     TEXT COLLATE "C" NOT NULL,
    expires_at     TEXT COLLATE "C" NOT NULL,
    decided_at     TEXT COLLATE "C" NOT NULL DEFAULT '',
    used_at        TEXT COLLATE "C" NOT NULL DEFAULT '',
    call_id        TEXT COLLATE "C" NOT NULL DEFAULT ''
);
CREATE INDEX approvals_state ON approvals (state, created_at);
CREATE INDEX approvals_shape ON approvals (server, tool, digest, state);

-- Whether each tool definition (by pin) may be used.
CREATE TABLE tool_reviews (
    rowid      BIGINT GENERATED BY DEFAULT AS IDENTITY UNIQUE,
    server     TEXT COLLATE "C" NOT NULL,
    name       TEXT COLLATE "C" NOT NULL,
    pin        TEXT COLLATE "C" NOT NULL,
    state      TEXT COLLATE "C" NOT NULL,
    cause      TEXT COLLATE "C" NOT NULL,
    flags      TEXT COLLATE "C" NOT NULL DEFAULT '',
    decided_by TEXT COLLATE "C" NOT NULL DEFAULT '',
    decided_at TEXT COLLATE "C" NOT NULL DEFAULT '',
    created_at TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (server, name, pin)
);

-- Rate-limit token buckets, shared by every replica.
CREATE TABLE rate_limits (
    key        TEXT COLLATE "C" PRIMARY KEY,
    tokens     DOUBLE PRECISION NOT NULL,
    updated_at BIGINT NOT NULL
);

-- Configuration changes that wait for a person.
CREATE TABLE config_changes (
    rowid      BIGINT GENERATED BY DEFAULT AS IDENTITY UNIQUE,
    digest     TEXT COLLATE "C" PRIMARY KEY,
    summary    TEXT COLLATE "C" NOT NULL DEFAULT '',
    state      TEXT COLLATE "C" NOT NULL,
    decided_by TEXT COLLATE "C" NOT NULL DEFAULT '',
    decided_at TEXT COLLATE "C" NOT NULL DEFAULT '',
    created_at TEXT COLLATE "C" NOT NULL
);

-- The contents of rules.d/approved.yaml that guard itself wrote.
CREATE TABLE rules_written (
    digest     TEXT COLLATE "C" PRIMARY KEY,
    created_at TEXT COLLATE "C" NOT NULL
);

-- The audit log's verifications on a schedule.
CREATE TABLE audit_verifications (
    id       BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    time     TEXT COLLATE "C" NOT NULL,
    ok       BIGINT NOT NULL,
    records  BIGINT NOT NULL DEFAULT 0,
    problem  TEXT COLLATE "C" NOT NULL DEFAULT '',
    took_ms  BIGINT NOT NULL DEFAULT 0
);

-- Leases: which replica does a job only one may do at a time.
CREATE TABLE leases (
    name     TEXT COLLATE "C" PRIMARY KEY,
    holder   TEXT COLLATE "C" NOT NULL,
    expires  BIGINT NOT NULL,
    acquired TEXT COLLATE "C" NOT NULL
);

-- How far the audit log has been streamed to each receiver.
CREATE TABLE stream_cursors (
    receiver TEXT COLLATE "C" PRIMARY KEY,
    seq      BIGINT NOT NULL,
    updated  TEXT COLLATE "C" NOT NULL
);
