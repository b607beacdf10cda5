// Package tmpfs gives tests a small disk that fills: a tmpfs of a given
// size, which only Linux (and root) can mount; elsewhere the test is
// skipped, saying why.
package tmpfs
