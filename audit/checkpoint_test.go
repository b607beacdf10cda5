package audit

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/tlog"
)

// A key file is made once and read back as the same key; a checkpoint it
// signs opens with its verifier, keeps its MACs line, and is refused by
// another key's.
func TestCheckpointKeyAndNote(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "keys", "audit.key")
	s, err := LoadSigner(path)
	if err != nil {
		t.Fatal(err)
	}
	again, err := LoadSigner(path)
	if err != nil || again.VerifierKey() != s.VerifierKey() {
		t.Fatalf("the key read back is another: %v", err)
	}
	if k, err := VerifierKeyOf(path); err != nil || k != s.VerifierKey() {
		t.Fatalf("VerifierKeyOf: %q %v", k, err)
	}
	if v, err := ParseVerifier(s.VerifierKey()); err != nil || v.Name() != s.Verifier().Name() {
		t.Fatalf("ParseVerifier: %v", err)
	}
	root := tlog.RecordHash([]byte("leaf"))
	c, err := s.Sign(7, root, 3)
	if err != nil {
		t.Fatal(err)
	}
	if want := CheckpointText(s.Verifier().Name(), 7, root, 3); !bytes.HasPrefix(c.Note, []byte(want+"\n")) {
		t.Fatalf("the note does not open with its text:\n%s", c.Note)
	}
	got, err := OpenCheckpoint(c.Note, s.Verifier())
	if err != nil || got.Size != 7 || got.Root != root || got.MACsFrom != 3 || got.Origin != s.Verifier().Name() {
		t.Fatalf("OpenCheckpoint: %+v %v", got, err)
	}
	if OriginOfNote(c.Note) != s.Verifier().Name() {
		t.Fatal("OriginOfNote does not name the key")
	}
	other, err := LoadSigner(filepath.Join(dir, "other.key"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenCheckpoint(c.Note, other.Verifier()); err == nil || !strings.Contains(err.Error(), "not signed by") {
		t.Fatalf("another key opened the checkpoint: %v", err)
	}
	if _, err := (Checkpoints{Origin: other.Verifier().Name()}).Open(c.Note); err == nil {
		t.Fatal("an unsigned read took another log's checkpoint")
	}
	a, _ := DerivedSecret(path, "p")
	b, _ := DerivedSecret(path, "q")
	if a == "" || a == b {
		t.Fatalf("derived secrets: %q %q", a, b)
	}
}

// A tree that does not extend a checkpoint is refused as rewritten.
func TestProveExtends(t *testing.T) {
	var hashes []tlog.Hash
	hr := tlog.HashReaderFunc(func(idx []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(idx))
		for i, x := range idx {
			out[i] = hashes[x]
		}
		return out, nil
	})
	var roots []tlog.Hash
	for i := range int64(5) {
		hs, err := tlog.StoredHashes(i, []byte{byte(i)}, hr)
		if err != nil {
			t.Fatal(err)
		}
		hashes = append(hashes, hs...)
		r, err := tlog.TreeHash(i+1, hr)
		if err != nil {
			t.Fatal(err)
		}
		roots = append(roots, r)
	}
	if err := ProveExtends(&Checkpoint{Size: 2, Root: roots[1]}, 5, roots[4], hr); err != nil {
		t.Fatalf("a tree that extends its checkpoint: %v", err)
	}
	for _, c := range []*Checkpoint{{Size: 2, Root: roots[2]}, {Size: 6, Root: roots[4]}, {Size: 5, Root: roots[3]}} {
		if err := ProveExtends(c, 5, roots[4], hr); !errors.Is(err, ErrRewritten) {
			t.Errorf("checkpoint of %d: %v, want ErrRewritten", c.Size, err)
		}
	}
}
