package stdio

import (
	"bufio"
	"context"
	"io"
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

// testOptions are the relay options of package proxy's tests: a session
// of server "notes" over a store of its own, with the policy conf (default
// annotations) and holds that wait wait.
func testOptions(t testing.TB, ctx context.Context, conf string, wait time.Duration) (proxy.Options, *store.DB, *approvals.Manager) {
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
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil)), Contracts: policy.NewContracts(false),
		Listing:    func() string { return engine.Config().Listing("notes") },
		HideDenied: func() bool { return engine.Config().Policy.HideDenied },
	}, db, holds
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// lines reads r's lines, one by one.
func lines(r io.Reader) <-chan string {
	ch := make(chan string, 1024)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(r)
		sc.Buffer(nil, 4<<20)
		for sc.Scan() {
			ch <- sc.Text()
		}
	}()
	return ch
}
