package store

import (
	"context"
	"errors"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
)

func TestToolReviews(t *testing.T) {
	db := openDB(t, testPath(t))
	defer db.Close()
	ctx := context.Background()
	def := func(name, pin string) guard.Tool {
		return guard.Tool{Name: name, Pin: pin, Def: []byte(`{"name":"` + name + `"}`)}
	}
	state := func(server, name, pin string) string {
		t.Helper()
		r, err := db.Catalog().Review(ctx, server, name, pin)
		if err != nil {
			t.Fatal(err)
		}
		if r == nil {
			return "none"
		}
		return r.State + "/" + r.Cause
	}
	t0 := time.Now()
	flagged := def("add", "sha256:a1")
	flagged.Flags = []guard.Flag{{Kind: "hidden_tag", Where: "description", Evidence: "<IMPORTANT>"}}
	if err := db.Catalog().RecordTools(ctx, "files", []guard.Tool{def("read", "sha256:r1"), def("rm", "sha256:d1"), flagged}, t0, false); err != nil {
		t.Fatal(err)
	}
	// The first listing is the baseline, except what the scan flagged.
	for _, tc := range [][4]string{
		{"files", "read", "sha256:r1", "accepted/baseline"},
		{"files", "rm", "sha256:d1", "accepted/baseline"},
		{"files", "add", "sha256:a1", "pending/flagged"},
		{"files", "nope", "sha256:x", "none"},
	} {
		if got := state(tc[0], tc[1], tc[2]); got != tc[3] {
			t.Errorf("%v: got %s", tc, got)
		}
	}
	if r, _ := db.Catalog().Review(ctx, "files", "add", "sha256:a1"); len(r.Flags) != 1 || r.Flags[0].Evidence != "<IMPORTANT>" {
		t.Errorf("flags not kept: %+v", r)
	}
	// Later: a changed definition and a new tool are pending; with
	// new_tools: allow a new tool is accepted.
	if err := db.Catalog().RecordTools(ctx, "files", []guard.Tool{def("read", "sha256:r1"), def("rm", "sha256:d2"), def("mv", "sha256:m1")}, t0.Add(time.Second), false); err != nil {
		t.Fatal(err)
	}
	if err := db.Catalog().RecordTools(ctx, "files", []guard.Tool{def("cp", "sha256:c1")}, t0.Add(2*time.Second), true); err != nil {
		t.Fatal(err)
	}
	for _, tc := range [][4]string{
		{"files", "read", "sha256:r1", "accepted/baseline"},
		{"files", "rm", "sha256:d2", "pending/changed"},
		{"files", "mv", "sha256:m1", "pending/new"},
		{"files", "cp", "sha256:c1", "accepted/new"},
	} {
		if got := state(tc[0], tc[1], tc[2]); got != tc[3] {
			t.Errorf("%v: got %s", tc, got)
		}
	}
	// Accept the latest definition (pin ""), reject another; a change
	// back to an accepted definition is accepted again.
	r, err := db.Catalog().DecideTool(ctx, "files", "rm", "", true, "alice")
	if err != nil || r.Pin != "sha256:d2" || r.State != guard.ReviewAccepted || r.DecidedBy != "alice" || r.DecidedAt.IsZero() {
		t.Fatalf("accept: %+v %v", r, err)
	}
	if _, err := db.Catalog().DecideTool(ctx, "files", "mv", "sha256:m1", false, "bob"); err != nil {
		t.Fatal(err)
	}
	if got := state("files", "mv", "sha256:m1"); got != "rejected/new" {
		t.Errorf("reject: %s", got)
	}
	if err := db.Catalog().RecordTools(ctx, "files", []guard.Tool{def("rm", "sha256:d1")}, t0.Add(3*time.Second), false); err != nil {
		t.Fatal(err)
	}
	if got := state("files", "rm", "sha256:d1"); got != "accepted/baseline" {
		t.Errorf("changed back: %s", got)
	}
	if _, err := db.Catalog().DecideTool(ctx, "files", "ghost", "", true, "x"); !errors.Is(err, guard.ErrNotFound) {
		t.Errorf("unknown tool: %v", err)
	}
	all, err := db.Catalog().Reviews(ctx, "files")
	if err != nil || len(all) != 6 {
		t.Fatalf("reviews: %d %v", len(all), err)
	}
	// Another server's first listing is its own baseline.
	if err := db.Catalog().RecordTools(ctx, "mail", []guard.Tool{def("send", "sha256:s1")}, t0, false); err != nil {
		t.Fatal(err)
	}
	if got := state("mail", "send", "sha256:s1"); got != "accepted/baseline" {
		t.Errorf("second server: %s", got)
	}
}
