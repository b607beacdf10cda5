-- Approval rules. A held call keeps who made it: the caller the front
-- authenticated (user_subject, not user, a reserved word here; email;
-- groups as a JSON array), all empty where no one did; they cannot
-- decide on it. approvers says who may approve it and how many distinct
-- people must (guard.Approvers as JSON; '' is anyone, once). reviews
-- counts the reviews on the approval's row, so that a review that leaves
-- the call pending changes the row too: replicas waiting on it and open
-- pages hear of it (approvals_notify). approval_reviews holds each
-- person's review: a person reviews a call once (the primary key), n
-- orders the reviews, and no two reviews of a call take one place.
ALTER TABLE approvals ADD COLUMN user_subject TEXT COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE approvals ADD COLUMN user_email TEXT COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE approvals ADD COLUMN user_groups TEXT COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE approvals ADD COLUMN approvers TEXT COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE approvals ADD COLUMN reviews BIGINT NOT NULL DEFAULT 0;

CREATE TABLE approval_reviews (
    approval    TEXT COLLATE "C" NOT NULL,
    n           BIGINT NOT NULL,
    subject     TEXT COLLATE "C" NOT NULL,
    email       TEXT COLLATE "C" NOT NULL DEFAULT '',
    user_groups TEXT COLLATE "C" NOT NULL DEFAULT '',
    via         TEXT COLLATE "C" NOT NULL DEFAULT '',
    decision    TEXT COLLATE "C" NOT NULL,
    reason      TEXT COLLATE "C" NOT NULL DEFAULT '',
    at          TEXT COLLATE "C" NOT NULL,
    record      TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (approval, subject),
    UNIQUE (approval, n)
);
