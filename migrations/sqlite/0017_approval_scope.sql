-- Which repeated call an approval lets through (approval.scope: session,
-- the held call's session; any), and when the held call's session ended
-- while the approval was still open. Approvals made before it keep what
-- they meant then: any session.
ALTER TABLE approvals ADD COLUMN scope TEXT NOT NULL DEFAULT 'any';
ALTER TABLE approvals ADD COLUMN session_ended TEXT NOT NULL DEFAULT '';
