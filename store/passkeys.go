package store

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	guard "github.com/guard-mcp/guard"
)

// Passkey is a WebAuthn credential of a person who decides in the UI.
type Passkey struct {
	// ID is the credential's id, base64url without padding.
	ID string
	// User is the person it belongs to, as decisions name them.
	User string
	// Credential is the credential as the UI keeps it (go-webauthn's, as
	// JSON: its public key, sign count and flags): the store does not
	// read it.
	Credential []byte
	Created    time.Time
	LastUsed   time.Time
}

// enrolmentKey is how a one-time enrolment code is kept: its SHA-256,
// so that reading the database does not give a code that works.
func enrolmentKey(code string) string {
	sum := sha256.Sum256([]byte(code))
	return hex.EncodeToString(sum[:])
}

// AddPasskeyEnrolment keeps a one-time code that lets a browser enrol a
// passkey for user until expires (guard ui enroll).
func (ps Passkeys) AddPasskeyEnrolment(ctx context.Context, code, user string, expires time.Time) error {
	_, err := ps.db.w.ExecContext(ctx, `INSERT INTO passkey_enrolments (code, user_name, expires) VALUES (?,?,?)`,
		enrolmentKey(code), user, fmtTime(expires))
	if err != nil {
		return fmt.Errorf("passkey enrolment: %w", err)
	}
	return nil
}

// PasskeyEnrolment returns the user an enrolment code is for, without
// using it up; guard.ErrNotFound when there is no such code, or it expired.
func (ps Passkeys) PasskeyEnrolment(ctx context.Context, code string) (string, error) {
	var user, expires string
	err := ps.db.w.QueryRowContext(ctx, `SELECT user_name, expires FROM passkey_enrolments WHERE code = ?`, enrolmentKey(code)).
		Scan(&user, &expires)
	if errors.Is(err, sql.ErrNoRows) || err == nil && !ps.db.opts.Now().Before(parseTime(expires)) {
		return "", fmt.Errorf("passkey enrolment code: %w (or expired)", guard.ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("passkey enrolment: %w", err)
	}
	return user, nil
}

// MethodPasskeyEnrolled is the method of the event recorded for each
// passkey enrolled: a credential that can decide held calls. The record's
// decided_by is whom it is for; its detail holds the credential's id and
// whether an enrolment code let it in.
const MethodPasskeyEnrolled = "guard/passkey_enrolled"

// AddPasskey stores a passkey enrolled with a code (using the code up:
// of two enrolments with one code, one succeeds) or, for code "", by a
// person who used a passkey already. Codes past their expiry go with it.
// Like a decision, the enrolment is in the audit log (an event,
// MethodPasskeyEnrolled) before the passkey is stored, and a passkey whose
// record cannot be written is not (its code is used up all the same).
func (ps Passkeys) AddPasskey(ctx context.Context, code string, p Passkey) error {
	now := ps.db.opts.Now()
	if code != "" {
		var user, expires string
		err := ps.db.w.QueryRowContext(ctx, `DELETE FROM passkey_enrolments WHERE code = ? RETURNING user_name, expires`, enrolmentKey(code)).
			Scan(&user, &expires)
		switch {
		case errors.Is(err, sql.ErrNoRows), err == nil && !now.Before(parseTime(expires)):
			return fmt.Errorf("passkey enrolment code: %w (or expired)", guard.ErrNotFound)
		case err != nil:
			return fmt.Errorf("passkey enrolment: %w", err)
		case user != p.User:
			return fmt.Errorf("passkey enrolment code: it is for %s, not %s", user, p.User)
		}
	}
	detail, _ := json.Marshal(map[string]any{"credential": p.ID, "with_code": code != ""})
	if err := ps.db.Append(&guard.Record{ID: guard.NewID(), CallID: guard.NewID(), Kind: guard.KindEvent, Time: now.UTC(),
		Method: MethodPasskeyEnrolled, DecidedBy: p.User, Detail: string(detail)}); err != nil {
		return fmt.Errorf("passkey: %w", err)
	}
	tx, err := ps.db.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("passkey: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `DELETE FROM passkey_enrolments WHERE expires <= ?`, fmtTime(now)); err != nil {
		return fmt.Errorf("passkey: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO passkeys (id, user_name, credential, created) VALUES (?,?,?,?)`,
		p.ID, p.User, string(p.Credential), fmtTime(now)); err != nil {
		return fmt.Errorf("passkey: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("passkey: %w", err)
	}
	return nil
}

// Passkeys returns every passkey, oldest first.
func (ps Passkeys) Passkeys(ctx context.Context) ([]Passkey, error) {
	rows, err := ps.db.w.QueryContext(ctx, `SELECT id, user_name, credential, created, last_used FROM passkeys ORDER BY created, id`)
	if err != nil {
		return nil, fmt.Errorf("passkeys: %w", err)
	}
	defer rows.Close()
	var out []Passkey
	for rows.Next() {
		var p Passkey
		var cred, created, used string
		if err := rows.Scan(&p.ID, &p.User, &cred, &created, &used); err != nil {
			return nil, fmt.Errorf("passkeys: %w", err)
		}
		p.Credential, p.Created, p.LastUsed = []byte(cred), parseTime(created), parseTime(used)
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("passkeys: %w", err)
	}
	return out, nil
}

// UsePasskey records a passkey's use: its credential as it is now (the
// authenticator's sign count goes up with each use, and a count that does
// not is a sign of a cloned key).
func (ps Passkeys) UsePasskey(ctx context.Context, id string, credential []byte) error {
	res, err := ps.db.w.ExecContext(ctx, `UPDATE passkeys SET credential = ?, last_used = ? WHERE id = ?`,
		string(credential), fmtTime(ps.db.opts.Now()), id)
	ok, err := affected(res, err)
	switch {
	case err != nil:
		return fmt.Errorf("passkey %s: %w", id, err)
	case !ok:
		return fmt.Errorf("passkey %s: %w", id, guard.ErrNotFound)
	}
	return nil
}

// Passkeys keeps the passkeys of the people who decide in the UI and the
// one-time codes that enrol them; DB.Passkeys returns it.
type Passkeys struct{ db *DB }

// Passkeys returns the store of passkeys.
func (db *DB) Passkeys() Passkeys { return Passkeys{db} }
