package store

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/audit"
	"golang.org/x/mod/sumdb/note"
)

// checkFiles is CheckFiles with its findings as an error: nil only when
// every file verified.
func checkFiles(v note.Verifier, files []audit.File) ([]string, error) {
	lines, f := audit.CheckFiles(v, files)
	if f.Verdict() != audit.VerdictVerified {
		return lines, errors.New(f.Why())
	}
	return lines, nil
}

// editExportRow rewrites the JSONL row of record seq in an export with
// edit, as someone holding the file would.
func editExportRow(t *testing.T, export string, seq int64, edit func(m map[string]json.RawMessage)) []byte {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(export, "\n"), "\n")
	for i, l := range lines[1:] {
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		if string(m["seq"]) != strconv.FormatInt(seq, 10) {
			continue
		}
		edit(m)
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		lines[i+1] = string(b)
		return []byte(strings.Join(lines, "\n") + "\n")
	}
	t.Fatalf("no record %d in the export", seq)
	return nil
}

// A row marked as pruned must hold no body: a record whose decision is
// changed and marked as pruned, so that its hash is not rebuilt, does not
// check; nor does a pruned record whose kept fields are not those its
// retention record hashed. The ok line counts the pruned records.
func TestCheckFilesPrunedRows(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "guard.db")
	var now time.Time
	db := retentionLog(t, path, &now, 3, 3)
	var before strings.Builder
	if err := db.Reader().Export(ctx, &before, ExportOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := checkFiles(db.signer.Verifier(), []audit.File{{Name: "whole", Data: []byte(before.String())}}); err != nil {
		t.Fatal(err)
	}
	forged := editExportRow(t, before.String(), 3, func(m map[string]json.RawMessage) {
		m["decision"] = json.RawMessage(`"denied"`)
		m["pruned"] = json.RawMessage(`true`)
	})
	if lines, err := checkFiles(db.signer.Verifier(), []audit.File{{Name: "whole", Data: forged}}); err == nil ||
		!strings.Contains(err.Error(), "record 3 (id") || !strings.Contains(err.Error(), "marked as pruned but holds a body") {
		t.Fatalf("a changed record marked as pruned: %v %q", err, lines)
	}

	if _, err := db.Pruning().Prune(ctx, RetentionOptions{Retention: 400 * 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := db.ckpt.writeCheckpoint(); err != nil { // over the retention record
		t.Fatal(err)
	}
	var after strings.Builder
	if err := db.Reader().Export(ctx, &after, ExportOptions{}); err != nil {
		t.Fatal(err)
	}
	lines, err := checkFiles(db.signer.Verifier(), []audit.File{{Name: "whole", Data: []byte(after.String())}})
	if err != nil || !strings.Contains(lines[0], "ok: all 13 records") ||
		!strings.Contains(lines[0], "6 of them pruned by retention: only their leaves are proved, 6 matched to the retention record") {
		t.Fatalf("whole export after pruning: %v %q", err, lines)
	}
	for _, tc := range []struct {
		name string
		seq  int64
		edit func(m map[string]json.RawMessage)
		want string
	}{
		{"a pruned record given a body", 2, func(m map[string]json.RawMessage) { m["reason"] = json.RawMessage(`"x"`) }, "record 2 (id"},
		{"a pruned record's id", 2, func(m map[string]json.RawMessage) { m["id"] = json.RawMessage(`"forged"`) }, "names, 1 to 6, are not those it archived"},
		{"a pruned record's time", 5, func(m map[string]json.RawMessage) { m["time"] = json.RawMessage(`"2024-01-01T00:00:00Z"`) }, "names, 1 to 6, are not those it archived"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := editExportRow(t, after.String(), tc.seq, tc.edit)
			if lines, err := checkFiles(db.signer.Verifier(), []audit.File{{Name: "whole", Data: b}}); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v %q, want %q", err, lines, tc.want)
			}
		})
	}
}

