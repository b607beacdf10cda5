package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	guard "github.com/guard-mcp/guard"
	guardapp "github.com/guard-mcp/guard/cmd/guard/app"
	"github.com/guard-mcp/guard/store"
)

// TestHelperStoppedGuard appends calls that the database cannot take yet
// (another connection holds its write lock) and exits without closing
// it, as a guard process that is killed does: its journal holds them.
func TestHelperStoppedGuard(t *testing.T) {
	path := os.Getenv("GUARD_CMD_STOPPED_DB")
	if path == "" {
		t.Skip("run as a child process only")
	}
	ctx := context.Background()
	db, err := store.Open(ctx, store.Options{Path: path, Durability: "normal", KeyPath: os.Getenv("GUARD_CMD_STOPPED_KEY")})
	if err != nil {
		t.Fatal(err)
	}
	lock, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := lock.Conn(ctx)
	if err == nil {
		_, err = conn.ExecContext(ctx, "BEGIN IMMEDIATE")
	}
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		id := fmt.Sprintf("stopped-%d", i)
		req := &guard.Record{CallID: id, ID: id + "-req", Kind: guard.KindRequest, Server: "files", Method: "tools/call",
			Tool: "read_file", Arguments: fmt.Sprintf(`{"path":"/srv/%d"}`, i), Decision: guard.DecisionAllowed}
		out := &guard.Record{CallID: id, ID: id + "-out", Kind: guard.KindOutcome, Server: "files", Method: "tools/call",
			Tool: "read_file", Outcome: guard.OutcomeOK, Result: `{"text":"ok"}`}
		if err := db.Append(req, out); err != nil {
			t.Fatal(err)
		}
	}
	os.Exit(3) // no Close
}

// stoppedGuard runs TestHelperStoppedGuard on the database at path, with
// the checkpoint key at keyPath ("": beside it), and returns the path and
// the bytes of the journal it left.
func stoppedGuard(t *testing.T, path, keyPath string) (string, []byte) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperStoppedGuard$")
	cmd.Env = append(os.Environ(), "GUARD_CMD_STOPPED_DB="+path, "GUARD_CMD_STOPPED_KEY="+keyPath)
	if out, err := cmd.CombinedOutput(); err == nil || cmd.ProcessState.ExitCode() != 3 {
		t.Fatalf("the child did not stop as killed: %v\n%s", err, out)
	}
	journals, _ := filepath.Glob(filepath.Join(path+".journal", "*.log"))
	if len(journals) != 1 {
		t.Fatalf("journals %v, want the stopped process's", journals)
	}
	b, err := os.ReadFile(journals[0])
	if err != nil {
		t.Fatal(err)
	}
	return journals[0], b
}

