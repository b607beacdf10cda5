-- Approval rules: who may approve a held call and how many distinct
-- people must (approvers, guard.Approvers as JSON; '' is anyone, once),
-- who made the call (requester, guard.Identity as JSON; '' where no one
-- authenticated), and each person's review of it. reviews counts them on
-- the approval's row, so that a review that leaves the call pending
-- changes the row too: replicas waiting on it and open pages hear of it
-- (approvals_notify). A person reviews a call once (the primary key); n
-- orders the reviews, and no two reviews of a call take one place.
ALTER TABLE approvals ADD COLUMN approvers TEXT COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE approvals ADD COLUMN requester TEXT COLLATE "C" NOT NULL DEFAULT '';
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
