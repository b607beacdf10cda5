-- The approval a held call waited on, or that a decision record decides.
ALTER TABLE records ADD COLUMN approval TEXT NOT NULL DEFAULT '';
