-- How whoever decides on a held call must have been verified (see
-- SQLite's 0020).
ALTER TABLE approvals ADD COLUMN required_via TEXT COLLATE "C" NOT NULL DEFAULT '';
