package store

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/audit"
	"golang.org/x/mod/sumdb/tlog"
)

// An export (docs/tree.md) has one line per record, with every field, its
// seq, chain hash and leaf hash, so that the record's canonical form, and
// from it both hashes, can be rebuilt; the checkpoint the records verify
// against; and, when it holds only part of the log, each record's
// inclusion proof in that checkpoint.
//
// arguments and result are JSON values: the stored text verbatim when it
// is one JSON value on one line without surrounding space (json.RawMessage
// gets the exact bytes back), else a JSON string of the text, the field
// named in "text". Any field whose text is not valid UTF-8 is written as a
// JSON string of its base64, named in "base64".

// ExportColumns are an export's fields, in order (the CSV header).
var ExportColumns = []string{"seq", "id", "call_id", "kind", "time", "session", "client", "user", "user_email",
	"user_groups", "protocol", "server",
	"direction", "method", "tool", "arguments", "pin", "decision", "decided_by", "reason", "outcome", "result",
	"request_size", "response_size", "duration_ms", "detail", "approval", "prev_hash", "hash", "leaf_hash",
	"pruned", "pending", "text", "base64", "proof", "checkpoint"}

// exportColumnsBefore are the columns of exports made by earlier
// versions, which the check still reads: before records not under the
// checkpoint (no pending), before the user's (no user, user_email,
// user_groups either), and before retention (no pruned either).
var exportColumnsBefore = [][]string{
	slices.DeleteFunc(slices.Clone(ExportColumns), func(c string) bool { return c == "pending" }),
	slices.DeleteFunc(slices.Clone(ExportColumns), func(c string) bool { return c == "pending" || isUserField(c) }),
	slices.DeleteFunc(slices.Clone(ExportColumns), func(c string) bool { return c == "pending" || c == "pruned" || isUserField(c) }),
}

// An export holds, after the records its checkpoint covers, those it does
// not, marked in "pending": the records of the chain after the checkpoint
// (pendingCheckpoint: their hashes and links check, no checkpoint signs
// them yet), then the acknowledged records still in journals of guard
// processes that stopped (pendingJournal: not yet in the chain, so no
// seq, prev_hash, hash nor leaf_hash), so that an export made right after
// a crash holds every record acknowledged.
const (
	pendingCheckpoint = "checkpoint"
	pendingJournal    = "journal"
)

// chainFields are the fields a record not yet in the chain has not.
func chainField(name string) bool {
	return name == "seq" || name == "prev_hash" || name == "hash" || name == "leaf_hash"
}

// isUserField names the fields of the caller the front authenticated,
// which a JSONL export leaves out when they are empty.
func isUserField(name string) bool {
	return name == "user" || name == "user_email" || name == "user_groups"
}

// ExportOptions select what Export writes.
type ExportOptions struct {
	Format       string // jsonl (default) or csv
	Since, Until time.Time
}

// textFields are a record's text fields by export name, in export order;
// groups stands for its user groups, as groupsText writes them.
func textFields(r *guard.Record, groups *string) []struct {
	name string
	v    *string
} {
	return []struct {
		name string
		v    *string
	}{{"id", &r.ID}, {"call_id", &r.CallID}, {"kind", &r.Kind}, {"time", nil}, {"session", &r.Session},
		{"client", &r.Client}, {"user", &r.User}, {"user_email", &r.UserEmail}, {"user_groups", groups}, {"protocol", &r.Protocol}, {"server", &r.Server}, {"direction", &r.Direction},
		{"method", &r.Method}, {"tool", &r.Tool}, {"arguments", &r.Arguments}, {"pin", &r.Pin},
		{"decision", &r.Decision}, {"decided_by", &r.DecidedBy}, {"reason", &r.Reason}, {"outcome", &r.Outcome},
		{"result", &r.Result}, {"detail", &r.Detail}, {"approval", &r.Approval}, {"prev_hash", &r.PrevHash},
		{"hash", &r.Hash}}
}

// isJSONField names the fields exported as JSON values (user_groups: an
// array of strings).
func isJSONField(name string) bool {
	return name == "arguments" || name == "result" || name == "user_groups"
}

