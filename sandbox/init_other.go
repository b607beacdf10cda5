//go:build !linux

package sandbox

import (
	"fmt"
	"os"
	"runtime"
	"syscall"
)

// sysProcAttr makes no namespaces: the init reports that it has none.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// OSSupported is false: only Linux has the sandbox (its namespaces).
const OSSupported = false

// supported says that this OS has no sandbox.
func supported() error {
	return fmt.Errorf("%w: isolation is not available on this OS (%s)", ErrUnsupported, runtime.GOOS)
}

// Init reports that there is no sandbox on this OS (Start does not run it
// here; a guard of a later version might).
func Init(args []string) int {
	fmt.Fprintf(os.NewFile(3, "status"), "%sisolation is not available on this OS (%s)\n", reportSetup, runtime.GOOS)
	return 111
}
