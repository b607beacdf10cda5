package audit

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"golang.org/x/mod/sumdb/tlog"
)

// A record written to an export, JSONL or CSV, reads back as the same
// record with its leaf hash and proof; a proof's text reads back too.
func TestExportAndProofRoundTrip(t *testing.T) {
	s, err := NewSigner(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	r := &guard.Record{Seq: 1, ID: "r1", CallID: "c1", Kind: guard.KindRequest, Time: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC),
		Arguments: `{"path": "/x"}`, Result: "not json\n", Detail: "\xff", UserGroups: []string{"a", "b"}, RequestSize: 12}
	r.Hash = HashRecord(r)
	leaf := LeafHash(AppendCanonical(nil, r))
	proof := tlog.RecordProof{tlog.RecordHash([]byte("x"))}
	c, err := s.Sign(2, leaf, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{"jsonl", "csv"} {
		var b bytes.Buffer
		w, err := NewExportWriter(&b, format, c, false)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Write(ExportRow(r, leaf, proof)); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if !IsExport(b.Bytes()) {
			t.Fatalf("%s: not seen as an export:\n%s", format, b.Bytes())
		}
		e, err := NewExportReader(b.Bytes())
		if err != nil || !bytes.Equal(e.Checkpoint, c.Note) {
			t.Fatalf("%s: %v, checkpoint %q", format, err, e.Checkpoint)
		}
		cell, err := e.Next()
		if err != nil {
			t.Fatal(err)
		}
		got, gotLeaf, gotProof, err := FromRow(cell)
		if err != nil || HashRecord(got) != r.Hash || gotLeaf != leaf || len(gotProof) != 1 || gotProof[0] != proof[0] {
			t.Fatalf("%s: %+v %v", format, got, err)
		}
		if _, err := e.Next(); !errors.Is(err, io.EOF) {
			t.Fatalf("%s: a second row: %v", format, err)
		}
	}
	text := AppendProof(nil, []Proved{{Seq: 1, ID: "r1", Leaf: leaf, Proof: proof}}, c)
	recs, note, err := ParseProof(text)
	if !IsProof(text) || err != nil || len(recs) != 1 || recs[0].Leaf != leaf || !bytes.Equal(note, c.Note) {
		t.Fatalf("proof: %+v %v", recs, err)
	}
}
