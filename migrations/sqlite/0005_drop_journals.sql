-- Records are committed straight into records by each process's audit
-- writer: the per-process journals, and the offsets of how far each was
-- moved into the database, are gone. (Open moves what an older version left
-- in a journal into records before this runs.)
DROP TABLE IF EXISTS journals;
