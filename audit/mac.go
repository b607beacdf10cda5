package audit

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"strconv"

	guard "github.com/guard-mcp/guard"
)

// MACer makes and checks records' MACs under one key; it is not safe for
// concurrent use (the writer, a checkpoint and a verification each have
// their own).
type MACer struct {
	h   hash.Hash
	buf []byte
	sum [sha256.Size]byte // Valid's MAC, kept here since a local one escapes through h
}

// NewMACer returns a MACer for key, or nil without one.
func NewMACer(key []byte) *MACer {
	if key == nil {
		return nil
	}
	return &MACer{h: hmac.New(sha256.New, key)}
}

// Sum appends the MAC of record seq with chain hash h to dst.
func (m *MACer) Sum(dst []byte, seq int64, h string) []byte {
	m.buf = strconv.AppendInt(m.buf[:0], seq, 10)
	m.buf = append(m.buf, ' ')
	m.buf = append(m.buf, h...)
	m.h.Reset()
	m.h.Write(m.buf)
	return m.h.Sum(dst)
}

// MAC is a new record's MAC.
func (m *MACer) MAC(seq int64, h string) []byte {
	return m.Sum(make([]byte, 0, sha256.Size), seq, h)
}

// Valid reports whether mac is record seq's MAC for chain hash h.
func (m *MACer) Valid(seq int64, h string, mac []byte) bool {
	return len(mac) == sha256.Size && hmac.Equal(m.Sum(m.sum[:0], seq, h), mac)
}

// Check says what is wrong with a record read back from the table, whose
// canonical form is canonical ("" when nothing is): its hash must be that
// of its contents, and its MAC that of its seq and hash.
func (m *MACer) Check(r *guard.Record, canonical []byte, mac []byte) string {
	sum := sha256.Sum256(canonical)
	switch {
	case hex.EncodeToString(sum[:]) != r.Hash:
		return "does not match its hash"
	case len(mac) == 0:
		return "carries no MAC"
	case !m.Valid(r.Seq, r.Hash, mac):
		return "carries a MAC that does not verify"
	}
	return ""
}
