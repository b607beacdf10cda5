-- Replicas hear of each other's changes to held calls, tool reviews and
-- configuration changes at once (LISTEN/NOTIFY). A trigger announces
-- every row changed on the channel guard_changes, in the transaction that
-- changes it: the notification is delivered when, and only if, that
-- transaction commits, whichever statement of guard's (or a person's at a
-- psql prompt) made the change. The payload names the table and the row,
-- approvals:ID, tool_reviews:ROWID or config_changes:DIGEST, so that a
-- replica waiting for the decision on one held call wakes for that call
-- only. Audit records are not announced: nothing is sent per relayed
-- message, only per change of state.
CREATE FUNCTION guard_notify_change() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    r   RECORD;
    key TEXT;
BEGIN
    IF TG_OP = 'DELETE' THEN
        r := OLD;
    ELSE
        r := NEW;
    END IF;
    IF TG_TABLE_NAME = 'approvals' THEN
        key := r.id;
    ELSIF TG_TABLE_NAME = 'tool_reviews' THEN
        key := r.rowid::text;
    ELSE
        key := r.digest;
    END IF;
    PERFORM pg_notify('guard_changes', TG_TABLE_NAME || ':' || key);
    RETURN NULL;
END $$;

CREATE TRIGGER approvals_notify AFTER INSERT OR UPDATE OR DELETE ON approvals
    FOR EACH ROW EXECUTE FUNCTION guard_notify_change();
CREATE TRIGGER tool_reviews_notify AFTER INSERT OR UPDATE OR DELETE ON tool_reviews
    FOR EACH ROW EXECUTE FUNCTION guard_notify_change();
CREATE TRIGGER config_changes_notify AFTER INSERT OR UPDATE OR DELETE ON config_changes
    FOR EACH ROW EXECUTE FUNCTION guard_notify_change();
