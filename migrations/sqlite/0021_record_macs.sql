-- Each record written from this release on carries a MAC (HMAC-SHA256
-- under a key derived from the checkpoint key) over its seq and hash,
-- beside it and not in its hashed form: records after the last signed
-- checkpoint are then authenticated too, where the key file is out of
-- the database's reach. Records written before have none (NULL).
ALTER TABLE records ADD COLUMN mac BLOB;

-- A MAC is written with its record and never changed: retention blanks a
-- body, never a MAC (seq and hash, which it covers, stay).
DROP TRIGGER IF EXISTS records_mac_kept;
CREATE TRIGGER records_mac_kept BEFORE UPDATE OF mac ON records
WHEN NEW.mac IS NOT OLD.mac
BEGIN SELECT RAISE(ABORT, 'audit records are append-only: a MAC is never changed'); END;

-- The lifecycle record from which on every record must carry a valid
-- MAC ("MACs from seq N"): the first one counts, found without a scan.
CREATE INDEX IF NOT EXISTS records_macs ON records (seq) WHERE kind = 'lifecycle' AND decision = 'macs';

-- A process of this release says so in its beats: MACs start only once
-- no process of an earlier release (which writes records without them)
-- beats on the database.
ALTER TABLE replicas ADD COLUMN macs INTEGER NOT NULL DEFAULT 0;
