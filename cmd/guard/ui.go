package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/config"
	"github.com/guard-mcp/guard/store"
	"github.com/guard-mcp/guard/web"
	"github.com/spf13/cobra"
)

func init() { register(uiCommand) }

// uiTokenFile holds the UI's login token, in the data directory.
const uiTokenFile = "ui.token"

// uiToken returns the UI's login token, creating it (32 random bytes,
// readable by the owner only) on first use.
func uiToken(dataDir string) (string, error) {
	path := filepath.Join(dataDir, uiTokenFile)
	if b, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) >= 64 {
		return strings.TrimSpace(string(b)), nil
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", fmt.Errorf("ui token: %w", err)
	}
	buf := make([]byte, 32)
	if _, err := rand.Read(buf); err != nil {
		return "", fmt.Errorf("ui token: %w", err)
	}
	tok := hex.EncodeToString(buf)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) { // another process made it first
		b, rerr := os.ReadFile(path)
		if rerr != nil {
			return "", fmt.Errorf("ui token: %w", rerr)
		}
		return strings.TrimSpace(string(b)), nil
	}
	if err != nil {
		return "", fmt.Errorf("ui token: %w", err)
	}
	defer f.Close()
	if _, err := f.WriteString(tok + "\n"); err != nil {
		return "", fmt.Errorf("ui token: %w", err)
	}
	return tok, nil
}

// uiURL is the address a browser opens: the login route with the token,
// at the public URL when one is configured.
func uiURL(publicURL, listen, token string) string {
	return uiBase(publicURL, listen) + "/login?token=" + token
}

// uiBase is the UI's address: the public URL when one is configured
// (browsers reach the UI through what stands in front of guard), else
// the address it listens on.
func uiBase(publicURL, listen string) string {
	if publicURL != "" {
		return publicURL
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "http://" + listen
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// uiOrigin is the UI's address as browsers reach it: with passkeys, the
// origin of their relying party (http://localhost:PORT, as an IP address
// cannot be one), else uiBase.
func uiOrigin(c *config.Config, listen string) string {
	if c.UI.Passkey == web.PasskeyRequired {
		if o, err := c.PasskeyOrigin(listen); err == nil {
			return o
		}
	}
	return uiBase(c.PublicURL, listen)
}

// uiCommand is guard ui: the approval UI's address, and passkeys'
// enrolment.
func uiCommand(a *app) *cobra.Command {
	return a.group("ui", "the approval UI: its address with the login token, and passkey enrolment", "",
		uiURLCommand(a), uiEnrollCommand(a))
}

// uiURLCommand prints the address of the approval UI a running guard
// serves for this database, with the login token.
func uiURLCommand(a *app) *cobra.Command {
	c := leaf("url", "print the address the UI is served on, with its login token (exit 1 when none serves)", exactly())
	cf := addCommonFlags(c.Flags())
	c.RunE = a.runs(func(ctx context.Context, _ []string) int {
		st, status, ok := a.settingsOrExit(cf)
		if !ok {
			return status
		}
		listen := st.Config.UI.Listen
		if st.Config.PublicURL == "" {
			// The address a running guard serves the UI on, as its record
			// says, not ui.listen: --ui may have chosen another.
			served, err := servedUI(ctx, a, st.DBPath, keyPath(st))
			if err != nil {
				fmt.Fprintf(a.stderr, "guard ui url: %v\n", err)
				return exitFailure
			}
			listen = served
		}
		tok, err := st.uiToken()
		if err != nil {
			fmt.Fprintf(a.stderr, "guard: %v\n", err)
			return exitFailure
		}
		fmt.Fprintln(a.stdout, uiOrigin(st.Config, listen)+"/login?token="+tok)
		return exitOK
	})
	return c
}

// uiEnrollCommand prints a one-time link that enrols a passkey for the
// person running it. The code is kept in the database only (as its
// SHA-256): a process that holds the UI token and not the database cannot
// enrol.
func uiEnrollCommand(a *app) *cobra.Command {
	c := leaf("enroll", "print a one-time link that enrols a passkey", exactly())
	fs := c.Flags()
	cf := addCommonFlags(fs)
	name := fs.String("name", "", "whom the passkey is for, as decisions will name them (default: the user running this command)")
	valid := fs.Duration("valid", 5*time.Minute, "how long the link works (once)")
	c.RunE = a.runs(func(ctx context.Context, _ []string) int {
		if *valid <= 0 || *valid > time.Hour {
			fmt.Fprintln(a.stderr, "guard ui enroll: --valid: between 1s and 1h")
			return exitUsage
		}
		who := a.orCurrentUser(strings.TrimSpace(*name))
		db, st, status, ok := a.open(ctx, cf)
		if !ok {
			return status
		}
		defer db.Close()
		if st.Config.UI.Passkey != web.PasskeyRequired {
			fmt.Fprintln(a.stderr, "guard ui enroll: ui.passkey is off in the configuration: set ui.passkey: required first")
			return exitFailure
		}
		buf := make([]byte, 32)
		if _, err := rand.Read(buf); err != nil {
			fmt.Fprintf(a.stderr, "guard ui enroll: %v\n", err)
			return exitFailure
		}
		code := hex.EncodeToString(buf)
		listen := st.Config.UI.Listen
		if st.Config.PublicURL == "" {
			// Where a running guard serves the UI, when one does: --ui may
			// have chosen another address than ui.listen.
			if served, err := servedUI(ctx, a, st.DBPath, keyPath(st)); err == nil {
				listen = served
			}
		}
		if err := db.AddPasskeyEnrolment(ctx, code, who, time.Now().Add(*valid)); err != nil {
			fmt.Fprintf(a.stderr, "guard ui enroll: %v\n", err)
			return exitFailure
		}
		fmt.Fprintf(a.stdout, "Open this link on this machine within %s to enrol a passkey for %s (it works once):\n%s/passkey/enroll?code=%s\n",
			*valid, who, uiOrigin(st.Config, listen), code)
		return exitOK
	})
	return c
}

// errNoUI says that no guard serves the approval UI for a database.
var errNoUI = errors.New("no guard serves the approval UI for this database: start one (guard run, guard serve, guard demo) and try again")

// servedUI finds where the approval UI of the database at dbPath is
// served: the newest UI that recorded its start and not its stop and that
// answers there (a process that was killed recorded no stop). Each
// address is tried once, at its newest record.
func servedUI(ctx context.Context, a *app, dbPath, keyPath string) (string, error) {
	if !store.IsPostgres(dbPath) {
		if _, err := os.Stat(dbPath); errors.Is(err, os.ErrNotExist) {
			return "", errNoUI
		}
	}
	db, err := store.OpenReadOnly(ctx, store.Options{Path: dbPath, Logger: a.logger, KeyPath: keyPath})
	if err != nil {
		return "", err
	}
	defer db.Close()
	stopped, tried := map[string]bool{}, map[string]bool{}
	var found string
	err = db.QueryRecords(ctx, guard.KindLifecycle, store.Filter{}, func(r *guard.Record) error {
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
