package wire

import (
	"encoding/binary"
	"math/bits"
)

// Most of a message's bytes are inside strings, where the walks look for
// the few bytes that matter: a quote, a backslash and, when validating, a
// control character. They are found eight bytes at a time: for each word,
// a mask with the high bit of each byte that is one of them. Such a mask
// may also flag bytes after the first one that is, never before it.
const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// zeroBytes flags the bytes of x that are zero.
func zeroBytes(x uint64) uint64 { return (x - ones) &^ x & highs }

// quoteOrBackslash flags the bytes of x that are '"' or '\\'.
func quoteOrBackslash(x uint64) uint64 {
	return zeroBytes(x^('"'*ones)) | zeroBytes(x^('\\'*ones))
}

// special flags the bytes of x that are '"', '\\' or below 0x20.
func special(x uint64) uint64 {
	return quoteOrBackslash(x) | (x-0x20*ones)&^x&highs
}

// indexQuoteOrBackslash returns the index of the first '"' or '\\' in b at
// or after i, or len(b).
func indexQuoteOrBackslash(b []byte, i int) int {
	for ; i+8 <= len(b); i += 8 {
		if m := quoteOrBackslash(binary.LittleEndian.Uint64(b[i:])); m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c == '"' || c == '\\' {
			return i
		}
	}
	return len(b)
}

// indexSpecial returns the index of the first '"', '\\' or control
// character in b at or after i, or len(b).
func indexSpecial(b []byte, i int) int {
	for ; i+8 <= len(b); i += 8 {
		if m := special(binary.LittleEndian.Uint64(b[i:])); m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c == '"' || c == '\\' || c < 0x20 {
			return i
		}
	}
	return len(b)
}
