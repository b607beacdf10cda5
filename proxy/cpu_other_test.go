//go:build !unix

package proxy

import "time"

// processCPU is 0 where getrusage is not: no CPU figure.
func processCPU() time.Duration { return 0 }
