-- Each record's MAC, beside it (see SQLite's 0021).
ALTER TABLE records ADD COLUMN mac BYTEA;

CREATE TRIGGER records_mac_kept BEFORE UPDATE OF mac ON records
    FOR EACH ROW WHEN (NEW.mac IS DISTINCT FROM OLD.mac)
    EXECUTE FUNCTION guard_append_only('audit records are append-only: a MAC is never changed');

CREATE INDEX records_macs ON records (seq) WHERE kind = 'lifecycle' AND decision = 'macs';

ALTER TABLE replicas ADD COLUMN macs BIGINT NOT NULL DEFAULT 0;
