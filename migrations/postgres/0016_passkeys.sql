-- Passkeys: the WebAuthn credentials of the people who decide in the UI
-- with ui.passkey: required (id is the credential's id, base64url;
-- credential the go-webauthn credential as JSON: its public key, sign
-- count and flags), and the one-time codes of guard ui enroll that let a
-- browser enrol the first one, each until it expires. A code is kept as
-- its SHA-256, so that reading the database does not give one.
CREATE TABLE passkeys (
    id         TEXT COLLATE "C" PRIMARY KEY,
    user_name  TEXT COLLATE "C" NOT NULL,
    credential TEXT COLLATE "C" NOT NULL,
    created    TEXT COLLATE "C" NOT NULL,
    last_used  TEXT COLLATE "C" NOT NULL DEFAULT ''
);

CREATE TABLE passkey_enrolments (
    code      TEXT COLLATE "C" PRIMARY KEY,
    user_name TEXT COLLATE "C" NOT NULL,
    expires   TEXT COLLATE "C" NOT NULL
);
