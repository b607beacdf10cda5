package app

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/store"
	"github.com/guard-mcp/guard/web"
)

// errNoUI says that no guard serves the approval UI for a database.
var errNoUI = errors.New("no guard serves the approval UI for this database: start one (guard run, guard serve, guard demo) and try again")

// servedUI finds where the approval UI of the database at dbPath is
// served: the newest UI that recorded its start and not its stop and that
// answers there (a process that was killed recorded no stop). Each
// address is tried once, at its newest record.
func (m *Main) servedUI(ctx context.Context, dbPath, keyPath string) (string, error) {
	if !store.IsPostgres(dbPath) {
		if _, err := os.Stat(dbPath); errors.Is(err, os.ErrNotExist) {
			return "", errNoUI
		}
	}
	db, err := store.OpenReadOnly(ctx, store.Options{Path: dbPath, Logger: m.Logger, KeyPath: keyPath})
	if err != nil {
		return "", err
	}
	defer db.Close()
	stopped, tried := map[string]bool{}, map[string]bool{}
	var found string
	err = db.Reader().QueryRecords(ctx, guard.KindLifecycle, store.Filter{}, func(r *guard.Record) error {
		var d struct {
			Process string   `json:"process"`
			PID     int      `json:"pid"`
			Serves  []string `json:"serves"`
		}
		if json.Unmarshal([]byte(r.Detail), &d) != nil || d.Process != uiProcess || len(d.Serves) == 0 {
			return nil
		}
		addr := strings.TrimPrefix(d.Serves[0], "http://")
		key := fmt.Sprintf("%d %s", d.PID, addr)
		if r.Decision == store.LifecycleStopped {
			stopped[key] = true
			return nil
		}
		if stopped[key] || tried[addr] {
			return nil
		}
		tried[addr] = true
		if !answers(ctx, addr) {
			return nil
		}
		found = addr
		return errFound
	})
	if err != nil && !errors.Is(err, errFound) {
		return "", err
	}
	if found == "" {
		return "", errNoUI
	}
	return found, nil
}

// errFound ends a walk through records once the one sought is found.
var errFound = errors.New("found")

// answers reports whether something accepts connections at a UI's address
// (an unspecified host is reached on loopback).
func answers(ctx context.Context, addr string) bool {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	d := net.Dialer{Timeout: 2 * time.Second}
	c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, port))
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// UIURL is guard ui url: it prints the address of the approval UI a running
// guard serves for st's database, with the login token.
func (m *Main) UIURL(ctx context.Context, st *Settings) int {
	listen := st.Config.UI.Listen
	if st.Config.PublicURL == "" {
		// The address a running guard serves the UI on, as its record
		// says, not ui.listen: --ui may have chosen another.
		served, err := m.servedUI(ctx, st.DBPath, st.KeyPath())
		if err != nil {
			fmt.Fprintf(m.Stderr, "guard ui url: %v\n", err)
			return ExitFailure
		}
		listen = served
	}
	tok, err := st.uiToken()
	if err != nil {
		fmt.Fprintf(m.Stderr, "guard: %v\n", err)
		return ExitFailure
	}
	fmt.Fprintln(m.Stdout, uiOrigin(st.Config, listen)+"/login?token="+tok)
	return ExitOK
}

// UIEnroll is guard ui enroll: it prints a one-time link that enrols a
// passkey for who, valid for valid.
func (m *Main) UIEnroll(ctx context.Context, db *store.DB, st *Settings, who string, valid time.Duration) int {
	if st.Config.UI.Passkey != web.PasskeyRequired {
		fmt.Fprintln(m.Stderr, "guard ui enroll: ui.passkey is off in the configuration: set ui.passkey: required first")
		return ExitFailure
	}
	buf := make([]byte, 32)
	if _, err := rand.Read(buf); err != nil {
		fmt.Fprintf(m.Stderr, "guard ui enroll: %v\n", err)
		return ExitFailure
	}
	code := hex.EncodeToString(buf)
	listen := st.Config.UI.Listen
	if st.Config.PublicURL == "" {
		// Where a running guard serves the UI, when one does: --ui may
		// have chosen another address than ui.listen.
		if served, err := m.servedUI(ctx, st.DBPath, st.KeyPath()); err == nil {
			listen = served
		}
	}
	if err := db.Passkeys().AddPasskeyEnrolment(ctx, code, who, time.Now().Add(valid)); err != nil {
		fmt.Fprintf(m.Stderr, "guard ui enroll: %v\n", err)
		return ExitFailure
	}
	fmt.Fprintf(m.Stdout, "Open this link on this machine within %s to enrol a passkey for %s (it works once):\n%s/passkey/enroll?code=%s\n",
		valid, who, uiOrigin(st.Config, listen), code)
	return ExitOK
}
