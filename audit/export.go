package audit

import (
	"bytes"
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
// (PendingCheckpoint: their hashes and links check, no checkpoint signs
// them yet), then the acknowledged records still in journals of guard
// processes that stopped (PendingJournal: not yet in the chain, so no
// seq, prev_hash, hash nor leaf_hash), so that an export made right after
// a crash holds every record acknowledged.
const (
	// PendingCheckpoint marks a record of the chain after the export's
	// checkpoint.
	PendingCheckpoint = "checkpoint"
	// PendingJournal marks an acknowledged record not yet in the chain.
	PendingJournal = "journal"
)

// chainField names the fields a record not yet in the chain has not.
func chainField(name string) bool {
	return name == "seq" || name == "prev_hash" || name == "hash" || name == "leaf_hash"
}

// isUserField names the fields of the caller the front authenticated,
// which a JSONL export leaves out when they are empty.
func isUserField(name string) bool {
	return name == "user" || name == "user_email" || name == "user_groups"
}

// textFields are a record's text fields by export name, in export order;
// groups stands for its user groups, as GroupsText writes them.
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

// HasBody reports whether a record holds anything retention removes.
func HasBody(r *guard.Record) bool {
	for _, s := range []string{r.Session, r.Client, r.Protocol, r.Server, r.Direction, r.Method, r.Tool,
		r.Arguments, r.Pin, r.Decision, r.DecidedBy, r.Reason, r.Outcome, r.Result, r.Detail, r.Approval,
		r.User, r.UserEmail} {
		if s != "" {
			return true
		}
	}
	return r.RequestSize != 0 || r.ResponseSize != 0 || r.DurationMS != 0 || len(r.UserGroups) > 0
}

// ExportRow is the export form of a record, its cells in ExportColumns'
// order.
func ExportRow(r *guard.Record, leaf tlog.Hash, proof tlog.RecordProof) []string {
	var text, b64 []string
	cells := map[string]string{"seq": strconv.FormatInt(r.Seq, 10), "time": FormatTime(r.Time),
		"request_size": strconv.FormatInt(r.RequestSize, 10), "response_size": strconv.FormatInt(r.ResponseSize, 10),
		"duration_ms": strconv.FormatInt(r.DurationMS, 10), "leaf_hash": leaf.String()}
	groups := GroupsText(r.UserGroups)
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
				s = string(AppendString(nil, s))
			}
		case isJSONField(f.name) && !verbatimJSON(s):
			text = append(text, f.name)
			s = string(AppendString(nil, s))
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

// PendingRow is the export row of a record its checkpoint does not cover,
// marked pending (PendingCheckpoint, PendingJournal); a record not yet in
// the chain has no chain fields.
func PendingRow(r *guard.Record, leaf tlog.Hash, pending string) []string {
	row := ExportRow(r, leaf, nil)
	for i, c := range ExportColumns {
		if pending == PendingJournal && chainField(c) {
			row[i] = ""
		}
		if c == "pending" {
			row[i] = pending
		}
	}
	return row
}

// appendJSONLine appends a record's row as a JSONL line.
func appendJSONLine(b []byte, row []string) []byte {
	b = append(b, '{')
	unchained := row[slices.Index(ExportColumns, "pending")] == PendingJournal
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
		b = AppendString(b, c)
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
				b = AppendString(b, s)
			}
			b = append(b, ']')
		default:
			b = AppendString(b, v)
		}
	}
	return append(b, '}', '\n')
}

// ExportWriter writes an export's rows, JSONL or CSV: after its head (the
// checkpoint and whether the export is the whole log in JSONL, the
// columns in CSV, where the first row carries the checkpoint's note).
type ExportWriter struct {
	w    io.Writer
	cw   *csv.Writer
	line []byte
	note []byte // the checkpoint a CSV export's first row is still to carry
}

// NewExportWriter starts an export of the format (jsonl or csv) against
// the checkpoint c, complete when it is the whole log. Without a
// checkpoint it writes no head: the rows continue an export begun.
func NewExportWriter(w io.Writer, format string, c *Checkpoint, complete bool) (*ExportWriter, error) {
	e := &ExportWriter{w: w}
	if format == "csv" {
		e.cw = csv.NewWriter(w)
	}
	if c == nil {
		return e, nil
	}
	if e.cw != nil {
		e.note = c.Note
		return e, e.cw.Write(ExportColumns)
	}
	e.line = append(e.line, `{"checkpoint":`...)
	e.line = AppendString(e.line, string(c.Note))
	e.line = fmt.Appendf(e.line, `,"size":%d,"complete":%t}`+"\n", c.Size, complete)
	_, err := w.Write(e.line)
	return e, err
}

// Write writes a row (ExportRow, PendingRow).
func (e *ExportWriter) Write(row []string) error {
	if e.cw != nil {
		if e.note != nil {
			row[len(row)-1] = string(e.note)
			e.note = nil
		}
		return e.cw.Write(row)
	}
	e.line = appendJSONLine(e.line[:0], row)
	_, err := e.w.Write(e.line)
	return err
}

// Close ends the export: a CSV export without a record gets a row of the
// checkpoint alone.
func (e *ExportWriter) Close() error {
	if e.cw == nil {
		return nil
	}
	if e.note != nil {
		row := make([]string, len(ExportColumns))
		row[len(row)-1] = string(e.note)
		_ = e.cw.Write(row)
	}
	e.cw.Flush()
	return e.cw.Error()
}

// CachedHashes keeps the tree hashes hr read, up to a million of them:
// the proofs of successive records share most of their hashes.
func CachedHashes(hr tlog.HashReader) tlog.HashReaderFunc {
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

// FromRow rebuilds a record and its leaf hash and proof from an export
// row; cell gives a field's cell ("" when absent).
func FromRow(cell func(string) string) (r *guard.Record, leaf tlog.Hash, proof tlog.RecordProof, err error) {
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
	r.UserGroups = ParseGroups(groups)
	unchained := cell("pending") == PendingJournal
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

// IsExport reports whether b looks like an export, JSONL or CSV.
func IsExport(b []byte) bool {
	return bytes.HasPrefix(b, []byte(`{"checkpoint":`)) || bytes.HasPrefix(b, []byte("seq,"))
}

// ExportReader reads an export's rows, JSONL or CSV, and its checkpoint.
type ExportReader struct {
	// Checkpoint is the note of the checkpoint the export is against.
	Checkpoint []byte
	next       func() (cell func(string) string, err error) // io.EOF at the end
}

// Next returns the next row's cells by column name, or io.EOF at the end.
func (e *ExportReader) Next() (cell func(string) string, err error) { return e.next() }

// NewExportReader reads an export.
func NewExportReader(b []byte) (*ExportReader, error) {
	if bytes.HasPrefix(b, []byte(`{"checkpoint":`)) {
		lines := bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n"))
		var head struct {
			Checkpoint string `json:"checkpoint"`
		}
		if err := json.Unmarshal(lines[0], &head); err != nil {
			return nil, fmt.Errorf("line 1: %w", err)
		}
		e := &ExportReader{Checkpoint: []byte(head.Checkpoint)}
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
	if errors.Is(err, io.EOF) {
		// An export made before any checkpoint, of an empty log.
		return &ExportReader{next: func() (func(string) string, error) { return nil, io.EOF }}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("the export has no checkpoint row: %w", err)
	}
	e := &ExportReader{Checkpoint: []byte(first[col["checkpoint"]])}
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
