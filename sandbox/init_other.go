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

// supported says that there is no sandbox on this system.
func supported() error {
	return fmt.Errorf("%w: no sandbox on %s", ErrUnsupported, runtime.GOOS)
}

// Init reports that there is no sandbox on this system.
func Init(args []string) int {
	fmt.Fprintf(os.NewFile(3, "status"), "%sno sandbox on %s\n", reportSetup, runtime.GOOS)
	return 111
}
