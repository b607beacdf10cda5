-- How far each process's journal has been moved into records. A journal is
-- ingested in the same transaction that advances its offset, so a record
-- is ingested once, whichever process does it.
CREATE TABLE journals (
    name   TEXT PRIMARY KEY,
    offset INTEGER NOT NULL
);