// Right after a guard process is killed, guard audit query shows the calls
// it acknowledged, and guard audit verify says that records are outside
// the chain and exits 3 rather than "ok"; once a byte of the journal is
// damaged it says so too. The next writable command moves what can be
// read into the log and records the loss, which verify names (exiting 0:
// the log is consistent) until a person acknowledges it with guard audit
// acknowledge-loss, a record of its own.
func TestAStoppedProcessesJournalAndItsLoss(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "db", "guard.db")
	appendCalls(t, path, 0, 5)
	journal, b := stoppedGuard(t, path, "")

	rows := strings.Count(guardIn(t, dir, path, 0, "audit", "query", "--format", "jsonl"), "\n")
	if rows != 15 {
		t.Errorf("guard audit query shows %d calls, want 15", rows)
	}
	out := guardIn(t, dir, path, 3, "audit", "verify")
	wantOutput(t, "verify", out, "CANNOT VERIFY: 20 acknowledged records not yet in the chain (journals of stopped processes); any writable guard command moves them in\nall else holds: 10 records")

	// Each frame begins with a mark (store's journal format).
	var marks []int
	for i := bytes.Index(b, []byte("\xf8GJ\x9d")); i >= 0; {
		marks = append(marks, i)
		j := bytes.Index(b[i+1:], []byte("\xf8GJ\x9d"))
		if j < 0 {
			break
		}
		i += j + 1
	}
	if len(marks) != 20 {
		t.Fatalf("%d frames in the journal, want 20", len(marks))
	}
	b[marks[5]+12] ^= 0x10 // the outcome of the third call
	if err := os.WriteFile(journal, b, 0o600); err != nil {
		t.Fatal(err)
	}
	out = guardIn(t, dir, path, 3, "audit", "verify")
	wantOutput(t, "verify of a damaged journal", out, "CANNOT VERIFY: 19 acknowledged records not yet in the chain")
	wantOutput(t, "verify of a damaged journal", out, fmt.Sprintf("%d bytes of those journals cannot be read", marks[6]-marks[5]))

	// Any writable open moves the journal in; the process that found the
	// damage counts it in its metrics.
	db, err := store.Open(context.Background(), store.Options{Path: path, Durability: "normal"})
	if err != nil {
		t.Fatal(err)
	}
	metrics := scrapeMetrics(t, db)
	status, body := guardapp.NewHealth(db, "test", "", slog.New(slog.DiscardHandler)).Readiness(context.Background())
	db.Close()
	if status != 200 || !strings.Contains(body, "integrity alerts: 1 not acknowledged") {
		t.Errorf("/readyz with a loss no one acknowledged: %d %q", status, body)
	}
	if !strings.Contains(metrics, "\nguard_audit_integrity_alerts 1\n") {
		t.Errorf("the metrics of the process that found the damage:\n%s", metrics)
	}
	if _, stderr, code := run(t, dir, "audit", "acknowledge-loss", "--db", path, "no-such-loss"); code != 1 || !strings.Contains(stderr, `no loss is recorded with the id "no-such-loss"`) {
		t.Fatalf("acknowledge-loss of no loss: exit %d, %s", code, stderr)
	}
	if _, err := os.Stat(journal + ".damaged"); err != nil {
		t.Fatalf("the damaged journal was not kept aside: %v", err)
	}
	out = guardIn(t, dir, path, 0, "audit", "verify")
	wantOutput(t, "verify after the recovery", out, "ok, unwitnessed: 30 records")
	m := regexp.MustCompile(`note: unacknowledged loss (\S+) `).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("verify does not name the loss: %s", out)
	}
	wantOutput(t, "the loss", out, "guard audit acknowledge-loss "+m[1])
	if rows := strings.Count(guardIn(t, dir, path, 0, "audit", "query", "--format", "jsonl"), "\n"); rows != 15 {
		t.Errorf("guard audit query shows %d calls after the recovery, want 15", rows)
	}

	out, stderr, code := run(t, dir, "audit", "acknowledge-loss", m[1], "--db", path, "--reason", "the disk was replaced", "--by", "alice")
	if code != 0 {
		t.Fatalf("acknowledge-loss: exit %d, %s", code, stderr)
	}
	wantOutput(t, "acknowledge-loss", out, m[1]+": the loss is acknowledged by alice")
	if _, stderr, code := run(t, dir, "audit", "acknowledge-loss", m[1], "--db", path); code != 1 || !strings.Contains(stderr, "acknowledged already by alice") {
		t.Errorf("a second acknowledgement: exit %d, %s", code, stderr)
	}
	if out := guardIn(t, dir, path, 0, "audit", "verify"); strings.Contains(out, "unacknowledged loss") {
		t.Errorf("verify after the acknowledgement: %s", out)
	}
	events := guardIn(t, dir, path, 0, "audit", "query", "--kind", "event", "--format", "jsonl")
	if !bytes.Contains([]byte(events), []byte(store.MethodJournalDamaged)) || !strings.Contains(events, `"decided_by":"alice"`) {
		t.Errorf("the events: %s", events)
	}
}
