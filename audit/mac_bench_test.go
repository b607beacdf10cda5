package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"
)

// BenchmarkMAC is a record's MAC as the writer makes it (one per record;
// a call is two records, its request and its outcome).
func BenchmarkMAC(b *testing.B) {
	m := NewMACer([]byte("0123456789abcdef0123456789abcdef"))
	sum := sha256.Sum256([]byte("a record"))
	h := hex.EncodeToString(sum[:])
	dst := make([]byte, 0, sha256.Size)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		dst = m.Sum(dst[:0], int64(i), h)
	}
}

// BenchmarkMACValid is a record's MAC checked, as the tree and the call
// index do before they take a record in.
func BenchmarkMACValid(b *testing.B) {
	m := NewMACer([]byte("0123456789abcdef0123456789abcdef"))
	sum := sha256.Sum256([]byte("a record"))
	h := hex.EncodeToString(sum[:])
	mac := m.MAC(1_000_000, h)
	b.ReportAllocs()
	for b.Loop() {
		if !m.Valid(1_000_000, h, mac) {
			b.Fatal("the MAC does not verify")
		}
	}
}
