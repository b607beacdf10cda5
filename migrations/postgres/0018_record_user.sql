-- The caller the front authenticated for a session (see SQLite's 0015):
-- user_subject, not user, which is a reserved word here.
ALTER TABLE records ADD COLUMN user_subject TEXT COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE records ADD COLUMN user_email TEXT COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE records ADD COLUMN user_groups TEXT COLLATE "C" NOT NULL DEFAULT '';

ALTER TABLE call_index ADD COLUMN user_subject TEXT COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE call_index ADD COLUMN user_email TEXT COLLATE "C" NOT NULL DEFAULT '';
CREATE INDEX call_index_user_subject ON call_index (user_subject, k) WHERE user_subject <> '';
CREATE INDEX call_index_user_email ON call_index (user_email, k) WHERE user_email <> '';

-- The view keeps its columns, in their order, and adds the user's.
CREATE OR REPLACE VIEW calls AS
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
    c.approval,
    q.user_subject,
    q.user_email,
    q.user_groups
FROM call_index c
JOIN records q ON q.seq = c.req_seq
JOIN records d ON d.seq = c.dec_seq
LEFT JOIN records o ON o.seq = c.out_seq;

-- Retention removes the user with the rest of a record's body. The
-- trigger blanks it itself, so that a replica of the release before,
-- whose retention does not know the columns, still removes it.
CREATE OR REPLACE FUNCTION guard_records_update() RETURNS trigger LANGUAGE plpgsql AS $$
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
    NEW.user_subject := '';
    NEW.user_email := '';
    NEW.user_groups := '';
    RETURN NEW;
END $$;
