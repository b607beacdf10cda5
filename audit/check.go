package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	guard "github.com/guard-mcp/guard"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// The offline check needs no database: only the verifier key and the
// files an auditor was given (proofs, exports, checkpoints; docs/tree.md).

// File is one input of CheckFiles.
type File struct {
	Name string // for people: the lines and problems name it
	Data []byte
}

// CheckFiles verifies files offline against the verifier: each proof's records
// against its checkpoint; each export's records (every hash rebuilt from
// the fields, the chain between successive records, the leaf hashes, and
// the proofs, or for a whole log the tree's root) against its checkpoint;
// a checkpoint's signature. A record that is both in an export and in a
// proof is checked to be the same record (its leaf hash). It returns what
// it found, a line for each file, and the findings: the first problem
// (the check stops there), and why signatures could not be checked. With
// no key (v nil), or a key of another log than a file's checkpoint names
// (used for nothing), everything but the signatures is still checked.
func CheckFiles(v note.Verifier, files []File) ([]string, Findings) {
	var out []string
	var fs Findings
	key := offlineKey{v: v, f: &fs}
	leaves := map[string]exported{} // id → the record's seq and leaf hash, from exports
	where := map[string]string{}
	var proofs []File
	for _, f := range files {
		switch b := f.Data; {
		case IsProof(b):
			proofs = append(proofs, f) // after the exports
		case IsExport(b):
			line, err := checkExport(key, f.Name, b, func(seq int64, id string, leaf tlog.Hash) {
				leaves[id], where[id] = exported{seq, leaf}, f.Name
			})
			if err != nil {
				fs.Fail("%s: %v", f.Name, err)
				return out, fs
			}
			out = append(out, f.Name+": "+line)
		default:
			c, signed, err := key.open(f.Name, b)
			if err != nil {
				fs.Fail("%s: %v", f.Name, err)
				return out, fs
			}
			out = append(out, fmt.Sprintf("%s: %s: a checkpoint of %d records of %s", f.Name, holds(signed), c.Size, c.Origin))
		}
	}
	for _, f := range proofs {
		recs, cp, err := ParseProof(f.Data)
		if err != nil {
			fs.Fail("%s: not a proof: %v", f.Name, err)
			return out, fs
		}
		c, signed, err := key.open(f.Name, cp)
		if err != nil {
			fs.Fail("%s: its checkpoint: %v", f.Name, err)
			return out, fs
		}
		for _, p := range recs {
			if p.Seq > c.Size {
				fs.Fail("%s: record %d is beyond its checkpoint of %d records", f.Name, p.Seq, c.Size)
				return out, fs
			}
			// The proof names the record's id, but only its leaf hash
			// is proved: the id is claimed only when an export holds
			// the record with that leaf.
			if err := tlog.CheckRecord(p.Proof, c.Size, c.Root, p.Seq-1, p.Leaf); err != nil {
				fs.Fail("%s: the leaf at position %d (given as record id %s) is not in the checkpoint of %d records: %v", f.Name, p.Seq, p.ID, c.Size, err)
				return out, fs
			}
			e, ok := leaves[p.ID]
			if !ok {
				out = append(out, fmt.Sprintf("%s: %s: the leaf at position %d is in the checkpoint of %d records of %s (the proof gives it as record id %s: an export holding the record shows it is)",
					f.Name, holds(signed), p.Seq, c.Size, c.Origin, p.ID))
				continue
			}
			if e.leaf != p.Leaf || e.seq != p.Seq {
				fs.Fail("%s: record %d (id %s) in %s is not the record proved", f.Name, e.seq, p.ID, where[p.ID])
				return out, fs
			}
			out = append(out, fmt.Sprintf("%s: %s: record %d (id %s) is in the checkpoint of %d records of %s, and its contents are those in %s",
				f.Name, holds(signed), p.Seq, p.ID, c.Size, c.Origin, where[p.ID]))
		}
	}
	return out, fs
}

// offlineKey opens the checkpoints of the files CheckFiles checks with
// the key it was given, and notes in f why it could not check one's
// signature: there is no key, or the key is another log's than the one
// the checkpoint names, and is used for nothing.
type offlineKey struct {
	v note.Verifier
	f *Findings
}