// A retention record appended to the file without the checkpoint key,
// naming a record whose body is then removed, is refused by the offline
// check of an export, even under a checkpoint signed since (for which it
// is given its MAC, as only the key's holder could: the check does not
// rely on guard's refusing to sign over a record without one).
func TestCheckFilesRefusesAForgedRetentionRecord(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "guard.db")
	var now time.Time
	db := retentionLog(t, path, &now, 3, 3)
	raw := rawDB(t, path)
	sum, err := db.Pruning().keptSum(ctx, []int64{9})
	if err != nil {
		t.Fatal(err)
	}
	d, err := json.Marshal(audit.RetentionDetail{First: 9, Last: 9, Count: 1, Records: [][2]int64{{9, 9}}, KeptSHA256: sum,
		Archive: "audit-forged.jsonl", SHA256: strings.Repeat("0", 64), Checkpoint: 12, Before: fmtTime(now), Retention: "1d"})
	if err != nil {
		t.Fatal(err)
	}
	forged := &guard.Record{Kind: guard.KindRetention, Decision: "pruned", Detail: string(d), Time: now}
	forgeAppend(t, raw, forged)
	if _, err := raw.Exec(`DROP TRIGGER records_mac_kept; UPDATE records SET mac = ? WHERE seq = ?`,
		audit.NewMACer(db.auth.key).MAC(forged.Seq, forged.Hash), forged.Seq); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(strings.Replace(blankBody, "WHERE seq = ?", "WHERE seq = 9", 1)); err != nil {
		t.Fatal(err)
	}
	db.ing.caughtUp(ctx)
	if err := db.ckpt.writeCheckpoint(); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := db.Reader().Export(ctx, &b, ExportOptions{}); err != nil {
		t.Fatal(err)
	}
	if lines, err := checkFiles(db.signer.Verifier(), []audit.File{{Name: "whole", Data: []byte(b.String())}}); err == nil ||
		!strings.Contains(err.Error(), "retention record 13 (id") || !strings.Contains(err.Error(), "is not signed by the checkpoint key") {
		t.Fatalf("%v %q", err, lines)
	}
}

// A proof proves a leaf, not the id it gives: alone, or with an export
// that does not hold the record under that id, the check names the leaf's
// position only; the id is claimed when an export holds that record, and
// a proof giving another record's id does not check.
func TestCheckFilesProofIDs(t *testing.T) {
	ctx := context.Background()
	db := openDB(t, testPath(t))
	defer db.Close()
	for i := range 4 {
		if err := db.Append(rec(i, "request")); err != nil {
			t.Fatal(err)
		}
	}
	db.ing.caughtUp(ctx)
	if err := db.ckpt.writeCheckpoint(); err != nil {
		t.Fatal(err)
	}
	var recs []string
	rows, err := db.r.QueryContext(ctx, `SELECT id FROM records ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, id)
	}
	rows.Close()
	proof, err := db.Verifier().Prove(ctx, recs[2])
	if err != nil {
		t.Fatal(err)
	}
	var export strings.Builder
	if err := db.Reader().Export(ctx, &export, ExportOptions{}); err != nil {
		t.Fatal(err)
	}
	v := db.signer.Verifier()
	lines, err := checkFiles(v, []audit.File{{Name: "p", Data: proof}})
	if err != nil || len(lines) != 1 || !strings.Contains(lines[0], "p: ok: the leaf at position 3 is in the checkpoint of 4 records") ||
		strings.Contains(lines[0], "ok: record") {
		t.Fatalf("a proof alone: %v %q", err, lines)
	}
	forged := []byte(strings.Replace(string(proof), recs[2], "forged-id", 1))
	lines, err = checkFiles(v, []audit.File{{Name: "x", Data: []byte(export.String())}, {Name: "p", Data: forged}})
	if err != nil || !strings.Contains(lines[1], "p: ok: the leaf at position 3 is in") || strings.Contains(lines[1], "ok: record") {
		t.Fatalf("a proof giving an id no export holds: %v %q", err, lines)
	}
	lines, err = checkFiles(v, []audit.File{{Name: "x", Data: []byte(export.String())}, {Name: "p", Data: proof}})
	if err != nil || !strings.Contains(lines[1], "p: ok: record 3 (id "+recs[2]+") is in the checkpoint of 4 records") ||
		!strings.Contains(lines[1], "its contents are those in x") {
		t.Fatalf("a proof with the export: %v %q", err, lines)
	}
	swapped := []byte(strings.Replace(string(proof), recs[2], recs[1], 1))
	if lines, err := checkFiles(v, []audit.File{{Name: "x", Data: []byte(export.String())}, {Name: "p", Data: swapped}}); err == nil ||
		!strings.Contains(err.Error(), "is not the record proved") {
		t.Fatalf("a proof giving another record's id: %v %q", err, lines)
	}
}
