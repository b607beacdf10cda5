// Package relaytest gives the tests of the relay's transports (proxy/stdio,
// proxy/remote, the HTTP front) the relay options package proxy's own tests
// use: a session of server "notes" over a real store in the test's
// temporary directory, real policy and real holds. It lives outside proxy/
// because it links the store and the policy, which the relay may not.
package relaytest

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/guard-mcp/guard/approvals"
	"github.com/guard-mcp/guard/config"
	"github.com/guard-mcp/guard/policy"
	"github.com/guard-mcp/guard/proxy"
	"github.com/guard-mcp/guard/store"
)

// Options are relay options of server "notes" over a new database in t's
// temporary directory, with conf's policy (default: annotations) and holds
// that wait at most wait; the log goes to t.
func Options(t testing.TB, ctx context.Context, conf string, wait time.Duration) (proxy.Options, *store.DB, *approvals.Manager) {
	t.Helper()
	db, err := store.Open(ctx, store.Options{Path: filepath.Join(t.TempDir(), "guard.db"), Durability: "normal"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if conf == "" {
		conf = "policy:\n  default: annotations\n"
	}
	cfg, err := config.Parse([]byte(conf), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	engine, err := config.NewEngine("", cfg, policy.EngineOptions{})
	if err != nil {
		t.Fatal(err)
	}
	holds := approvals.New(db.Holds(), approvals.Options{Timeout: time.Minute, Wait: wait, ProgressEvery: 50 * time.Millisecond})
	return proxy.Options{
		Server: "notes", Recorder: db, Catalog: db.Catalog(), Decider: engine, Holds: holds,
		Redactor: cfg.Redactor(), MaxMessage: 1 << 20, ProgressEvery: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(Writer{t}, nil)), Contracts: policy.NewContracts(false),
		Listing:    func() string { return engine.Config().Listing("notes") },
		HideDenied: func() bool { return engine.Config().Policy.HideDenied },
	}, db, holds
}

// Writer writes each line to the test's log.
type Writer struct{ T testing.TB }

// Write logs p, one line without its newline.
func (w Writer) Write(p []byte) (int, error) {
	w.T.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
