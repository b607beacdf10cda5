package store

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	guard "github.com/guard-mcp/guard"
)

// A witness's URL is logged without its password and its query string,
// either of which may hold a credential: when the witness answers with an
// error, and when it cannot be reached.
func TestWitnessLogHidesCredentials(t *testing.T) {
	ctx := context.Background()
	failSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no", http.StatusServiceUnavailable)
	}))
	defer failSrv.Close()
	// A port nothing listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	answering := strings.Replace(failSrv.URL, "http://", "http://alice:S3cretPw1@", 1) + "/cp?token=Tok3nOne"
	unreachable := "http://bob:S3cretPw2@" + closed + "/cp?token=Tok3nTwo"
	var logs captureLog
	db, err := Open(ctx, Options{Path: filepath.Join(t.TempDir(), "g.db"), Durability: "normal",
		Logger: slog.New(slog.NewTextHandler(&logs, nil)), Witnesses: []string{answering, unreachable}})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Append(rec(0, guard.KindRequest)); err != nil {
		t.Fatal(err)
	}
	db.ing.caughtUp(ctx)
	db.ckpt.dirty.Store(true)
	if err := db.ckpt.writeCheckpoint(); err != nil {
		t.Fatal(err)
	}
	db.Close() // delivers what is queued
	if n := db.Integrity().WitnessFailures(); n != 2 {
		t.Fatalf("witness failures: %d, want 2", n)
	}
	out := logs.String()
	for _, secret := range []string{"S3cretPw1", "S3cretPw2", "Tok3nOne", "Tok3nTwo"} {
		if strings.Contains(out, secret) {
			t.Errorf("the log holds %q: %s", secret, out)
		}
	}
	for _, want := range []string{"503 Service Unavailable", "alice@" + strings.TrimPrefix(failSrv.URL, "http://") + "/cp", "bob@" + closed + "/cp"} {
		if !strings.Contains(out, want) {
			t.Errorf("the log does not say %q: %s", want, out)
		}
	}
}