// verbatimJSON reports whether s can be written as it is, as one JSON value.
func verbatimJSON(s string) bool {
	if s == "" || strings.ContainsAny(s, "\n\r") || strings.ContainsAny(s[:1], " \t") ||
		strings.ContainsAny(s[len(s)-1:], " \t") || !utf8.ValidString(s) {
		return false
	}
	return json.Valid([]byte(s))
}

// toRow is the export form of a record.
func toRow(r *guard.Record, leaf tlog.Hash, proof tlog.RecordProof) []string {
	var text, b64 []string
	cells := map[string]string{"seq": strconv.FormatInt(r.Seq, 10), "time": fmtTime(r.Time),
		"request_size": strconv.FormatInt(r.RequestSize, 10), "response_size": strconv.FormatInt(r.ResponseSize, 10),
		"duration_ms": strconv.FormatInt(r.DurationMS, 10), "leaf_hash": leaf.String()}
	groups := audit.GroupsText(r.UserGroups)
	for _, f := range textFields(r, &groups) {
		if f.v == nil {
			continue
		}
		s := *f.v
		switch {
		case s == "" && isUserField(f.name):
		case !utf8.ValidString(s):
			b64 = append(b64, f.name)
			s = base64.StdEncoding.EncodeToString([]byte(s))
			if isJSONField(f.name) {
				s = string(audit.AppendString(nil, s))
			}
		case isJSONField(f.name) && !verbatimJSON(s):
			text = append(text, f.name)
			s = string(audit.AppendString(nil, s))
		}
		cells[f.name] = s
	}
	if r.Pruned {
		cells["pruned"] = "true"
	}
	cells["text"] = strings.Join(text, " ")
	cells["base64"] = strings.Join(b64, " ")
	var ps []string
	for _, h := range proof {
		ps = append(ps, h.String())
	}
	cells["proof"] = strings.Join(ps, " ")
	out := make([]string, len(ExportColumns))
	for i, c := range ExportColumns {
		out[i] = cells[c]
	}
	return out
}

// appendJSONLine appends a record's row as a JSONL line.
func appendJSONLine(b []byte, row []string) []byte {
	b = append(b, '{')
	unchained := row[slices.Index(ExportColumns, "pending")] == pendingJournal
	start := len(b) // the fields written so far are those after it
	for i, c := range ExportColumns {
		v := row[i]
		if c == "checkpoint" || (c == "pruned" || c == "pending" || c == "text" || c == "base64" || c == "proof" || isUserField(c)) && v == "" ||
			unchained && chainField(c) {
			continue
		}
		if len(b) > start {
			b = append(b, ',')
		}
		b = audit.AppendString(b, c)
		b = append(b, ':')
		switch {
		case c == "seq" || c == "request_size" || c == "response_size" || c == "duration_ms" || c == "pruned":
			b = append(b, v...)
		case isJSONField(c):
			b = append(b, v...)
		case c == "text" || c == "base64" || c == "proof":
			b = append(b, '[')
			for j, s := range strings.Split(v, " ") {
				if j > 0 {
					b = append(b, ',')
				}
				b = audit.AppendString(b, s)
			}
			b = append(b, ']')
		default:
			b = audit.AppendString(b, v)
		}
	}
	return append(b, '}', '\n')
}

// Export writes the records covered by the latest checkpoint (those of
// o's time range) with that checkpoint, and, unless it is the whole log,
// each record's inclusion proof.
func (rd Reader) Export(ctx context.Context, w io.Writer, o ExportOptions) error {
	if o.Format == "" {
		o.Format = "jsonl"
	}
	if o.Format != "jsonl" && o.Format != "csv" {
		return fmt.Errorf("export: format %q: want jsonl or csv", o.Format)
	}
	c, err := rd.db.LatestCheckpoint(ctx)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	complete := o.Since.IsZero() && o.Until.IsZero()
	run, args := "", []any{c.Size}
	if !complete {
		// A part is a run of records without a gap, from the first of
		// the period to its last (records of several processes
		// interleave, so a few from just outside it may be among
		// them): a record taken out of it later shows as missing.
		window, wargs := `time >= ? AND time <= ?`, []any{fmtTime(o.Since), "9999"}
		if !o.Until.IsZero() {
			wargs[1] = fmtTime(o.Until)
		}
		run = ` AND seq >= (SELECT min(seq) FROM records WHERE ` + window + `) AND seq <= (SELECT max(seq) FROM records WHERE ` + window + `)`
		args = append(args, wargs...)
		args = append(args, wargs...)
	}
	q := rd.db.schema.selectRecords() + ` WHERE seq <= ?` + run + ` ORDER BY seq`
	if err := rd.exportRecords(ctx, w, o.Format, c, complete, q, args, nil); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	q = rd.db.schema.selectRecords() + ` WHERE seq > ?` + run + ` ORDER BY seq`
	if err := rd.exportPending(ctx, w, o, q, args); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	return nil
}

