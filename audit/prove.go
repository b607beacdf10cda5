package audit

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/tlog"
)

// A proof (docs/tree.md) is the text guard audit prove writes: its
// header, then for each record a line "record SEQ ID LEAF" followed by
// the hashes of its inclusion proof, one a line, then a blank line and
// the checkpoint the records are proved in.

// ProofHeader opens a proof.
const ProofHeader = "guard audit proof v1\n"

// Proved is one record of a proof.
type Proved struct {
	Seq   int64
	ID    string
	Leaf  tlog.Hash
	Proof tlog.RecordProof
}

// IsProof reports whether b looks like a proof.
func IsProof(b []byte) bool { return bytes.HasPrefix(b, []byte(ProofHeader)) }

// AppendProof appends the proof text of the records in the checkpoint c.
func AppendProof(out []byte, recs []Proved, c *Checkpoint) []byte {
	out = append(out, ProofHeader...)
	for _, p := range recs {
		out = fmt.Appendf(out, "record %d %s %s\n", p.Seq, p.ID, p.Leaf)
		for _, h := range p.Proof {
			out = append(out, h.String()...)
			out = append(out, '\n')
		}
	}
	out = append(out, '\n')
	return append(out, c.Note...)
}

// ParseProof reads a proof's records and its checkpoint's note.
func ParseProof(b []byte) ([]Proved, []byte, error) {
	body, cp, ok := bytes.Cut(b[len(ProofHeader):], []byte("\n\n"))
	if !ok {
		return nil, nil, errors.New("no checkpoint after the records")
	}
	var out []Proved
	for i, l := range strings.Split(string(body), "\n") {
		f := strings.Fields(l)
		if len(f) == 4 && f[0] == "record" {
			seq, err := strconv.ParseInt(f[1], 10, 64)
			leaf, herr := tlog.ParseHash(f[3])
			if err != nil || herr != nil || seq < 1 {
				return nil, nil, fmt.Errorf("line %d: a malformed record line", i+2)
			}
			out = append(out, Proved{Seq: seq, ID: f[2], Leaf: leaf})
			continue
		}
		h, err := tlog.ParseHash(l)
		if err != nil || len(out) == 0 {
			return nil, nil, fmt.Errorf("line %d: neither a record line nor a hash", i+2)
		}
		p := &out[len(out)-1]
		p.Proof = append(p.Proof, h)
	}
	if len(out) == 0 {
		return nil, nil, errors.New("no record")
	}
	return out, cp, nil
}
