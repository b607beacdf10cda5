//go:build !linux

package e2e

import (
	"fmt"
	"os"
)

// execWithoutUserNamespaces is Linux's (user namespaces): nothing sets
// noUserNSEnv elsewhere.
func execWithoutUserNamespaces() int {
	fmt.Fprintln(os.Stderr, "user namespaces are Linux's")
	return 125
}
