package store

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// Of two processes on one database, the holder of the checkpoint lease
// signs checkpoints for both; the other signs none, and takes the lease
// over once the holder has gone.
func TestOneProcessSignsCheckpointsForAll(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "g.db")
	open := func() *DB {
		t.Helper()
		db, err := Open(ctx, Options{Path: path, Durability: "normal", CheckpointEvery: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return db
	}
	a := open()
	b := open()
	defer b.Close()
	if h, err := a.Streams().LeaseHolder(ctx, checkpointLease); err != nil || h != a.ckpt.holder {
		t.Fatalf("the lease is held by %q (%v), want the first process's %q", h, err, a.ckpt.holder)
	}
	kept := func() (n, size int64) {
		t.Helper()
		if err := a.r.QueryRowContext(ctx, `SELECT count(*), coalesce(max(size), 0) FROM checkpoints`).Scan(&n, &size); err != nil {
			t.Fatal(err)
		}
		return n, size
	}
	// The other process's records are covered by the holder's checkpoints.
	for i := range 5 {
		if err := b.Append(rec(i, "request")); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the holder's checkpoint of the other's records", func() bool { _, size := kept(); return size == 5 })
	if b.ckpt.signedSize.Load() != 0 {
		t.Fatalf("the process without the lease signed a checkpoint of %d records", b.ckpt.signedSize.Load())
	}
	// The holder goes: its last checkpoint, and the lease is free at
	// once; the other takes it over and signs what comes next.
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	for i := 5; i < 8; i++ {
		if err := b.Append(rec(i, "request")); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the other process's checkpoint once the holder has gone", func() bool { return b.ckpt.signedSize.Load() == 8 })
	if h, err := b.Streams().LeaseHolder(ctx, checkpointLease); err != nil || h != b.ckpt.holder {
		t.Fatalf("the lease is held by %q (%v), want the second process's %q", h, err, b.ckpt.holder)
	}
	if rep, err := b.Verifier().Verify(ctx); err != nil || !rep.OK {
		t.Fatalf("verify: %+v %v", rep, err)
	}
}