// open reads a file's checkpoint; signed reports that its signature was
// checked.
func (k offlineKey) open(file string, msg []byte) (c *Checkpoint, signed bool, err error) {
	if k.v != nil {
		if other := OriginOfNote(msg); other == "" || other == k.v.Name() {
			c, err = OpenCheckpoint(msg, k.v)
			return c, err == nil, err
		}
	}
	if c, err = ReadUnsigned(msg); err != nil {
		return nil, false, err
	}
	if k.v == nil {
		k.f.Cannot("there is no key to check the signatures with: the checkpoints' signatures were not checked: %s", PassKey)
	} else {
		k.f.Cannot("the key is another log's: it signs as %s, and the checkpoint of %s is of %s. Nothing was checked with it: pass the key of the log the files come from (--key, as guard audit key prints it where that log's key is); if it is that log's key, the files are not of that log",
			k.v.Name(), file, c.Origin)
	}
	return c, false, nil
}

// holds is how a file's line begins: ok when the signature of its
// checkpoint was checked too.
func holds(signed bool) string {
	if signed {
		return "ok"
	}
	return "holds, its checkpoint's signature not checked"
}

// exported is a record of an export, as a proof is matched with it.
type exported struct {
	seq  int64
	leaf tlog.Hash
}

// CheckExport checks an export offline against the verifier v, as
// CheckFiles does, adding to f why it could not check its checkpoint's
// signature; name is the file's, for people. seen is called with each
// record's seq, id and leaf hash. It returns the file's line.
func CheckExport(v note.Verifier, f *Findings, name string, b []byte, seen func(int64, string, tlog.Hash)) (string, error) {
	return checkExport(offlineKey{v: v, f: f}, name, b, seen)
}