// exportPending writes, after the records the export's checkpoint covers,
// the records of the chain after it that query q selects, and the
// acknowledged records of o's period still in journals of guard processes
// that stopped, each marked in its pending field.
func (rd Reader) exportPending(ctx context.Context, w io.Writer, o ExportOptions, q string, args []any) error {
	var cw *csv.Writer
	if o.Format == "csv" {
		cw = csv.NewWriter(w)
	}
	var line, buf []byte
	write := func(row []string) error {
		if cw != nil {
			return cw.Write(row)
		}
		line = appendJSONLine(line[:0], row)
		_, err := w.Write(line)
		return err
	}
	pending := slices.Index(ExportColumns, "pending")
	rows, err := rd.db.r.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return err
		}
		// Retention prunes only records a checkpoint covers: these have
		// their bodies.
		buf = audit.AppendCanonical(buf[:0], r)
		row := toRow(r, audit.LeafHash(buf), nil)
		row[pending] = pendingCheckpoint
		if err := write(row); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	recs, err := rd.db.journals().unchainedRecords(ctx)
	if err != nil {
		return err
	}
	for _, r := range recs {
		if !o.Since.IsZero() && r.Time.Before(o.Since) || !o.Until.IsZero() && r.Time.After(o.Until) {
			continue
		}
		row := toRow(r, tlog.Hash{}, nil)
		for i, c := range ExportColumns {
			if chainField(c) {
				row[i] = ""
			}
		}
		row[pending] = pendingJournal
		if err := write(row); err != nil {
			return err
		}
	}
	if cw != nil {
		cw.Flush()
		return cw.Error()
	}
	return nil
}

// exportRecords writes the records query q selects (in seq order; those
// keep accepts, when it is set) in an export of the format against the
// checkpoint c, with each record's proof unless complete. A pruned
// record's leaf hash is the tree's: its body is no longer there to hash.
func (rd Reader) exportRecords(ctx context.Context, w io.Writer, format string, c *audit.Checkpoint, complete bool,
	q string, args []any, keep func(seq int64) bool) error {
	rows, err := rd.db.r.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	var cw *csv.Writer
	var line []byte
	if format == "csv" {
		cw = csv.NewWriter(w)
		if err := cw.Write(ExportColumns); err != nil {
			return err
		}
	} else {
		line = append(line, `{"checkpoint":`...)
		line = audit.AppendString(line, string(c.Note))
		line = fmt.Appendf(line, `,"size":%d,"complete":%t}`+"\n", c.Size, complete)
		if _, err := w.Write(line); err != nil {
			return err
		}
	}
	hr := cachedHashes(sqlHashReader(ctx, rd.db.r))
	first := true
	var buf []byte
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return err
		}
		if keep != nil && !keep(r.Seq) {
			continue
		}
		var leaf tlog.Hash
		if r.Pruned {
			hs, err := hr.ReadHashes([]int64{audit.LeafIndex(r.Seq)})
			if err != nil {
				return fmt.Errorf("record %d: %w", r.Seq, err)
			}
			leaf = hs[0]
		} else {
			buf = audit.AppendCanonical(buf[:0], r)
			leaf = audit.LeafHash(buf)
		}
		var proof tlog.RecordProof
		if !complete {
			if proof, err = tlog.ProveRecord(c.Size, r.Seq-1, hr); err != nil {
				return fmt.Errorf("record %d: %w", r.Seq, err)
			}
		}
		row := toRow(r, leaf, proof)
		if cw != nil {
			if first {
				row[len(row)-1] = string(c.Note)
			}
			err = cw.Write(row)
		} else {
			line = appendJSONLine(line[:0], row)
			_, err = w.Write(line)
		}
		if err != nil {
			return err
		}
		first = false
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if cw != nil {
		if first { // no record: the checkpoint alone
			row := make([]string, len(ExportColumns))
			row[len(row)-1] = string(c.Note)
			_ = cw.Write(row)
		}
		cw.Flush()
		return cw.Error()
	}
	return nil
}

