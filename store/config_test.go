package store

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	guard "github.com/guard-mcp/guard"
)

// configEvents returns the audit events about configuration changes.
func configEvents(t *testing.T, db *DB) []*guard.Record {
	t.Helper()
	var out []*guard.Record
	err := db.Reader().Records(context.Background(), func(r *guard.Record) error {
		if r.Kind == guard.KindConfig && (r.Decision == ConfigApplied || r.Decision == ConfigDismissed) {
			out = append(out, r)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func configState(t *testing.T, db *DB, digest string) string {
	t.Helper()
	c, err := db.Configs().ConfigChangeByDigest(context.Background(), digest)
	if err != nil {
		t.Fatal(err)
	}
	if c == nil {
		return "none"
	}
	return c.State
}

func pendingDigest(t *testing.T, db *DB) string {
	t.Helper()
	c, err := db.Configs().PendingConfigChange(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if c == nil {
		return ""
	}
	return c.Digest
}

func TestConfigChangePendingAndSuperseded(t *testing.T) {
	db := openDB(t, testPath(t))
	defer db.Close()
	ctx := context.Background()
	if d := pendingDigest(t, db); d != "" {
		t.Fatalf("pending in a new database: %s", d)
	}
	if err := db.Configs().NoteConfigChange(ctx, "sha256:a", `rule "no-echo" added`); err != nil {
		t.Fatal(err)
	}
	c, err := db.Configs().PendingConfigChange(ctx)
	if err != nil || c == nil {
		t.Fatalf("pending: %v %v", c, err)
	}
	if c.Digest != "sha256:a" || c.Summary != `rule "no-echo" added` || c.State != ConfigPending || c.Created == "" || c.DecidedBy != "" {
		t.Errorf("pending change: %+v", c)
	}
	// Noting it again changes nothing.
	if err := db.Configs().NoteConfigChange(ctx, "sha256:a", "other"); err != nil {
		t.Fatal(err)
	}
	if c, _ := db.Configs().ConfigChangeByDigest(ctx, "sha256:a"); c.Summary != `rule "no-echo" added` || c.State != ConfigPending {
		t.Errorf("noted twice: %+v", c)
	}
	// A newer edit supersedes it: only the newest waits.
	if err := db.Configs().NoteConfigChange(ctx, "sha256:b", "policy.default: allow → deny"); err != nil {
		t.Fatal(err)
	}
	if got := pendingDigest(t, db); got != "sha256:b" {
		t.Errorf("pending after a newer edit: %q", got)
	}
	if got := configState(t, db, "sha256:a"); got != ConfigSuperseded {
		t.Errorf("older change: %s", got)
	}
	// The files back as they were: that change waits again, with what it
	// changes now.
	if err := db.Configs().NoteConfigChange(ctx, "sha256:a", `rule "no-echo" added again`); err != nil {
		t.Fatal(err)
	}
	if c, _ := db.Configs().PendingConfigChange(ctx); c == nil || c.Digest != "sha256:a" || c.Summary != `rule "no-echo" added again` {
		t.Errorf("files back as they were: pending %+v", c)
	}
	if got := configState(t, db, "sha256:b"); got != ConfigSuperseded {
		t.Errorf("the edit in between: %s", got)
	}
	for _, d := range []string{"sha256:a", "sha256:b", "sha256:none"} {
		if ok, err := db.Configs().ConfigApplied(ctx, d); ok || err != nil {
			t.Errorf("ConfigApplied(%s) before any decision: %v %v", d, ok, err)
		}
	}
	if ev := configEvents(t, db); len(ev) != 0 {
		t.Errorf("audit events before any decision: %d", len(ev))
	}
}

func TestConfigChangeApplied(t *testing.T) {
	db := openDB(t, testPath(t))
	defer db.Close()
	ctx := context.Background()
	if err := db.Configs().NoteConfigChange(ctx, "sha256:a", "line one\nline two"); err != nil {
		t.Fatal(err)
	}
	c, err := db.Configs().ApplyConfig(ctx, "sha256:a", "alice")
	if err != nil {
		t.Fatal(err)
	}
	if c.State != ConfigApplied || c.DecidedBy != "alice" || c.DecidedAt == "" {
		t.Errorf("applied: %+v", c)
	}
	if ok, err := db.Configs().ConfigApplied(ctx, "sha256:a"); !ok || err != nil {
		t.Errorf("ConfigApplied after applying: %v %v", ok, err)
	}
	if d := pendingDigest(t, db); d != "" {
		t.Errorf("still pending: %s", d)
	}
	ev := configEvents(t, db)
	if len(ev) != 1 || ev[0].Decision != ConfigApplied || ev[0].DecidedBy != "alice" || ev[0].Kind != guard.KindConfig {
		t.Fatalf("audit events: %+v", ev)
	}
	var detail map[string]string
	if err := json.Unmarshal([]byte(ev[0].Detail), &detail); err != nil || detail["digest"] != "sha256:a" || detail["changes"] != "line one\nline two" {
		t.Errorf("event detail: %s (%v)", ev[0].Detail, err)
	}
	// An applied change is not noted again, nor superseded by a newer one.
	if err := db.Configs().NoteConfigChange(ctx, "sha256:a", "again"); err != nil {
		t.Fatal(err)
	}
	if d := pendingDigest(t, db); d != "" {
		t.Errorf("an applied change noted again is pending: %s", d)
	}
	if err := db.Configs().NoteConfigChange(ctx, "sha256:b", "newer"); err != nil {
		t.Fatal(err)
	}
	if got := configState(t, db, "sha256:a"); got != ConfigApplied {
		t.Errorf("applied change after a newer edit: %s", got)
	}
}

func TestConfigChangeDismissed(t *testing.T) {
	db := openDB(t, testPath(t))
	defer db.Close()
	ctx := context.Background()
	if err := db.Configs().NoteConfigChange(ctx, "sha256:a", "rule added"); err != nil {
		t.Fatal(err)
	}
	c, err := db.Configs().DismissConfig(ctx, "sha256:a", "bob")
	if err != nil {
		t.Fatal(err)
	}
	if c.State != ConfigDismissed || c.DecidedBy != "bob" {
		t.Errorf("dismissed: %+v", c)
	}
	if ok, _ := db.Configs().ConfigApplied(ctx, "sha256:a"); ok {
		t.Error("a dismissed change counts as applied")
	}
	if d := pendingDigest(t, db); d != "" {
		t.Errorf("still pending: %s", d)
	}
	ev := configEvents(t, db)
	if len(ev) != 1 || ev[0].Decision != ConfigDismissed || ev[0].DecidedBy != "bob" || !strings.Contains(ev[0].Detail, "sha256:a") {
		t.Fatalf("audit events: %+v", ev)
	}
	// The same files noted again stay dismissed; a different change waits.
	if err := db.Configs().NoteConfigChange(ctx, "sha256:a", "rule added"); err != nil {
		t.Fatal(err)
	}
	if d := pendingDigest(t, db); d != "" {
		t.Errorf("a dismissed change noted again is pending: %s", d)
	}
	if err := db.Configs().NoteConfigChange(ctx, "sha256:b", "rule added, and a comment"); err != nil {
		t.Fatal(err)
	}
	if d := pendingDigest(t, db); d != "sha256:b" {
		t.Errorf("a later different change: pending %q", d)
	}
}

func TestConfigChangeFirstDecisionWins(t *testing.T) {
	db := openDB(t, testPath(t))
	defer db.Close()
	ctx := context.Background()
	if err := db.Configs().NoteConfigChange(ctx, "sha256:a", "rule added"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Configs().DismissConfig(ctx, "sha256:a", "bob"); err != nil {
		t.Fatal(err)
	}
	// A later decision, either way, is refused and says who decided.
	_, err := db.Configs().ApplyConfig(ctx, "sha256:a", "alice")
	var np *NotPendingError
	if !errors.As(err, &np) || !errors.Is(err, ErrNoConfigChange) {
		t.Fatalf("apply after dismiss: %v", err)
	}
	if !strings.Contains(err.Error(), "already dismissed by bob") {
		t.Errorf("refusal: %v", err)
	}
	if _, err := db.Configs().DismissConfig(ctx, "sha256:a", "carol"); !errors.Is(err, ErrNoConfigChange) {
		t.Errorf("dismiss twice: %v", err)
	}
	if c, _ := db.Configs().ConfigChangeByDigest(ctx, "sha256:a"); c.State != ConfigDismissed || c.DecidedBy != "bob" {
		t.Errorf("after later decisions: %+v", c)
	}
	// Superseded, or never noted: refused, and nothing is applied.
	if err := db.Configs().NoteConfigChange(ctx, "sha256:b", "b"); err != nil {
		t.Fatal(err)
	}
	if err := db.Configs().NoteConfigChange(ctx, "sha256:c", "c"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Configs().ApplyConfig(ctx, "sha256:b", "alice"); err == nil || !strings.Contains(err.Error(), "superseded") {
		t.Errorf("apply a superseded change: %v", err)
	}
	if _, err := db.Configs().ApplyConfig(ctx, "sha256:zzz", "alice"); !errors.Is(err, ErrNoConfigChange) {
		t.Errorf("apply a change never noted: %v", err)
	}
	for _, d := range []string{"sha256:a", "sha256:b", "sha256:zzz"} {
		if ok, _ := db.Configs().ConfigApplied(ctx, d); ok {
			t.Errorf("%s counts as applied", d)
		}
	}
	if _, err := db.Configs().ApplyConfig(ctx, "sha256:c", ""); err == nil {
		t.Error("applied without a name")
	}
	// Two people at once: exactly one decision counts.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, by := range []string{"alice", "bob"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i == 0 {
				_, errs[i] = db.Configs().ApplyConfig(ctx, "sha256:c", by)
			} else {
				_, errs[i] = db.Configs().DismissConfig(ctx, "sha256:c", by)
			}
		}()
	}
	wg.Wait()
	if (errs[0] == nil) == (errs[1] == nil) {
		t.Fatalf("two decisions at once: %v, %v", errs[0], errs[1])
	}
	n := 0
	for _, r := range configEvents(t, db) {
		if strings.Contains(r.Detail, "sha256:c") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("audit events for the change decided at once: %d, want 1", n)
	}
}