// checkExport checks an export, the file name; seen is called with each
// record's seq, id and leaf hash.
func checkExport(key offlineKey, name string, b []byte, seen func(int64, string, tlog.Hash)) (string, error) {
	e, err := NewExportReader(b)
	if err != nil {
		return "", err
	}
	c, signed := &Checkpoint{}, false
	if len(e.Checkpoint) == 0 {
		key.f.Cannot("%s: no checkpoint: none signed the log yet when it was exported, so nothing in it can be proved to be in the log: export again once guard has written one (within a second of running)", name)
	} else if c, signed, err = key.open(name, e.Checkpoint); err != nil {
		return "", fmt.Errorf("its checkpoint: %w", err)
	}
	// The retention records' signatures are checked with the key only
	// where it is this log's.
	var v note.Verifier
	if signed {
		v = key.v
	}
	edge := &Edge{}
	var prevSeq int64
	var prevHash string
	var n, proved int64
	var first, missing, firstMissing int64
	var after, unchained int64 // records after the checkpoint, and not yet in the chain
	ret := newKeptCheck(v)
	for {
		cell, err := e.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", err
		}
		r, leaf, proof, err := FromRow(cell)
		if err != nil {
			return "", fmt.Errorf("record %d: %w", n+after+unchained+1, err)
		}
		switch pending := cell("pending"); {
		case pending == PendingJournal:
			unchained++
			continue
		case pending == PendingCheckpoint:
			if err := checkAfter(c, r, leaf, prevSeq, prevHash, unchained); err != nil {
				return "", err
			}
			after++
			prevSeq, prevHash = r.Seq, r.Hash
			continue
		case pending != "":
			return "", fmt.Errorf("record %d (id %s): pending %q: want %s or %s", r.Seq, r.ID, pending, PendingCheckpoint, PendingJournal)
		case after > 0 || unchained > 0:
			return "", fmt.Errorf("record %d (id %s) is under the checkpoint but comes after records that are not", r.Seq, r.ID)
		}
		n++
		// A pruned record's body left the database (its archive holds
		// it): its row must hold nothing else, its leaf hash is taken as
		// given, and the proof or the tree's root checks it; the fields
		// it keeps are checked against the retention record that names
		// it, when the export holds that record.
		if r.Pruned && HasBody(r) {
			return "", fmt.Errorf("record %d (id %s) is marked as pruned but holds a body: it was altered", r.Seq, r.ID)
		}
		if !r.Pruned {
			if HashRecord(r) != r.Hash {
				return "", fmt.Errorf("record %d (id %s) does not match its hash: it was altered", r.Seq, r.ID)
			}
			if LeafHash(AppendCanonical(nil, r)) != leaf {
				return "", fmt.Errorf("record %d (id %s) does not match its leaf hash", r.Seq, r.ID)
			}
		}
		switch {
		case r.Seq <= prevSeq:
			return "", fmt.Errorf("record %d (id %s) comes after record %d", r.Seq, r.ID, prevSeq)
		case r.Seq == prevSeq+1 && prevSeq > 0 && r.PrevHash != prevHash:
			return "", fmt.Errorf("record %d (id %s) does not follow record %d: its link is broken", r.Seq, r.ID, prevSeq)
		case r.Seq > c.Size:
			return "", fmt.Errorf("record %d (id %s) is beyond the checkpoint of %d records", r.Seq, r.ID, c.Size)
		}
		if first == 0 {
			first = r.Seq
		} else if gap := r.Seq - prevSeq - 1; gap > 0 {
			if missing == 0 {
				firstMissing = prevSeq + 1
			}
			missing += gap
		}
		prevSeq, prevHash = r.Seq, r.Hash
		ret.add(r)
		seen(r.Seq, r.ID, leaf)
		if len(proof) > 0 {
			if err := tlog.CheckRecord(proof, c.Size, c.Root, r.Seq-1, leaf); err != nil {
				return "", fmt.Errorf("record %d (id %s) is not in the checkpoint: %v", r.Seq, r.ID, err)
			}
			proved++
			continue
		}
		if r.Seq != edge.Size()+1 {
			return "", fmt.Errorf("record %d (id %s) has no proof, and the records before it are not all in the export", r.Seq, r.ID)
		}
		if _, err := edge.Append(leaf); err != nil {
			return "", err
		}
	}
	if err := ret.check(); err != nil {
		return "", err
	}
	pendingFindings(key.f, name, c.Size, after, unchained)
	pruned := ""
	if len(ret.pruned) > 0 {
		pruned = fmt.Sprintf(" (%d of them pruned by retention: only their leaves are proved, %d matched to the retention record that names them)",
			len(ret.pruned), ret.matched)
	}
	if edge.Size() > 0 || proved == 0 {
		if edge.Size() != c.Size {
			return "", fmt.Errorf("records without proofs must be the whole log: %d records, the checkpoint has %d", edge.Size(), c.Size)
		}
		if c.Size > 0 {
			root, err := edge.Root()
			if err != nil {
				return "", err
			}
			if root != c.Root {
				return "", fmt.Errorf("the tree of its %d records does not have the checkpoint's root", c.Size)
			}
		}
		return fmt.Sprintf("%s: all %d records of %s, the checkpoint's whole tree%s", holds(signed), n, c.Origin, pruned), nil
	}
	// A part names its run, and what is missing from it: an export of a
	// period has none missing, an archive of retention only the records
	// of calls it did not take.
	run := fmt.Sprintf(" (records %d to %d", first, prevSeq)
	if missing > 0 {
		run += fmt.Sprintf("; %d between them not in the file, the first %d", missing, firstMissing)
	}
	run += ")"
	return fmt.Sprintf("%s: %d records%s, each proved in the checkpoint of %d records of %s%s", holds(signed), n, run, c.Size, c.Origin, pruned), nil
}

