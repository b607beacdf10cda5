package store

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/audit"
	"golang.org/x/mod/sumdb/note"
)

// call is a call's request and outcome records, a millisecond after at.
func call(i int, at time.Time) (req, out *guard.Record) {
	id := fmt.Sprintf("call-%02d", i)
	t := at.Add(time.Duration(i) * time.Millisecond)
	req = &guard.Record{ID: id + "-req", CallID: id, Kind: guard.KindRequest, Time: t, Server: "files", Method: "tools/call",
		Tool: "read_file", Arguments: fmt.Sprintf(`{"path":"/srv/%d","word":"w%d"}`, i, i), Decision: guard.DecisionAllowed}
	out = &guard.Record{ID: id + "-out", CallID: id, Kind: guard.KindOutcome, Time: t, Server: "files", Method: "tools/call",
		Tool: "read_file", Outcome: guard.OutcomeOK, Result: fmt.Sprintf(`{"text":"result %d"}`, i)}
	return req, out
}

// callIDs are the ids of the calls a query shows, in its order.
func callIDs(t *testing.T, db *DB, f Filter) []string {
	t.Helper()
	var out []string
	if err := db.Reader().Query(context.Background(), f, func(c *Call) error { out = append(out, c.ID); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// A reader sees the records acknowledged into the journal of a process
// that stopped, before any writable open moves them into the log: a
// query shows their calls (a call whose request is in the log and whose
// outcome is in the journal, calls wholly in the journal) with every
// filter, the records that are not calls are listed, an export holds
// them, marked as not yet in the chain, and the journal is left as it
// was. Once a writable open has moved them in, the log shows the same.
func TestReadersSeeTheJournalsOfStoppedProcesses(t *testing.T) {
	sqliteOnly(t)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "g.db")
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	db := openDB(t, path)
	for i := range 5 {
		req, out := call(i, at)
		if err := db.Append(req, out); err != nil {
			t.Fatal(err)
		}
	}
	req5, out5 := call(5, at)
	if err := db.Append(req5); err != nil {
		t.Fatal(err)
	}
	db.Close()
	journal := []*guard.Record{out5}
	for i := 6; i < 10; i++ {
		req, out := call(i, at)
		journal = append(journal, req, out)
	}
	ev := &guard.Record{ID: "event-1", CallID: "event-1", Kind: guard.KindEvent, Time: at.Add(time.Second), Server: "files",
		Method: "notifications/unknown", Detail: `{"error":"a notification guard does not know"}`}
	journal = append(journal, ev)
	j := orphanJournal(t, path, journal, nil)
	before, _ := os.ReadFile(j)

	ro, err := OpenReadOnly(ctx, Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	all := []string{"call-09", "call-08", "call-07", "call-06", "call-05", "call-04", "call-03", "call-02", "call-01", "call-00"}
	check := func(db *DB, chained bool) {
		t.Helper()
		if got := callIDs(t, db, Filter{}); !slices.Equal(got, all) {
			t.Errorf("calls %v, want %v", got, all)
		}
		for _, c := range []struct {
			f    Filter
			want []string
		}{
			{Filter{Limit: 3}, all[:3]},
			{Filter{Text: "w7"}, []string{"call-07"}},
			{Filter{Text: "result 5"}, []string{"call-05"}},
			{Filter{Outcome: guard.OutcomeOK, Limit: 7}, all[:7]},
			{Filter{ID: "call-03"}, []string{"call-03"}},
			{Filter{Before: 0, Since: at.Add(4 * time.Millisecond), Until: at.Add(6 * time.Millisecond)}, []string{"call-06", "call-05", "call-04"}},
		} {
			if got := callIDs(t, db, c.f); !slices.Equal(got, c.want) {
				t.Errorf("calls of %+v: %v, want %v", c.f, got, c.want)
			}
		}
		var five *Call
		_ = db.Reader().Query(ctx, Filter{ID: "call-05"}, func(c *Call) error { five = c; return nil })
		if five == nil || five.Outcome != guard.OutcomeOK || five.Result != out5.Result || (five.Hash != "") != chained {
			t.Errorf("the call whose outcome was in the journal: %+v", five)
		}
		var evs []*guard.Record
		if err := db.Reader().QueryRecords(ctx, guard.KindEvent, Filter{}, func(r *guard.Record) error { evs = append(evs, r); return nil }); err != nil {
			t.Fatal(err)
		}
		if len(evs) != 1 || evs[0].ID != ev.ID || (evs[0].Seq != 0) != chained {
			t.Errorf("events %+v", evs)
		}
	}
	check(ro, false)
	if u, err := ro.Verifier().Unchained(ctx); err != nil || u.Records != len(journal) || u.Journals != 1 || u.DamagedBytes != 0 {
		t.Errorf("unchained %+v %v, want the journal's %d records", u, err, len(journal))
	}
	var exp bytes.Buffer
	if err := ro.Reader().Export(ctx, &exp, ExportOptions{}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(exp.String()), "\n")[1:]
	var unchained []string
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		if m["pending"] == audit.PendingJournal {
			unchained = append(unchained, m["id"].(string))
		}
	}
	if len(lines) != 11+len(journal) || len(unchained) != len(journal) || unchained[0] != out5.ID {
		t.Errorf("the export holds %d records, %d of them not in the chain (%v), want 11 and %d", len(lines), len(unchained), unchained, len(journal))
	}
	key := ro.signer.Verifier()
	out, f := audit.CheckFiles(key, []audit.File{{Name: "export", Data: exp.Bytes()}})
	if f.Verdict() != audit.VerdictUnverifiable || len(out) != 1 || !strings.HasPrefix(out[0], "export: ok: all 11 records") ||
		len(f.Unverifiable) != 1 || !strings.Contains(f.Unverifiable[0], fmt.Sprintf("export: %d acknowledged records not yet in the chain", len(journal))) {
		t.Errorf("check: %v %+v", out, f)
	}
	ro.Close()
	if after, _ := os.ReadFile(j); !bytes.Equal(before, after) {
		t.Error("reading the journal changed it")
	}

	db = openDB(t, path)
	defer db.Close()
	check(db, true)
	if u, err := db.Verifier().Unchained(ctx); err != nil || u.Records != 0 {
		t.Errorf("unchained after a writable open: %+v %v", u, err)
	}
	verifyOK(t, db)
}

// An export made right after a process was killed holds every record it
// acknowledged: those a checkpoint covers, those of the chain after it,
// and those still in its journal; the check checks all it can and says
// what it cannot.
func TestAnExportRightAfterACrashHoldsEveryRecord(t *testing.T) {
	sqliteOnly(t)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "g.db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperCrasher$")
	cmd.Env = append(os.Environ(), "GUARD_STORE_CRASH_DB="+path, "GUARD_STORE_CRASH_DURABILITY=normal", "GUARD_STORE_CRASH_MORE=1")
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Fatalf("the child did not crash:\n%s", out)
	}
	ro, err := OpenReadOnly(ctx, Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	for _, format := range []string{"jsonl", "csv"} {
		var exp bytes.Buffer
		if err := ro.Reader().Export(ctx, &exp, ExportOptions{Format: format}); err != nil {
			t.Fatal(err)
		}
		ids := map[string]bool{}
		for _, l := range strings.Split(exp.String(), "\n") {
			if i := strings.Index(l, "call-"); i >= 0 {
				ids[strings.FieldsFunc(l[i:], func(r rune) bool { return r == '"' || r == ',' })[0]] = true
			}
		}
		if len(ids) != 55 {
			t.Errorf("%s: the export holds %d of the 55 calls acknowledged", format, len(ids))
		}
		// The records of the chain after the checkpoint are a note; those
		// not yet in it cannot be checked.
		out, f := audit.CheckFiles(note.Verifier(ro.signer.Verifier()), []audit.File{{Name: "export", Data: exp.Bytes()}})
		if f.Verdict() != audit.VerdictUnverifiable || len(f.Unverifiable) != 1 || !strings.Contains(f.Unverifiable[0], "export: 5 acknowledged records not yet in the chain") {
			t.Errorf("%s: check: %v %+v", format, out, f)
		}
	}
}
