package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
)

// guard tools accept says what became of the calls held for the
// definition: released to the rules, or, where the change weakens the
// tool's declared caution, still waiting, each for its own decision.
func TestToolsAcceptSaysWhatBecameOfTheHeldCalls(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	db, _ := openData(t, dir)
	def := func(name, text string) guard.Tool {
		sum := sha256.Sum256([]byte(text))
		return guard.Tool{Server: "files", Name: name, Def: []byte(text), Pin: "sha256:" + hex.EncodeToString(sum[:])}
	}
	wipe1 := def("wipe", `{"name":"wipe","annotations":{"readOnlyHint":false}}`)
	wipe2 := def("wipe", `{"name":"wipe","annotations":{"readOnlyHint":true}}`)
	list1 := def("list", `{"name":"list"}`)
	list2 := def("list", `{"name":"list","title":"List"}`)
	now := time.Now()
	if err := db.Catalog().RecordTools(ctx, "files", []guard.Tool{wipe1, list1}, now, false); err != nil {
		t.Fatal(err)
	}
	if err := db.Catalog().RecordTools(ctx, "files", []guard.Tool{wipe2, list2}, now.Add(time.Second), false); err != nil {
		t.Fatal(err)
	}
	hold := func(id string, tool guard.Tool) {
		if err := db.Holds().CreateApproval(ctx, &guard.Approval{ID: id, CallID: id, Session: "s1", Server: "files", Tool: tool.Name,
			Arguments: `{}`, Digest: "sha256:" + id, Pin: tool.Pin, State: guard.ApprovalPending, Rule: guard.ToolReviewRule,
			HeldReason: "the tool's definition changed", CreatedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	hold("w1", wipe2)
	hold("w2", wipe2)
	hold("w3", wipe2)
	hold("l1", list2)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := run(t, dir, "tools", "accept", "files", "wipe", "--by", "alice")
	if code != 0 || !strings.Contains(out, "files/wipe "+wipe2.Pin+": accepted by alice\n") ||
		!strings.Contains(out, "\n3 held call(s) still wait: the change weakens readOnlyHint; each needs its own decision\n") {
		t.Fatalf("accepting a weakening change: %d %s %s", code, out, errOut)
	}
	out, errOut, code = run(t, dir, "tools", "accept", "files", "list", "--by", "alice")
	if code != 0 || !strings.Contains(out, "\n1 held call(s) released to the rules\n") {
		t.Fatalf("accepting a change that weakens nothing: %d %s %s", code, out, errOut)
	}
	db, _ = openData(t, dir)
	defer db.Close()
	for id, want := range map[string]string{"w1": guard.ApprovalPending, "w2": guard.ApprovalPending, "w3": guard.ApprovalPending,
		"l1": guard.ApprovalApproved} {
		if a, err := db.Holds().Approval(ctx, id); err != nil || a.State != want {
			t.Errorf("%s: %+v %v, want %s", id, a, err, want)
		}
	}
	out, errOut, code = run(t, dir, "approvals", "show", "w1")
	if code != 0 || !strings.Contains(out, "Held for the review of its tool's definition, which was accepted at ") ||
		!strings.Contains(out, "by alice; this call needs its own decision.") {
		t.Fatalf("approvals show of a call kept after its review: %d %s %s", code, out, errOut)
	}
}
