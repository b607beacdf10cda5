package secrets

import (
	"bytes"
	"strings"
)

// text is what the literal searches read: a string, or JSON text as bytes
// (which they read without copying it to a string).
type text interface{ string | []byte }

// indexByteFrom returns the offset of the first c in s at or after from,
// or -1.
func indexByteFrom[T text](s T, from int, c byte) int {
	if from < 0 {
		from = 0
	}
	if from >= len(s) {
		return -1
	}
	var j int
	switch v := any(s).(type) {
	case string:
		j = strings.IndexByte(v[from:], c)
	case []byte:
		j = bytes.IndexByte(v[from:], c)
	}
	if j < 0 {
		return -1
	}
	return from + j
}

// at reports whether lit occurs in s at i.
func at[T text](s T, i int, lit string) bool {
	if i < 0 || i+len(lit) > len(s) {
		return false
	}
	for k := 0; k < len(lit); k++ {
		if s[i+k] != lit[k] {
			return false
		}
	}
	return true
}

// atFold reports whether lit, in lower case, occurs in s at i in any case
// (ASCII).
func atFold[T text](s T, i int, lit string) bool {
	if i < 0 || i+len(lit) > len(s) {
		return false
	}
	for k := 0; k < len(lit); k++ {
		c := s[i+k]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lit[k] {
			return false
		}
	}
	return true
}

// indexLit returns the first offset at or after from where lit occurs in
// s, or -1. It looks for lit[off], which should be a rare byte.
func indexLit[T text](s T, from int, lit string, off int) int {
	for a := from + off; ; a++ {
		if a = indexByteFrom(s, a, lit[off]); a < 0 {
			return -1
		}
		if at(s, a-off, lit) {
			return a - off
		}
	}
}

// indexText returns the first offset of lit (also given as bytes) in s,
// or -1, with the standard library's substring search (vectorised where it
// can be).
func indexText[T text](s T, lit string, litB []byte) int {
	switch v := any(s).(type) {
	case string:
		return strings.Index(v, lit)
	case []byte:
		return bytes.Index(v, litB)
	}
	return -1
}
