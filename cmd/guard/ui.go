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
	"github.com/guard-mcp/guard/store"
)

func init() {
	commands["ui"] = command{summary: "the approval UI: ui url prints its address with the login token", run: cmdUI}
}

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

func cmdUI(ctx context.Context, a *app, args []string) int {
	if len(args) == 0 || args[0] != "url" {
		fmt.Fprintln(a.stderr, "usage: guard ui url")
		return exitUsage
	}
	fs := a.flagSet("ui url")
	cf := addCommonFlags(fs)
	if status, ok := a.parseFlags(fs, args[1:]); !ok {
		return status
	}
	st, status, ok := a.settingsOrExit(cf)
	if !ok {
		return status
	}
	base := st.Config.PublicURL
	if base == "" {
		// The address a running guard serves the UI on, as its record
		// says, not ui.listen: --ui may have chosen another.
		served, err := servedUI(ctx, a, st.DBPath, keyPath(st))
		if err != nil {
			fmt.Fprintf(a.stderr, "guard ui url: %v\n", err)
			return exitFailure
		}
		base = uiBase("", served)
	}
	tok, err := st.uiToken()
	if err != nil {
		fmt.Fprintf(a.stderr, "guard: %v\n", err)
		return exitFailure
	}
	fmt.Fprintln(a.stdout, base+"/login?token="+tok)
	return exitOK
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