// checkAfter checks a record of an export that its checkpoint does not
// cover yet: its hash and leaf hash from its fields, and its link to the
// record before it in the export, which must be the one before it in the
// chain. No checkpoint proves it is in the log.
func checkAfter(c *Checkpoint, r *guard.Record, leaf tlog.Hash, prevSeq int64, prevHash string, unchained int64) error {
	switch {
	case unchained > 0:
		return fmt.Errorf("record %d (id %s) is in the chain but comes after records that are not", r.Seq, r.ID)
	case r.Seq <= c.Size:
		return fmt.Errorf("record %d (id %s) is marked as after the checkpoint of %d records, which covers it", r.Seq, r.ID, c.Size)
	case HashRecord(r) != r.Hash:
		return fmt.Errorf("record %d (id %s) does not match its hash: it was altered", r.Seq, r.ID)
	case LeafHash(AppendCanonical(nil, r)) != leaf:
		return fmt.Errorf("record %d (id %s) does not match its leaf hash", r.Seq, r.ID)
	case prevSeq > 0 && r.Seq != prevSeq+1:
		return fmt.Errorf("records %d to %d are not in the export: record %d (id %s) follows record %d", prevSeq+1, r.Seq-1, r.Seq, r.ID, prevSeq)
	case prevSeq > 0 && r.PrevHash != prevHash:
		return fmt.Errorf("record %d (id %s) does not follow record %d: its link is broken", r.Seq, r.ID, prevSeq)
	}
	return nil
}

// pendingFindings says what an export holds beyond what its checkpoint
// covers: records of the chain after it (a note: what could be checked
// holds, nothing signs them yet), and records not yet in the chain,
// which cannot be checked until a writable guard has moved them in.
func pendingFindings(f *Findings, name string, size, after, unchained int64) {
	if after > 0 {
		f.Note("%s: tail of %d records after checkpoint %d unauthenticated: their hashes and links check, but no checkpoint signs them yet (and their MACs are not in an export)", name, after, size)
	}
	if unchained > 0 {
		f.Cannot("%s: %d acknowledged records not yet in the chain (in journals of guard processes that stopped) cannot be checked: export again once a writable guard has moved them in", name, unchained)
	}
}

// keptCheck follows an export's records: the fields a pruned record
// keeps (its hash no longer covers them) are checked against the
// kept_sha256 of the retention record that names it, when the export
// holds that record and every record it names; the retention record must
// be signed by the checkpoint key.
type keptCheck struct {
	v       note.Verifier    // the key the retention records are signed by; nil: none at hand, nothing checked with it
	lines   map[int64][]byte // keptLine of each record, by seq
	pruned  map[int64]bool
	runs    []*guard.Record // the retention records, their hashes checked
	matched int64           // pruned records whose retention record checked them
}

func newKeptCheck(v note.Verifier) *keptCheck {
	return &keptCheck{v: v, lines: map[int64][]byte{}, pruned: map[int64]bool{}}
}

// add takes a record whose hash, or for a pruned one emptiness, was
// checked.
func (k *keptCheck) add(r *guard.Record) {
	k.lines[r.Seq] = KeptLine(nil, r)
	if r.Pruned {
		k.pruned[r.Seq] = true
	}
	if r.Kind == guard.KindRetention && !r.Pruned {
		k.runs = append(k.runs, r)
	}
}

// check checks each retention record's kept_sha256 against the records
// it names, once they are all read.
func (k *keptCheck) check() error {
	for _, r := range k.runs {
		var d RetentionDetail
		if err := json.Unmarshal([]byte(r.Detail), &d); err != nil {
			return fmt.Errorf("retention record %d (id %s): its detail: %w", r.Seq, r.ID, err)
		}
		if k.v != nil && !d.SignedBy(k.v) {
			return fmt.Errorf("retention record %d (id %s) is not signed by the checkpoint key %s: it was forged", r.Seq, r.ID, k.v.Name())
		}
		h := sha256.New()
		var count, pruned int64
		whole := true
		for _, sp := range d.Records {
			for s := sp[0]; s <= sp[1] && whole; s++ {
				l, ok := k.lines[s]
				if !ok {
					whole = false
					break
				}
				h.Write(l)
				count++
				if k.pruned[s] {
					pruned++
				}
			}
		}
		if !whole {
			continue // the export holds only some of them
		}
		if count != d.Count || hex.EncodeToString(h.Sum(nil)) != d.KeptSHA256 {
			return fmt.Errorf("the records retention record %d (id %s) names, %d to %d, are not those it archived: their ids, calls, kinds, times or hashes were changed",
				r.Seq, r.ID, d.First, d.Last)
		}
		k.matched += pruned
	}
	return nil
}
