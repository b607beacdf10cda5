//go:build unix

package httplimit

import "syscall"

// descriptors is how many files this process may have open (its soft
// RLIMIT_NOFILE; Go raises it to the hard limit at start), 0 when not
// known.
func descriptors() int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur > 1<<30 {
		return 0
	}
	return int(lim.Cur)
}
