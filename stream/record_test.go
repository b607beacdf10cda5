package stream

import (
	"encoding/json"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
)

// A record's JSON is valid on one line whatever its text holds, with the
// audit record's names and JSON held in text as values.
func TestRecordJSON(t *testing.T) {
	r := &guard.Record{Seq: 9, ID: "i", CallID: "c", Kind: guard.KindOutcome, Time: time.Date(2026, 1, 2, 3, 4, 5, 6e6, time.UTC),
		Server: "s\"\\\n\x01\xff日", Arguments: "{\n  \"a\": [1, 2]\n}", Result: "not json", Detail: `{"code":-32603}`,
		DurationMS: 5, PrevHash: "p", Hash: "h"}
	b := encode(r)
	for _, c := range b {
		if c < 0x20 {
			t.Fatalf("a control byte in %q", b)
		}
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	want := map[string]any{"seq": 9.0, "id": "i", "call_id": "c", "kind": "outcome", "time": "2026-01-02T03:04:05.006Z",
		"server": "s\"\\\n\x01\uFFFD日", "arguments": map[string]any{"a": []any{1.0, 2.0}}, "result": "not json",
		"detail": map[string]any{"code": -32603.0}, "duration_ms": 5.0, "prev_hash": "p", "hash": "h"}
	if a, b := mustJSON(got), mustJSON(want); a != b {
		t.Fatalf("got  %s\nwant %s", a, b)
	}
}

// A record whose body retention removed says so.
func TestPrunedRecordJSON(t *testing.T) {
	r := &guard.Record{Seq: 3, ID: "i", CallID: "c", Kind: guard.KindRequest, Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		PrevHash: "p", Hash: "h", Pruned: true}
	var got map[string]any
	if err := json.Unmarshal(encode(r), &got); err != nil {
		t.Fatal(err)
	}
	if got["pruned"] != true || len(got) != 8 {
		t.Fatalf("pruned record: %v", got)
	}
}

// A record of a caller the front authenticated names the user, its
// groups as an array of strings; a record without one has no such
// member.
func TestRecordJSONNamesTheUser(t *testing.T) {
	r := &guard.Record{Seq: 4, ID: "i", CallID: "c", Kind: guard.KindRequest, Time: time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC),
		User: "user-7f3a", UserEmail: "alice@example.com", UserGroups: []string{"sre", "on-call \"eu\"\n"}, PrevHash: "p", Hash: "h"}
	var got map[string]any
	if err := json.Unmarshal(encode(r), &got); err != nil {
		t.Fatal(err)
	}
	if got["user"] != "user-7f3a" || got["user_email"] != "alice@example.com" ||
		mustJSON(got["user_groups"]) != `["sre","on-call \"eu\"\n"]` {
		t.Fatalf("a record of alice's: %s", encode(r))
	}
	r.User, r.UserEmail, r.UserGroups = "", "", nil
	got = nil
	if err := json.Unmarshal(encode(r), &got); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"user", "user_email", "user_groups"} {
		if _, ok := got[k]; ok {
			t.Errorf("a record without a user has %s: %s", k, encode(r))
		}
	}
}
