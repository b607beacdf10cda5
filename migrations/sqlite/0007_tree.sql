-- The Merkle tree over the records (RFC 6962 / RFC 9162 shape, as
-- golang.org/x/mod/sumdb/tlog stores it): every hash the tree keeps, by
-- tlog's stored hash index. Record seq N is leaf N-1; its leaf hash is the
-- RFC 6962 hash of the record's canonical form. The hashes stay when a
-- record's body is removed by retention, so the tree, every checkpoint and
-- every proof still verify.
CREATE TABLE tree_hashes (
    idx  INTEGER PRIMARY KEY,
    hash BLOB NOT NULL
);
CREATE TRIGGER tree_hashes_no_update BEFORE UPDATE ON tree_hashes
BEGIN SELECT RAISE(ABORT, 'the audit tree is append-only'); END;
CREATE TRIGGER tree_hashes_no_delete BEFORE DELETE ON tree_hashes
BEGIN SELECT RAISE(ABORT, 'the audit tree is append-only'); END;

-- Every checkpoint signed, in the C2SP signed-note form (origin, size,
-- base64 root hash, then the signature): each was proved consistent with
-- the one before it when it was signed.
CREATE TABLE checkpoints (
    size INTEGER PRIMARY KEY,
    note TEXT NOT NULL,
    time TEXT NOT NULL
);
CREATE TRIGGER checkpoints_no_update BEFORE UPDATE ON checkpoints
BEGIN SELECT RAISE(ABORT, 'audit checkpoints are append-only'); END;
CREATE TRIGGER checkpoints_no_delete BEFORE DELETE ON checkpoints
BEGIN SELECT RAISE(ABORT, 'audit checkpoints are append-only'); END;
