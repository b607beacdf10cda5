package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/store"
)

// Without isolation, a change to the configuration that alters decisions
// (one a wrapped server could have written) is not applied by the running
// guard: it keeps deciding by the old policy and notes the change, until a
// person runs guard policy reload; then it applies it.
func TestConfigChangeWaitsForAPerson(t *testing.T) {
	const servers = "servers: {notes: {sandbox: off}}\n"
	e := newEnv(t, servers+"policy: {default: allow}\n")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs := e.connectExample(ctx)
	if text, isErr := callText(t, cs, "echo", map[string]any{"text": "before"}); isErr {
		t.Fatalf("echo before the change: %s", text)
	}
	e.writeConfig(e.cfg, servers+"policy:\n  default: allow\n  rules: [{name: no-echo, tool: echo, action: deny}]\n")
	db := e.open(ctx)
	defer db.Close()
	var pending *store.ConfigChange
	for pending == nil {
		var err error
		if pending, err = db.Configs().PendingConfigChange(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
			t.Fatal("the running guard never noted the change")
		case <-time.After(50 * time.Millisecond):
		}
	}
	if !strings.Contains(pending.Summary, `rule "no-echo" added`) {
		t.Errorf("the pending change says %q", pending.Summary)
	}
	if text, isErr := callText(t, cs, "echo", map[string]any{"text": "meanwhile"}); isErr {
		t.Fatalf("the change was applied before a person did: %s", text)
	}
	out, code := e.guard("policy", "reload", "--by", "erin")
	if code != 0 || !strings.Contains(out, `rule "no-echo" added`) || !strings.Contains(out, pending.Digest) {
		t.Fatalf("policy reload (%d):\n%s", code, out)
	}
	echoDenied(ctx, t, cs)
	found := false
	_ = db.Reader().Records(ctx, func(r *guard.Record) error {
		found = found || (r.Kind == guard.KindConfig && r.Decision == store.ConfigApplied && r.DecidedBy == "erin" && strings.Contains(r.Detail, pending.Digest))
		return nil
	})
	if !found {
		t.Error("the audit log does not record the change applied by erin")
	}
}

// echoDenied waits until the running guard denies echo by the rule no-echo.
func echoDenied(ctx context.Context, t *testing.T, cs *mcp.ClientSession) {
	t.Helper()
	for {
		if text, isErr := callText(t, cs, "echo", map[string]any{"text": "after"}); isErr {
			if !strings.Contains(text, "no-echo") {
				t.Errorf("denied, but not by the new rule: %s", text)
			}
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("the change never took effect")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// With isolation in force for every server on the machine, a change
// applies by itself; as soon as another guard process on the same data
// runs a server without isolation, one waits for a person again, though
// this process's own server is isolated.
func TestConfigChangeAppliesByItselfUnderIsolation(t *testing.T) {
	e := newEnv(t, "policy: {default: allow}\n")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs := e.connectExample(ctx)
	e.writeConfig(e.cfg, "policy:\n  default: allow\n  rules: [{name: no-echo, tool: echo, action: deny}]\n")
	echoDenied(ctx, t, cs)

	// Another process, whose server opted out of isolation.
	const exposed = "servers: {other: {sandbox: off}}\npolicy:\n  default: allow\n  rules: [{name: no-echo, tool: echo, action: deny}]\n"
	e.writeConfig(e.cfg, exposed)
	e.connect(ctx, mcp.NewClient(&mcp.Implementation{Name: "other", Version: "1"}, nil), "2025-11-25", nil, "other", guardBin, "example-server")
	e.writeConfig(e.cfg, "servers: {other: {sandbox: off}}\npolicy: {default: allow}\n")
	db := e.open(ctx)
	defer db.Close()
	for {
		c, err := db.Configs().PendingConfigChange(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if c != nil && strings.Contains(c.Summary, `rule "no-echo" removed`) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the isolated process did not hold back the change while another ran a server without isolation")
		case <-time.After(50 * time.Millisecond):
		}
	}
	if text, isErr := callText(t, cs, "echo", map[string]any{"text": "meanwhile"}); !isErr {
		t.Fatalf("the change was applied before a person did: %s", text)
	}
}
