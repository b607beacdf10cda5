package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// With a profile file, guard run writes a CPU profile there by the time
// it returns.
func TestRunWritesACPUProfile(t *testing.T) {
	dir := t.TempDir()
	prof := filepath.Join(dir, "run.pprof")
	env := map[string]string{"HOME": dir, "XDG_CONFIG_HOME": filepath.Join(dir, "config"), "XDG_DATA_HOME": filepath.Join(dir, "data")}
	var out, errb lockedBuffer
	a := newApp(strings.NewReader(""), &out, &errb, func(k string) string { return env[k] })
	a.cpuProfile = prof
	if code := a.main(context.Background(), []string{"run", "--no-ui", "--", "sh", "-c", "exit 0"}); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	b, err := os.ReadFile(prof)
	if err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b { // a gzipped profile
		t.Fatalf("profile: %d bytes, %v", len(b), err)
	}
	// Commands other than run and serve write none.
	a.cpuProfile = filepath.Join(dir, "policy.pprof")
	a.main(context.Background(), []string{"policy", "check"})
	if _, err := os.Stat(a.cpuProfile); !os.IsNotExist(err) {
		t.Fatalf("policy check wrote a profile: %v", err)
	}
}
