-- How whoever decides on a held call must have been verified, as the
-- configuration of the process that held it required then: 'passkey'
-- (ui.passkey: required), 'oidc' (the UI logs in only through the
-- identity provider), '' where a typed name may decide. Fixed with the
-- hold, as its approvers are, so that a process with another
-- configuration (guard approvals approve --config other.yaml) cannot
-- decide it with a typed name. Approvals held before are left as they
-- are: ''.
ALTER TABLE approvals ADD COLUMN required_via TEXT NOT NULL DEFAULT '';