// cachedHashes keeps the tree hashes hr read, up to a million of them:
// the proofs of successive records share most of their hashes.
func cachedHashes(hr tlog.HashReader) tlog.HashReaderFunc {
	cache := map[int64]tlog.Hash{}
	return func(idx []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(idx))
		var miss []int64
		for i, x := range idx {
			h, ok := cache[x]
			if !ok {
				miss = append(miss, x)
			}
			out[i] = h
		}
		if len(miss) == 0 {
			return out, nil
		}
		hs, err := hr.ReadHashes(miss)
		if err != nil {
			return nil, err
		}
		if len(cache)+len(miss) > 1<<20 {
			clear(cache)
		}
		for i, x := range miss {
			cache[x] = hs[i]
		}
		for i, x := range idx {
			out[i] = cache[x]
		}
		return out, nil
	}
}

// fromRow rebuilds a record and its leaf hash and proof from an export
// row; cell gives a field's cell ("" when absent).
func fromRow(cell func(string) string) (r *guard.Record, leaf tlog.Hash, proof tlog.RecordProof, err error) {
	r = &guard.Record{}
	marks := func(name string) []string { return strings.Fields(cell(name)) }
	text, b64 := marks("text"), marks("base64")
	var groups string
	for _, f := range textFields(r, &groups) {
		s := cell(f.name)
		if f.v == nil {
			if s == "" {
				continue
			}
			if r.Time, err = time.Parse(time.RFC3339Nano, s); err != nil {
				return nil, leaf, nil, fmt.Errorf("time %q: %w", s, err)
			}
			continue
		}
		if isJSONField(f.name) && (slices.Contains(text, f.name) || slices.Contains(b64, f.name)) {
			if err := json.Unmarshal([]byte(s), &s); err != nil {
				return nil, leaf, nil, fmt.Errorf("%s: %w", f.name, err)
			}
		}
		if slices.Contains(b64, f.name) {
			b, err := base64.StdEncoding.DecodeString(s)
			if err != nil {
				return nil, leaf, nil, fmt.Errorf("%s: %w", f.name, err)
			}
			s = string(b)
		}
		*f.v = s
	}
	r.UserGroups = audit.ParseGroups(groups)
	unchained := cell("pending") == pendingJournal
	for _, n := range []struct {
		name string
		v    *int64
	}{{"seq", &r.Seq}, {"request_size", &r.RequestSize}, {"response_size", &r.ResponseSize}, {"duration_ms", &r.DurationMS}} {
		if unchained && chainField(n.name) {
			continue
		}
		if *n.v, err = strconv.ParseInt(cell(n.name), 10, 64); err != nil {
			return nil, leaf, nil, fmt.Errorf("%s: %w", n.name, err)
		}
	}
	r.Pruned = cell("pruned") == "true"
	if unchained {
		return r, leaf, nil, nil
	}
	if leaf, err = tlog.ParseHash(cell("leaf_hash")); err != nil {
		return nil, leaf, nil, fmt.Errorf("leaf_hash: %w", err)
	}
	for _, p := range marks("proof") {
		h, err := tlog.ParseHash(p)
		if err != nil {
			return nil, leaf, nil, fmt.Errorf("proof: %w", err)
		}
		proof = append(proof, h)
	}
	return r, leaf, proof, nil
}

// exportReader reads an export's rows, JSONL or CSV, and its checkpoint.
type exportReader struct {
	checkpoint []byte
	next       func() (cell func(string) string, err error) // io.EOF at the end
}

