// Package guardtest holds what guard's end-to-end test packages share: a
// guard binary built once per test binary, and free loopback ports.
package guardtest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/guard-mcp/guard/internal/pgtest"
)

// Build builds guard's command (pkg, a path relative to the caller's
// working directory, such as "../cmd/guard") into a new temporary
// directory, with the build flags of GUARD_TEST_BUILD_FLAGS (such as
// -race) added. It returns the binary and a function that removes it.
func Build(pkg string) (bin string, remove func(), err error) {
	dir, err := os.MkdirTemp("", "guard-test-")
	if err != nil {
		return "", nil, err
	}
	bin = filepath.Join(dir, "guard")
	args := append([]string{"build", "-o", bin}, strings.Fields(os.Getenv("GUARD_TEST_BUILD_FLAGS"))...)
	build := exec.Command("go", append(args, pkg)...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("building guard: %w", err)
	}
	return bin, func() { os.RemoveAll(dir) }, nil
}

// Main is a test package's TestMain: it builds guard's command (pkg, as
// for Build) into *bin, runs the tests, removes the binary and exits with
// the tests' status.
func Main(m *testing.M, pkg string, bin *string) {
	b, remove, err := Build(pkg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*bin = b
	code := m.Run()
	pgtest.StopShared() // the tests' PostgreSQL, when they ran on it
	remove()
	os.Exit(code)
}

// FreePort returns a loopback address no one listens on now.
func FreePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
