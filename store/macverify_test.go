package store

import (
	"context"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/audit"
	"golang.org/x/mod/sumdb/note"
)

// A record forged after the last checkpoint (forgedLog): verify with the
// key names it; with the public key only, verify and the check of an
// export (which holds the tail, and no MACs) say how many records after
// the last checkpoint they could not authenticate, and pass.
func TestVerifyNamesAForgedRecordOrTheUnauthenticatedTail(t *testing.T) {
	variants(t, func(t *testing.T, tree bool) {
		ctx := context.Background()
		o, forged, vkey := forgedLog(t, tree)
		db, err := Open(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Append(rec(1, guard.KindRequest), rec(1, guard.KindOutcome)); err != nil {
			t.Fatal(err)
		}
		rep, err := db.Verifier().Verify(ctx)
		if err != nil || rep.OK || !strings.Contains(rep.Problem, "record "+strconv.FormatInt(forged.Seq, 10)+" (id "+forged.ID+") carries no MAC") {
			t.Fatalf("verify with the key: %+v %v, want it to name the forged record", rep, err)
		}
		c, err := db.LatestCheckpoint(ctx)
		if err != nil {
			t.Fatal(err)
		}
		tail := rep.Records - c.Size
		var export strings.Builder
		if err := db.Reader().Export(ctx, &export, ExportOptions{}); err != nil {
			t.Fatal(err)
		}
		db.Close()

		// An auditor with the verifier key alone.
		v, err := note.NewVerifier(vkey)
		if err != nil {
			t.Fatal(err)
		}
		ro, err := OpenReadOnly(ctx, Options{Path: o.Path, KeyPath: filepath.Join(t.TempDir(), "no.key")})
		if err != nil {
			t.Fatal(err)
		}
		defer ro.Close()
		rep, err = ro.Verifier().VerifyWith(ctx, audit.VerifyOptions{Key: v})
		if err != nil || !rep.OK || rep.TailAfter != c.Size || rep.Unauthenticated != tail {
			t.Fatalf("verify with the public key: %+v %v, want ok with a tail of %d records after checkpoint %d", rep, err, tail, c.Size)
		}
		if !strings.Contains(export.String(), forged.ID) {
			t.Fatal("the export leaves out the tail")
		}
		if strings.Contains(export.String(), `"mac"`) {
			t.Fatal("the export holds MACs")
		}
		want := "tail of " + strconv.FormatInt(tail, 10) + " records after checkpoint " + strconv.FormatInt(c.Size, 10) + " unauthenticated"
		if !slices.ContainsFunc(rep.Notes, func(n string) bool { return strings.HasPrefix(n, want) }) {
			t.Fatalf("verify with the public key notes %q, want %q", rep.Notes, want)
		}
		lines, f := audit.CheckFiles(v, []audit.File{{Name: "audit.jsonl", Data: []byte(export.String())}})
		if f.Verdict() != audit.VerdictVerified || len(lines) != 1 || len(f.Notes) != 1 || !strings.Contains(f.Notes[0], want) {
			t.Fatalf("check of the export: %q %+v, want it to note %q", lines, f, want)
		}
	})
}

// On a log the release before wrote, MACs are checked from the record
// they start at: a record forged after it is named, the release before's
// records need none.
func TestVerifyOfALogFromBeforeMACs(t *testing.T) {
	sqliteOnly(t)
	ctx := context.Background()
	path := logBeforeUsers(t)
	db := openDB(t, path)
	heldCall(t, db, "held-2")
	db.Close()
	forged := forge(t, path, "held-2", false)
	db = openDB(t, path)
	defer db.Close()
	rep, err := db.Verifier().Verify(ctx)
	if err != nil || rep.OK || !strings.Contains(rep.Problem, "record "+strconv.FormatInt(forged.Seq, 10)+" (id "+forged.ID+") carries no MAC: MACs start at record 15") {
		t.Fatalf("verify: %+v %v, want it to name the forged record", rep, err)
	}
}
