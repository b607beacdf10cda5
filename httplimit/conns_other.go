//go:build !unix

package httplimit

// descriptors is not known on this system: Conns takes its default.
func descriptors() int { return 0 }
