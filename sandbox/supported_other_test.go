//go:build !linux

package sandbox

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// Only Linux has the sandbox: elsewhere every way in says that isolation
// is not available on this OS, and nothing is started.
func TestNotOnThisOS(t *testing.T) {
	if OSSupported {
		t.Fatal("OSSupported on an OS without the sandbox")
	}
	self := testSpec(t).Self
	if err := Supported(self); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "not available on this OS") {
		t.Fatalf("Supported: %v", err)
	}
	if _, err := Probe(testSpec(t)); !errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrUnsupported) {
		t.Fatalf("Probe: %v", err)
	}
	cmd := exec.Command(self, "-test.run=^$")
	if _, err := Start(cmd, testSpec(t)); !errors.Is(err, ErrUnavailable) || cmd.Process != nil {
		t.Fatalf("Start: %v (started: %v)", err, cmd.Process != nil)
	}
}
