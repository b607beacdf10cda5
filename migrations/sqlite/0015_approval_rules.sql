-- Approval rules (see PostgreSQL's 0015): who made a held call (the
-- caller the front authenticated: subject, email and groups as a JSON
-- array, all empty where no one did), who may approve it and how many
-- distinct people must (approvers, JSON; '' is anyone, once), how many
-- reviews it has had, and each person's review of it.
ALTER TABLE approvals ADD COLUMN user_subject TEXT NOT NULL DEFAULT '';
ALTER TABLE approvals ADD COLUMN user_email TEXT NOT NULL DEFAULT '';
ALTER TABLE approvals ADD COLUMN user_groups TEXT NOT NULL DEFAULT '';
ALTER TABLE approvals ADD COLUMN approvers TEXT NOT NULL DEFAULT '';
ALTER TABLE approvals ADD COLUMN reviews INTEGER NOT NULL DEFAULT 0;

CREATE TABLE approval_reviews (
    approval    TEXT NOT NULL,
    n           INTEGER NOT NULL,
    subject     TEXT NOT NULL,
    email       TEXT NOT NULL DEFAULT '',
    user_groups TEXT NOT NULL DEFAULT '',
    via         TEXT NOT NULL DEFAULT '',
    decision    TEXT NOT NULL,
    reason      TEXT NOT NULL DEFAULT '',
    at          TEXT NOT NULL,
    record      TEXT NOT NULL,
    PRIMARY KEY (approval, subject),
    UNIQUE (approval, n)
);
