package policy

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	guard "github.com/guard-mcp/guard"
)

// loads records what an engine says it loads, and can refuse the next.
type loads struct {
	mu     sync.Mutex
	got    []ConfigLoad
	refuse error
	seen   chan ConfigLoad
}

func (l *loads) record(c ConfigLoad) error {
	l.mu.Lock()
	err := l.refuse
	if err == nil {
		l.got = append(l.got, c)
	}
	l.refuse = nil
	l.mu.Unlock()
	l.seen <- c
	return err
}

// Every configuration the engine puts in force is recorded first, with the
// files' digest; a change whose record cannot be written is not applied,
// and is applied once its record is; a change left to a person is
// recorded as held.
func TestEngineRecordsEachLoadBeforeItTakesEffect(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "guard.yaml")
	os.WriteFile(f, []byte("policy: {default: allow}\n"), 0o600)
	c, err := Load(f, os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	l := &loads{seen: make(chan ConfigLoad, 16), refuse: errors.New("disk full")}
	isolated := true
	var mu sync.Mutex
	if _, err := NewEngine(f, c, reload, EngineOptions{RulesDir: filepath.Join(dir, "rules.d"), Record: l.record}); err == nil {
		t.Fatal("an engine started on a configuration whose record was not written")
	}
	<-l.seen
	e, err := NewEngine(f, c, reload, EngineOptions{RulesDir: filepath.Join(dir, "rules.d"), Record: l.record,
		Isolated: func() bool { mu.Lock(); defer mu.Unlock(); return isolated }})
	if err != nil {
		t.Fatal(err)
	}
	if got := <-l.seen; got.How != Loaded || got.Digest != FilesDigest(f, filepath.Join(dir, "rules.d"), c) || got.Policy != e.Policy().Version() {
		t.Fatalf("the start: %+v", got)
	}
	// Each look at the files (what Watch does every so often) is done
	// here, and has done its work when it returns.
	ctx := context.Background()
	call := &guard.Call{Method: "tools/call", ToolName: "x", Tool: tool(`{}`)}

	l.mu.Lock()
	l.refuse = errors.New("disk full")
	l.mu.Unlock()
	os.WriteFile(f, []byte("policy: {default: deny}\n"), 0o600)
	e.look(ctx)
	if got := <-l.seen; got.How != Reloaded {
		t.Fatalf("the refused reload: %+v", got)
	}
	if a := e.Decide(call).Action; a != guard.ActionAllow {
		t.Fatalf("a change whose record was not written is in force: %s", a)
	}
	e.look(ctx)
	got := <-l.seen // tried again at the next look
	if got.How != Reloaded || got.Changes == "" {
		t.Fatalf("the reload: %+v", got)
	}
	if a := e.Decide(call).Action; a != guard.ActionDeny { // applied right after its record
		t.Fatalf("the recorded change was not applied: %s", a)
	}

	mu.Lock()
	isolated = false
	mu.Unlock()
	os.WriteFile(f, []byte("policy: {default: approve}\n"), 0o600)
	e.look(ctx)
	if got := <-l.seen; got.How != Held || got.Changes == "" || got.Policy != "" {
		t.Fatalf("a change left to a person: %+v", got)
	}
	if a := e.Decide(call).Action; a != guard.ActionDeny {
		t.Fatalf("a held change is in force: %s", a)
	}
}

// learnedList is learned rules kept in memory, as the database keeps them
// for replicas (store.Learned through cmd/guard's learnedRules).
type learnedList struct {
	mu      sync.Mutex
	rules   []Rule
	version int64
	down    error // when set, what reading the version fails with
}

func (l *learnedList) add(r Rule) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rules = append(l.rules, r)
	l.version++
}

func (l *learnedList) LearnedRules(context.Context) ([]Rule, int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Rule(nil), l.rules...), l.version, nil
}

func (l *learnedList) LearnedRulesVersion(context.Context) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.version, l.down
}

// A database that cannot be read is logged once as the engine's
// look at the learned rules starts failing, not once a look (every
// second, on every replica), and once as it reads again.
func TestEngineLogsLearnedRulesUnreadableOnce(t *testing.T) {
	c, err := Parse([]byte("policy: {default: allow}\n"), "guard.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	learned := &learnedList{}
	e, err := NewEngine("", c, reload, EngineOptions{Learned: learned, Logger: slog.New(slog.NewTextHandler(&out, nil))})
	if err != nil {
		t.Fatal(err)
	}
	learned.mu.Lock()
	learned.down = errors.New("connection refused")
	learned.mu.Unlock()
	for range 10 {
		e.learnedChanged(context.Background())
	}
	if n := strings.Count(out.String(), "cannot read whether they changed"); n != 1 {
		t.Fatalf("10 failed reads in a row logged %d times:\n%s", n, out.String())
	}
	learned.mu.Lock()
	learned.down = nil
	learned.mu.Unlock()
	e.learnedChanged(context.Background())
	if !strings.Contains(out.String(), "recovered after 10 failures") {
		t.Fatalf("the end of the failures was not logged:\n%s", out.String())
	}
}

// With learned rules that are not a file, the engine applies each change
// of theirs with the configuration in force, records it first, and keeps
// the policy in force when the change is not valid (a rule whose name a
// configured rule has); approved.yaml is not read.
func TestEngineAppliesLearnedRulesFromTheirStore(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "guard.yaml")
	if err := os.MkdirAll(filepath.Join(dir, "rules.d"), 0o700); err != nil {
		t.Fatal(err)
	}
	for file, text := range map[string]string{
		f: "policy:\n  default: approve\n  rules: [{name: no-rm, tool: rm, action: deny}]\n",
		filepath.Join(dir, "rules.d", ApprovedRulesFile): "rules: [{name: from-file, tool: fetch, action: allow}]\n",
	} {
		if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c, err := Load(f, os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	learned := &learnedList{}
	l := &loads{seen: make(chan ConfigLoad, 8)}
	e, err := NewEngine(f, c, reload, EngineOptions{RulesDir: filepath.Join(dir, "rules.d"), Record: l.record, Learned: learned})
	if err != nil {
		t.Fatal(err)
	}
	call := func(tool string) *guard.Call {
		return &guard.Call{Server: "s", Method: "tools/call", ToolName: tool, Arguments: []byte("{}"), Args: map[string]any{}}
	}
	if v := e.Decide(call("fetch")); v.Action != guard.ActionApprove {
		t.Fatalf("fetch before any learned rule, approved.yaml aside: %+v", v)
	}
	before := e.Policy().Version()
	learned.add(Rule{Name: "approved-s-fetch", Server: "s", Tool: "fetch", Method: "tools/call", Action: guard.ActionAllow})
	e.learnedChanged(context.Background())
	if v := e.Decide(call("fetch")); v.Action != guard.ActionAllow || v.Rule != "approved-s-fetch" {
		t.Fatalf("fetch once the rule is learned: %+v", v)
	}
	if e.Policy().Version() == before {
		t.Fatal("the policy version did not change with the learned rule")
	}
	if last := l.got[len(l.got)-1]; last.How != Reloaded || last.Policy != e.Policy().Version() {
		t.Fatalf("the learned rule's load was not recorded: %+v", last)
	}
	// A learned rule named as a configured one is not applied.
	in := e.Policy().Version()
	learned.add(Rule{Name: "no-rm", Tool: "rm", Method: "tools/call", Action: guard.ActionAllow})
	e.learnedChanged(context.Background())
	if v := e.Decide(call("rm")); v.Action != guard.ActionDeny || e.Policy().Version() != in {
		t.Fatalf("an invalid learned rule changed the policy: %+v", v)
	}
}
