package store

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/audit"
)

// truncateAll empties the log in the file and its kept checkpoints, and
// removes the checkpoint file beside it, as someone holding the files
// would, leaving the key.
func truncateAll(t *testing.T, path string) {
	t.Helper()
	if _, err := rawDB(t, path).Exec(`DROP TRIGGER tree_hashes_no_delete; DROP TRIGGER checkpoints_no_delete;
		DELETE FROM records; DELETE FROM tree_hashes; DELETE FROM checkpoints`); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path + ".checkpoint"); err != nil {
		t.Fatal(err)
	}
}

// A log truncated, with its kept checkpoints and its checkpoint file,
// gets no checkpoint of its new history: not from the process that
// signed the last one (it keeps it in memory), nor from one opened
// afterwards with a file witness that holds the last one, a directory or
// an appended file. The refusal is logged and counted.
func TestNoCheckpointAfterATruncationOfEveryCheckpoint(t *testing.T) {
	ctx := context.Background()
	appendN := func(db *DB, from, n int) {
		t.Helper()
		for i := range n {
			if err := db.Append(rec(from+i, guard.KindRequest)); err != nil {
				t.Fatal(err)
			}
		}
		db.ing.caughtUp(ctx)
	}
	t.Run("the same process", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "g.db")
		db := openDB(t, path)
		defer db.Close()
		appendN(db, 0, 4)
		if err := db.ckpt.writeCheckpoint(); err != nil {
			t.Fatal(err)
		}
		truncateAll(t, path)
		appendN(db, 100, 6)
		if err := db.ckpt.writeCheckpoint(); err == nil || !strings.Contains(err.Error(), "the tree of 6 records is not consistent with the checkpoint of 4") {
			t.Fatalf("checkpoint of a new history: %v", err)
		}
		if db.Integrity().CheckpointRefusals() == 0 {
			t.Fatal("the refusal was not counted")
		}
	})
	for _, kind := range []string{"directory", "file"} {
		t.Run("a witness "+kind, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "g.db")
			witness := filepath.Join(dir, "witness")
			if kind == "directory" {
				if err := os.Mkdir(witness, 0o700); err != nil {
					t.Fatal(err)
				}
			}
			o := Options{Path: path, Durability: "normal", Witnesses: []string{fileURL(witness)}}
			db, err := Open(ctx, o)
			if err != nil {
				t.Fatal(err)
			}
			appendN(db, 0, 3)
			if err := db.ckpt.writeCheckpoint(); err != nil {
				t.Fatal(err)
			}
			appendN(db, 3, 2)
			if err := db.Close(); err != nil { // the checkpoint of 5 records, witnessed
				t.Fatal(err)
			}
			held, err := audit.FileWitness(witness).Latest(db.signer.Verifier())
			if err != nil || held == nil || held.Size != 5 {
				t.Fatalf("the witness holds %+v (%v), want the checkpoint of 5 records", held, err)
			}
			truncateAll(t, path)
			var logs captureLog
			o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			db, err = Open(ctx, o)
			if err != nil {
				t.Fatal(err)
			}
			appendN(db, 100, 7)
			if err := db.ckpt.writeCheckpoint(); err == nil || !strings.Contains(err.Error(), "the tree of 7 records is not consistent with the checkpoint of 5") {
				t.Fatalf("checkpoint of a new history: %v", err)
			}
			_ = db.Close() // tries again, and logs the refusal
			if db.Integrity().CheckpointRefusals() < 2 || !strings.Contains(logs.String(), "does not extend the last checkpoint") {
				t.Fatalf("the refusal was not counted and logged: %d %s", db.Integrity().CheckpointRefusals(), logs.String())
			}
			if c, _ := audit.FileWitness(witness).Latest(db.signer.Verifier()); c == nil || c.Size != 5 {
				t.Fatalf("the witness got %+v", c)
			}
		})
	}
}

// fileURL is the file: URL of path: file:///var/x, or file:///C:/x on
// Windows.
func fileURL(path string) string {
	p := filepath.ToSlash(path)
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	return "file://" + p
}
