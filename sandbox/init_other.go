//go:build !linux

package sandbox

import (
	"fmt"
	"os"
	"runtime"
	"syscall"
)

// sysProcAttr is never used: Start fails before it on this system.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// Init reports that there is no sandbox on this system.
func Init(args []string) int {
	fmt.Fprintf(os.NewFile(3, "status"), "%sno sandbox on %s\n", reportSetup, runtime.GOOS)
	return 111
}
