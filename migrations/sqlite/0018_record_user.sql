-- The caller the front authenticated for a session (a verified access
-- token), on each of its records: the token's subject, email and groups
-- (a JSON array of strings), all empty where no one authenticated. The
-- subject's column is user_subject, not user: USER is a reserved word in
-- PostgreSQL, where an unquoted user in a query is the database role.
ALTER TABLE records ADD COLUMN user_subject TEXT NOT NULL DEFAULT '';
ALTER TABLE records ADD COLUMN user_email TEXT NOT NULL DEFAULT '';
ALTER TABLE records ADD COLUMN user_groups TEXT NOT NULL DEFAULT '';

-- A call's user is its request's, for guard audit query --user. The
-- calls recorded before have none. The indexes hold only the calls that
-- name a user: where no one authenticates (stdio, static tokens) they
-- stay empty and cost the ingester nothing.
ALTER TABLE call_index ADD COLUMN user_subject TEXT NOT NULL DEFAULT '';
ALTER TABLE call_index ADD COLUMN user_email TEXT NOT NULL DEFAULT '';
CREATE INDEX call_index_user_subject ON call_index (user_subject) WHERE user_subject != '';
CREATE INDEX call_index_user_email ON call_index (user_email) WHERE user_email != '';

-- The view keeps its columns, in their order, and adds the user's.
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
    c.approval,
    q.user_subject,
    q.user_email,
    q.user_groups
FROM call_index c
JOIN records q ON q.seq = c.req_seq
JOIN records d ON d.seq = c.dec_seq
LEFT JOIN records o ON o.seq = c.out_seq;

-- Retention removes the user with the rest of a record's body.
DROP TRIGGER IF EXISTS records_no_update;
CREATE TRIGGER records_no_update BEFORE UPDATE ON records
WHEN NOT EXISTS (SELECT 1 FROM retention_grant g WHERE OLD.seq BETWEEN g.first_seq AND g.last_seq)
    OR OLD.pruned != 0 OR NEW.pruned != 1
    OR NEW.seq IS NOT OLD.seq OR NEW.id IS NOT OLD.id OR NEW.call_id IS NOT OLD.call_id
    OR NEW.kind IS NOT OLD.kind OR NEW.time IS NOT OLD.time
    OR NEW.prev_hash IS NOT OLD.prev_hash OR NEW.hash IS NOT OLD.hash
    OR NEW.session != '' OR NEW.client != '' OR NEW.protocol != '' OR NEW.server != ''
    OR NEW.direction != '' OR NEW.method != '' OR NEW.tool != '' OR NEW.arguments != ''
    OR NEW.pin != '' OR NEW.decision != '' OR NEW.decided_by != '' OR NEW.reason != ''
    OR NEW.outcome != '' OR NEW.result != '' OR NEW.detail != '' OR NEW.approval != ''
    OR NEW.request_size != 0 OR NEW.response_size != 0 OR NEW.duration_ms != 0
    OR NEW.user_subject != '' OR NEW.user_email != '' OR NEW.user_groups != ''
BEGIN SELECT RAISE(ABORT, 'audit records are append-only: only the retention job removes a body, under its grant'); END;
