package store

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/guard-mcp/guard/audit"
)

// A log no checkpoint signs yet (as a guard killed before it wrote its
// first leaves it) still exports: every record after the empty
// checkpoint, in JSONL and in CSV; and the offline check reads the
// export, holds its records' hashes and links, and says it cannot prove
// them (unverifiable, not failed).
func TestAnExportBeforeTheFirstCheckpoint(t *testing.T) {
	sqliteOnly(t)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "guard.db")
	db := openDB(t, path)
	for i := range 3 {
		if err := db.Append(rec(i, "request")); err != nil {
			t.Fatal(err)
		}
	}
	v := db.signer.Verifier()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	raw := rawDB(t, path)
	if _, err := raw.Exec(`DROP TRIGGER checkpoints_no_delete; DELETE FROM checkpoints`); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	if err := os.Remove(path + ".checkpoint"); err != nil {
		t.Fatal(err)
	}
	ro, err := OpenReadOnly(ctx, Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if _, err := ro.LatestCheckpoint(ctx); err != ErrNoCheckpoint {
		t.Fatalf("the latest checkpoint of a log with none: %v, want ErrNoCheckpoint", err)
	}
	for _, format := range []string{"jsonl", "csv"} {
		var out strings.Builder
		if err := ro.Reader().Export(ctx, &out, ExportOptions{Format: format}); err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		if got := strings.Count(out.String(), "call-"); got != 3 {
			t.Errorf("%s: the export shows %d of the 3 calls:\n%s", format, got, out.String())
		}
		lines, f := audit.CheckFiles(v, []audit.File{{Name: "export." + format, Data: []byte(out.String())}})
		if f.Verdict() != audit.VerdictUnverifiable || !strings.Contains(f.Why(), "no checkpoint") {
			t.Errorf("%s: checked: %v %q\n%s", format, f.Verdict(), f.Why(), lines)
		}
		if strings.Contains(f.Why(), "altered") || strings.Contains(f.Why(), "broken") {
			t.Errorf("%s: a record of an untouched export reads as altered: %s", format, f.Why())
		}
	}
}

// The first records a guard commits are signed at once, not after
// CheckpointEvery: a guard killed in its first second leaves a log a
// checkpoint signs.
func TestTheFirstRecordsAreSignedAtOnce(t *testing.T) {
	db, err := testOpen(context.Background(), Options{Path: filepath.Join(t.TempDir(), "guard.db"), Durability: "normal", CheckpointEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Append(rec(0, "request")); err != nil {
		t.Fatal(err)
	}
	firstCheckpoint(t, db)
}
