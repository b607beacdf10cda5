-- Which repeated call an approval lets through, and when the held call's
-- session ended while it was open (see SQLite's 0017).
ALTER TABLE approvals ADD COLUMN scope TEXT COLLATE "C" NOT NULL DEFAULT 'any';
ALTER TABLE approvals ADD COLUMN session_ended TEXT COLLATE "C" NOT NULL DEFAULT '';