func newExportReader(b []byte) (*exportReader, error) {
	if bytes.HasPrefix(b, []byte(`{"checkpoint":`)) {
		lines := bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n"))
		var head struct {
			Checkpoint string `json:"checkpoint"`
		}
		if err := json.Unmarshal(lines[0], &head); err != nil {
			return nil, fmt.Errorf("line 1: %w", err)
		}
		e := &exportReader{checkpoint: []byte(head.Checkpoint)}
		i := 1
		e.next = func() (func(string) string, error) {
			if i >= len(lines) {
				return nil, io.EOF
			}
			var m map[string]json.RawMessage
			if err := json.Unmarshal(lines[i], &m); err != nil {
				return nil, fmt.Errorf("line %d: %w", i+1, err)
			}
			i++
			return func(name string) string {
				v, ok := m[name]
				if !ok {
					return ""
				}
				switch {
				case isJSONField(name):
					return string(v)
				case v[0] == '[':
					var l []string
					_ = json.Unmarshal(v, &l)
					return strings.Join(l, " ")
				case v[0] == '"':
					var s string
					_ = json.Unmarshal(v, &s)
					return s
				}
				return string(v)
			}, nil
		}
		return e, nil
	}
	cr := csv.NewReader(bytes.NewReader(b))
	head, err := cr.Read()
	if err != nil || !slices.Equal(head, ExportColumns) && !slices.ContainsFunc(exportColumnsBefore, func(c []string) bool { return slices.Equal(head, c) }) {
		return nil, errors.New("not an export: its first row is not the export's columns")
	}
	cr.FieldsPerRecord = len(head)
	col := map[string]int{}
	for i, c := range head {
		col[c] = i
	}
	first, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("the export has no checkpoint row: %w", err)
	}
	e := &exportReader{checkpoint: []byte(first[col["checkpoint"]])}
	pending := first
	if first[col["seq"]] == "" {
		pending = nil // the checkpoint alone
	}
	e.next = func() (func(string) string, error) {
		row := pending
		pending = nil
		if row == nil {
			if row, err = cr.Read(); err != nil {
				return nil, err
			}
		}
		return func(name string) string {
			if i, ok := col[name]; ok {
				return row[i]
			}
			return ""
		}, nil
	}
	return e, nil
}

// Prove returns the proof text (docs/tree.md) of the records with
// the given id or call id against the latest checkpoint.
func (vr Verifier) Prove(ctx context.Context, id string) ([]byte, error) {
	c, err := vr.db.LatestCheckpoint(ctx)
	if err != nil {
		return nil, fmt.Errorf("prove: %w", err)
	}
	rows, err := vr.db.r.QueryContext(ctx, `SELECT seq, id FROM records WHERE id = ? OR call_id = ? ORDER BY seq`, id, id)
	if err != nil {
		return nil, fmt.Errorf("prove: %w", err)
	}
	type found struct {
		seq int64
		id  string
	}
	var recs []found
	for rows.Next() {
		var f found
		if err := rows.Scan(&f.seq, &f.id); err != nil {
			rows.Close()
			return nil, fmt.Errorf("prove: %w", err)
		}
		recs = append(recs, f)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("prove: %w", err)
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("prove: %w: no record or call has the id %q", guard.ErrNotFound, id)
	}
	hr := sqlHashReader(ctx, vr.db.r)
	out := []byte(proofHeader)
	for _, f := range recs {
		if f.seq > c.Size {
			return nil, fmt.Errorf("prove: record %d (id %s) is not yet in a checkpoint (the latest covers %d records): try again once one is written", f.seq, f.id, c.Size)
		}
		hs, err := hr.ReadHashes([]int64{audit.LeafIndex(f.seq)})
		if err != nil {
			return nil, fmt.Errorf("prove: %w", err)
		}
		p, err := tlog.ProveRecord(c.Size, f.seq-1, hr)
		if err != nil {
			return nil, fmt.Errorf("prove: %w", err)
		}
		out = fmt.Appendf(out, "record %d %s %s\n", f.seq, f.id, hs[0])
		for _, h := range p {
			out = append(out, h.String()...)
			out = append(out, '\n')
		}
	}
	out = append(out, '\n')
	return append(out, c.Note...), nil
}

// proofHeader opens a proof.
const proofHeader = "guard audit proof v1\n"
