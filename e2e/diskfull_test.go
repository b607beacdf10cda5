package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/guard-mcp/guard/internal/tmpfs"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A disk that fills and empties again: while guard's database cannot grow,
// calls through guard run are refused (their request record cannot be
// written, so the server never sees them); once there is room again, calls
// are served again by the same process, without a restart, and every call
// that was answered is in a log that verifies.
func TestDiskThatFillsAndEmptiesAgain(t *testing.T) {
	sqliteOnly(t, "the disk that fills is the one under the database's files")
	e := newEnv(t, "policy: {default: allow}\n")
	data := filepath.Dir(e.db)
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	tmpfs.Mount(t, data, "8m")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs := e.connectExample(ctx)

	answered := 0
	echo := func(text string) (string, error) {
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": text}})
		if err != nil {
			return "", err
		}
		if r.IsError {
			return "", errors.New(r.Content[0].(*mcp.TextContent).Text)
		}
		answered++
		return r.Content[0].(*mcp.TextContent).Text, nil
	}
	if _, err := echo("before"); err != nil {
		t.Fatalf("a call before the disk filled: %v", err)
	}

	// Fill the disk: a file that takes every free block. The text of
	// each call is large enough that its record needs new pages.
	filler := filepath.Join(data, "filler")
	fill(t, filler)
	big := strings.Repeat("x", 64<<10)
	refused := false
	for i := 0; i < 50 && !refused; i++ {
		_, err := echo(big)
		if err != nil {
			if !strings.Contains(err.Error(), "audit log could not be written") {
				t.Fatalf("a call on a full disk failed, but not as refused by the audit: %v", err)
			}
			refused = true
		}
	}
	if !refused {
		t.Fatal("no call was refused while the disk was full")
	}

	// Room again: the same guard serves calls again.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := echo("after"); err == nil {
			break
		} else if !strings.Contains(err.Error(), "audit log could not be written") {
			t.Fatalf("a call once there was room: %v", err)
		}
		select {
		case <-ctx.Done():
			t.Fatal("guard did not serve calls again once the disk had room")
		case <-time.After(50 * time.Millisecond):
		}
	}
	cs.Close()

	if out, code := e.guard("audit", "verify"); code != 0 {
		t.Fatalf("audit verify (%d):\n%s", code, out)
	}
	out, _ := e.guard("audit", "query", "--tool", "echo", "--format", "jsonl")
	ok := 0
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var row map[string]any
		if json.Unmarshal([]byte(line), &row) == nil && row["outcome"] == "ok" {
			ok++
		}
	}
	if ok != answered {
		t.Fatalf("%d calls were answered, %d are in the log as ok:\n%s", answered, ok, out)
	}
}

// fill writes a file until the disk it is on is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return
			}
			t.Fatal(err)
		}
	}
}
