-- Passkeys (see PostgreSQL's 0016): the WebAuthn credentials of the people
-- who decide in the UI with ui.passkey: required, and the one-time codes
-- of guard ui enroll that let a browser enrol the first one. A code is
-- kept as its SHA-256, so that reading the database does not give one.
CREATE TABLE passkeys (
    id         TEXT PRIMARY KEY,
    user_name  TEXT NOT NULL,
    credential TEXT NOT NULL,
    created    TEXT NOT NULL,
    last_used  TEXT NOT NULL DEFAULT ''
);

CREATE TABLE passkey_enrolments (
    code      TEXT PRIMARY KEY,
    user_name TEXT NOT NULL,
    expires   TEXT NOT NULL
);
