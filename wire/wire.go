// Package wire frames and classifies newline-delimited JSON-RPC 2.0
// messages for guard's relay without decoding their bodies: one pass finds
// the top-level members, and only what guard decides on is read in full.
//
// It refuses what peers would read differently: a top-level member that
// appears twice, or that a case-insensitive decoder (Go's encoding/json)
// would take for jsonrpc, id, method, params, result or error. Strict does
// the same for every object of a message guard decides on, and also refuses
// invalid UTF-8 and lone surrogates, which decoders repair differently.
// Parse refuses a message nested deeper than MaxDepth, which some peers
// cannot read at all, in the same pass.
package wire

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// JSON-RPC error codes.
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternalError  = -32603
)

// TooLongError reports a line over the reader's limit; the line was
// consumed and the next call reads the line after it.
type TooLongError struct {
	Size int64 // bytes of the line seen before it was discarded (at least Max+1)
	Max  int
}

func (e *TooLongError) Error() string {
	return fmt.Sprintf("line longer than %d bytes", e.Max)
}

// Reader reads newline-delimited messages with bounded memory.
type Reader struct {
	br  *bufio.Reader
	max int
	buf []byte
	// parts are the copies of the reader's buffer that a line longer
	// than it has filled so far.
	parts [][]byte
}

// NewReader returns a reader of lines of at most max bytes.
func NewReader(r io.Reader, max int) *Reader {
	return &Reader{br: bufio.NewReaderSize(r, 64<<10), max: max}
}

// Next returns the next non-blank line without its line ending. The slice
// is valid until the next call. A final line without a newline is returned
// before io.EOF.
func (r *Reader) Next() ([]byte, error) {
	for {
		line, err := r.line()
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(line)) > 0 {
			return line, nil
		}
	}
}

// NextOwned is Next, but the caller owns the returned slice: a long line's
// buffer is handed over instead of copied.
func (r *Reader) NextOwned() ([]byte, error) {
	line, err := r.Next()
	if err != nil {
		return nil, err
	}
	if len(line) > 0 && cap(r.buf) > 0 && &line[0] == &r.buf[:1][0] {
		r.buf = nil
		return line, nil
	}
	return append([]byte(nil), line...), nil
}

func (r *Reader) line() ([]byte, error) {
	var size int // of the line's parts so far
	var seen int64
	over := false
	for {
		chunk, err := r.br.ReadSlice('\n')
		seen += int64(len(chunk))
		switch {
		case err == nil:
			if over {
				return nil, &TooLongError{Size: seen - 1, Max: r.max}
			}
			if size == 0 {
				return trimEOL(chunk, r.max)
			}
			return trimEOL(r.join(size, chunk), r.max)
		case errors.Is(err, bufio.ErrBufferFull):
			if !over && size+len(chunk) > r.max+1 {
				over = true
				r.dropParts()
			}
			if !over {
				r.parts = append(r.parts, bytes.Clone(chunk))
				size += len(chunk)
			}
		case errors.Is(err, io.EOF):
			if over {
				return nil, &TooLongError{Size: seen, Max: r.max}
			}
			if size+len(chunk) == 0 {
				return nil, io.EOF
			}
			line := r.join(size, chunk)
			if len(line) > r.max {
				return nil, &TooLongError{Size: seen, Max: r.max}
			}
			return line, nil
		default:
			r.dropParts()
			return nil, err
		}
	}
}

// join makes the line of the parts read (size bytes) and last in r.buf,
// allocated to the line's size unless it has room already: a long line
// costs its parts and itself, the parts garbage at once, rather than a
// buffer doubled until it holds the line, up to twice its size, with the
// one before it.
func (r *Reader) join(size int, last []byte) []byte {
	if n := size + len(last); cap(r.buf) < n {
		r.buf = make([]byte, 0, n)
	}
	b := r.buf[:0]
	for _, p := range r.parts {
		b = append(b, p...)
	}
	r.dropParts()
	r.buf = append(b, last...)
	return r.buf
}

// dropParts lets go of the parts of a line.
func (r *Reader) dropParts() {
	clear(r.parts)
	r.parts = r.parts[:0]
}

func trimEOL(b []byte, max int) ([]byte, error) {
	b = b[:len(b)-1]
	if n := len(b); n > 0 && b[n-1] == '\r' {
		b = b[:n-1]
	}
	if len(b) > max {
		return nil, &TooLongError{Size: int64(len(b)), Max: max}
	}
	return b, nil
}

// Kind is what a message is.
type Kind int

// Kinds of messages.
const (
	KindRequest Kind = iota + 1
	KindNotification
	KindResponse
	KindBatch
)

// Message is a JSON-RPC message's top-level shape. Its slices point into Raw.
type Message struct {
	Raw     []byte
	Kind    Kind
	ID      []byte // raw id value; nil when absent
	IDStart int
	IDEnd   int
	Method  string
	Params  []byte
	// ParamsStart and ParamsEnd are where Params lies in Raw.
	ParamsStart int
	ParamsEnd   int
	Result      []byte
	Error       []byte
	// Checked says that Raw passed Strict: whoever checked it set it, and
	// a message rewritten with WithID or WithParams keeps it (a new id or
	// params of the same kind add no member name and no string).
	Checked bool
}

// ErrParse is returned for text that is not JSON.
var ErrParse = errors.New("not valid JSON")

// ErrTooDeep is why a message nested deeper than MaxDepth is refused.
var ErrTooDeep = fmt.Errorf("nested deeper than %d levels", MaxDepth)

// InvalidError is valid JSON that is not a valid JSON-RPC 2.0 message. ID is
// the message's id when it could be read (and CheckID accepts it).
type InvalidError struct {
	Reason string
	ID     []byte
	// Kind is what the message would be but for its id (KindRequest or
	// KindResponse) when only the id is wrong, or what it is when it is
	// refused for its depth alone (Err is ErrTooDeep); zero otherwise. A
	// response refused for its id is dropped rather than answered; one
	// refused for its depth still answers its request, with an error.
	Kind Kind
	// Err is the condition callers branch on (ErrTooDeep), or nil.
	Err error
}

// maxSafeID is the largest integer id: 2^53-1, the last integer every
// peer's number type (a JavaScript number, a double) holds exactly.
const maxSafeID = 1<<53 - 1

const errIDType = "must be a string or an integer within ±(2^53-1) written without fraction or exponent"

// CheckID accepts a JSON-RPC id that every peer reads as guard does: a
// string (valid UTF-8, no lone surrogate), or an integer within
// ±(2^53−1) written without fraction or exponent. -0 is refused too: a
// peer echoes it as 0, an id guard would not match. It reads only the id's
// bytes.
func CheckID(id []byte) error {
	if len(id) == 0 {
		return errors.New("id: " + errIDType)
	}
	switch c := id[0]; {
	case c == '"':
		if err := checkString(id); err != nil {
			return fmt.Errorf("id: %w", err)
		}
		return nil
	case c == '-' || ('0' <= c && c <= '9'):
	default:
		return errors.New("id: " + errIDType)
	}
	digits := id
	if digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || len(digits) > 16 || (len(digits) > 1 && digits[0] == '0') || string(id) == "-0" {
		return fmt.Errorf("id %.40s %s", id, errIDType)
	}
	var n int64
	for _, d := range digits {
		if d < '0' || d > '9' {
			return fmt.Errorf("id %.40s %s", id, errIDType)
		}
		n = n*10 + int64(d-'0')
	}
	if n > maxSafeID {
		return fmt.Errorf("id %.40s %s", id, errIDType)
	}
	return nil
}

func (e *InvalidError) Error() string { return "invalid JSON-RPC message: " + e.Reason }

func (e *InvalidError) Unwrap() error { return e.Err }

var members = []string{"jsonrpc", "id", "method", "params", "result", "error"}

// Parse classifies one message. A message nested deeper than MaxDepth is
// classified (its id, method and members found) and refused with ErrTooDeep,
// found in the same pass; a batch is not: its elements are, one by one.
func Parse(raw []byte) (Message, error) {
	m := Message{Raw: raw}
	var small [8]span
	top, ok, deep := valid(raw, small[:0])
	if !ok {
		return m, ErrParse
	}
	switch raw[skipWS(raw, 0)] {
	case '[':
		m.Kind = KindBatch
		return m, nil
	case '{':
	default:
		return m, &InvalidError{Reason: "a message must be a JSON object"}
	}
	var jsonrpc []byte
	var method []byte
	seen := 0
	invalid := ""
	for _, sp := range top {
		key, err := keyText(raw[sp.keyStart:sp.keyEnd])
		if err != nil {
			return m, &InvalidError{Reason: err.Error()}
		}
		vs, ve := sp.valueStart, sp.valueEnd
		idx := -1
		for n, name := range members {
			if string(key) == name {
				idx = n
				break
			}
			if invalid == "" && caseVariant(key, name) {
				invalid = fmt.Sprintf("member %q differs only in case from %q", key, name)
			}
		}
		if idx < 0 {
			continue
		}
		if seen&(1<<idx) != 0 {
			if invalid == "" {
				invalid = fmt.Sprintf("member %q appears twice", key)
			}
			continue
		}
		seen |= 1 << idx
		v := raw[vs:ve]
		switch idx {
		case 0:
			jsonrpc = v
		case 1:
			m.ID, m.IDStart, m.IDEnd = v, vs, ve
		case 2:
			method = v
		case 3:
			m.Params, m.ParamsStart, m.ParamsEnd = v, vs, ve
		case 4:
			m.Result = v
		case 5:
			m.Error = v
		}
	}
	// An id no peer can read the same way is never echoed: the answer
	// carries id null, and the message is refused whatever it is.
	var badID error
	if m.ID != nil && string(m.ID) != "null" {
		if badID = CheckID(m.ID); badID != nil {
			m.ID = nil
		}
	}
	if invalid != "" {
		return m, &InvalidError{Reason: invalid}
	}
	if v, ok := String(jsonrpc); !ok || v != "2.0" {
		return m, &InvalidError{Reason: `jsonrpc must be "2.0"`, ID: m.ID}
	}
	switch {
	case method != nil:
		s, ok := String(method)
		if !ok {
			return m, &InvalidError{Reason: "method must be a string", ID: m.ID}
		}
		// Decoders repair invalid UTF-8 differently (replace, drop, keep):
		// a method guard reads one way must not reach a server as another.
		if err := checkString(method); err != nil {
			return m, &InvalidError{Reason: "method: " + err.Error(), ID: m.ID}
		}
		m.Method = s
		if m.Result != nil || m.Error != nil {
			return m, &InvalidError{Reason: "a request cannot carry result or error", ID: m.ID}
		}
		if m.Params != nil && m.Params[0] != '{' && m.Params[0] != '[' {
			return m, &InvalidError{Reason: "params must be an object or an array", ID: m.ID}
		}
		switch {
		case badID != nil:
			return m, &InvalidError{Reason: badID.Error(), Kind: KindRequest}
		case m.ID == nil:
			m.Kind = KindNotification
		case string(m.ID) == "null":
			m.ID = nil
			return m, &InvalidError{Reason: "id: " + errIDType, Kind: KindRequest}
		default:
			m.Kind = KindRequest
		}
	case m.Result != nil && m.Error != nil:
		return m, &InvalidError{Reason: "a response cannot carry both result and error", ID: m.ID}
	case m.Result != nil || m.Error != nil:
		if badID != nil {
			// It answers nothing guard sent: an id of guard's or of a
			// peer's is always one CheckID accepts.
			return m, &InvalidError{Reason: badID.Error(), Kind: KindResponse}
		}
		if m.ID == nil {
			return m, &InvalidError{Reason: "a response needs an id"}
		}
		m.Kind = KindResponse
	default:
		return m, &InvalidError{Reason: "neither a request nor a response", ID: m.ID}
	}
	if deep {
		return m, &InvalidError{Reason: ErrTooDeep.Error(), ID: m.ID, Kind: m.Kind, Err: ErrTooDeep}
	}
	return m, nil
}

// caseVariant reports whether key is not name, an ASCII member name, but is
// taken for it by a decoder that matches names under Unicode simple case
// folding, as encoding/json does ("IsError", "iſError" with U+017F). Such a
// variant is at most three bytes a letter (the Kelvin sign K is three),
// and begins with a byte that is not ASCII or is name's first letter in
// either case: most names are told apart there, without EqualFold.
func caseVariant(key []byte, name string) bool {
	if len(key) < len(name) || len(key) > 3*len(name) {
		return false
	}
	if c := key[0]; c < utf8.RuneSelf && lowerASCII(c) != lowerASCII(name[0]) {
		return false
	}
	return string(key) != name && strings.EqualFold(string(key), name)
}

// SplitBatch returns the elements of a batch, each a slice of raw that
// cannot grow into the next. An element nested too deep is returned like
// any other, for Parse to refuse on its own.
func SplitBatch(raw []byte) ([][]byte, error) {
	_, ok, _ := valid(raw, nil)
	i := skipWS(raw, 0)
	if !ok || raw[i] != '[' {
		return nil, ErrParse
	}
	var out [][]byte
	for i = skipWS(raw, i+1); raw[i] != ']'; i = skipWS(raw, i) {
		if raw[i] == ',' {
			i = skipWS(raw, i+1)
		}
		e := skipValue(raw, i)
		out = append(out, raw[i:e:e])
		i = e
	}
	if len(out) == 0 {
		return nil, &InvalidError{Reason: "an empty batch"}
	}
	return out, nil
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string starting at b[i] == '"'.
// b is valid JSON.
func skipString(b []byte, i int) int {
	for i++; ; i += 2 { // past an escape
		i = indexQuoteOrBackslash(b, i)
		if i >= len(b) {
			return len(b)
		}
		if b[i] == '"' {
			return i + 1
		}
	}
}

// skipValue returns the index after the value starting at b[i]. b is valid JSON.
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		if e := skipContainer(b, i); e >= 0 {
			return e
		}
		return len(b)
	default:
		for i < len(b) {
			switch b[i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return i
			}
			i++
		}
		return i
	}
}

// keyText returns a member name's text, refusing what decoders would
// repair differently. Without escapes it is the quoted bytes themselves,
// not a copy.
func keyText(q []byte) ([]byte, error) {
	if bytes.IndexByte(q, '\\') < 0 {
		if !utf8.Valid(q) {
			return nil, errors.New("a member name is not valid UTF-8")
		}
		return q[1 : len(q)-1], nil
	}
	if err := checkString(q); err != nil {
		return nil, fmt.Errorf("a member name: %w", err)
	}
	var s string
	if err := json.Unmarshal(q, &s); err != nil {
		return nil, err
	}
	return []byte(s), nil
}

// String decodes a JSON string value.
func String(raw []byte) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1]), true
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
}

// StringIs reports whether raw is a JSON string whose value is s, without
// a copy of it when it has no escapes.
func StringIs(raw []byte, s string) bool {
	if len(raw) >= 2 && raw[0] == '"' && bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1:len(raw)-1]) == s
	}
	v, ok := String(raw)
	return ok && v == s
}

// IDKey returns a map key for an id: ids of different JSON types differ
// (1 and "1"), and equal values are equal however they are written
// ("a" and "\u0061"; 1, 1.0 and 1e0).
func IDKey(id []byte) string {
	if len(id) == 0 {
		return ""
	}
	switch id[0] {
	case '"':
		s, _ := String(id)
		return "s" + s
	case 'n':
		return "null"
	}
	if !bytes.ContainsAny(id, ".eE") {
		return "n" + string(id)
	}
	f, err := strconv.ParseFloat(string(id), 64)
	if err != nil {
		return "n" + string(id)
	}
	if f == float64(int64(f)) && f < 1e18 && f > -1e18 {
		return "n" + strconv.FormatInt(int64(f), 10)
	}
	return "n" + strconv.FormatFloat(f, 'g', -1, 64)
}

// ReplaceID returns the message with its id replaced; every other byte is
// kept.
func ReplaceID(m Message, id []byte) []byte {
	out := make([]byte, 0, len(m.Raw)-(m.IDEnd-m.IDStart)+len(id))
	out = append(out, m.Raw[:m.IDStart]...)
	out = append(out, id...)
	return append(out, m.Raw[m.IDEnd:]...)
}

// WithID is ReplaceID for a message that goes on being read: the result is
// the message Parse would return for the new bytes, without parsing them
// again. m must have an id.
func WithID(m Message, id []byte) Message {
	raw := ReplaceID(m, id)
	shift := len(id) - (m.IDEnd - m.IDStart)
	// A member's slice points into m.Raw, as Parse slices it (running to
	// Raw's end of capacity): its offset there is what its capacity lacks
	// of Raw's. The slices made here are cut the same way, so that the
	// result can be rewritten again.
	at := func(v []byte) []byte {
		if v == nil {
			return nil
		}
		off := cap(m.Raw) - cap(v)
		if off > m.IDStart {
			off += shift
		}
		return raw[off : off+len(v)]
	}
	n := m
	n.Raw = raw
	n.IDEnd = m.IDStart + len(id)
	n.ID = raw[m.IDStart:n.IDEnd]
	n.Params, n.Result, n.Error = at(m.Params), at(m.Result), at(m.Error)
	if m.Params != nil && m.ParamsStart > m.IDStart {
		n.ParamsStart, n.ParamsEnd = m.ParamsStart+shift, m.ParamsEnd+shift
	}
	return n
}

// WithParams is Rebuild of params alone for a message that goes on being
// read: the result is the message Parse would return for the new bytes,
// without parsing them again. m must have params, and no result or error.
func WithParams(m Message, params []byte) Message {
	raw := Rebuild(m, nil, params)
	shift := len(params) - (m.ParamsEnd - m.ParamsStart)
	n := m
	n.Raw = raw
	n.ParamsEnd = m.ParamsStart + len(params)
	n.Params = raw[m.ParamsStart:n.ParamsEnd]
	if m.ID != nil {
		if m.IDStart > m.ParamsStart {
			n.IDStart, n.IDEnd = m.IDStart+shift, m.IDEnd+shift
		}
		n.ID = raw[n.IDStart:n.IDEnd]
	}
	return n
}

// CheckStrict is Strict for a message, unless it was Checked already.
func CheckStrict(m Message) error {
	if m.Checked {
		return nil
	}
	return Strict(m.Raw)
}

// Rebuild returns the message with its id and its params replaced (a nil
// id or params keeps the message's own); every other byte is kept.
func Rebuild(m Message, id, params []byte) []byte {
	type edit struct {
		start, end int
		with       []byte
	}
	var edits []edit
	if id != nil && m.ID != nil {
		edits = append(edits, edit{m.IDStart, m.IDEnd, id})
	}
	if params != nil && m.Params != nil {
		edits = append(edits, edit{m.ParamsStart, m.ParamsEnd, params})
	}
	if len(edits) == 2 && edits[1].start < edits[0].start {
		edits[0], edits[1] = edits[1], edits[0]
	}
	out := make([]byte, 0, len(m.Raw)+len(id)+len(params))
	at := 0
	for _, e := range edits {
		out = append(out, m.Raw[at:e.start]...)
		out = append(out, e.with...)
		at = e.end
	}
	return append(out, m.Raw[at:]...)
}

// SetMember returns the JSON object obj with member key set to the raw
// JSON value: replaced where the key is present (every occurrence), added
// at the end otherwise. obj must be a valid JSON object.
func SetMember(obj []byte, key string, value []byte) []byte {
	out := make([]byte, 0, len(obj)+len(key)+len(value)+4)
	i := skipWS(obj, 0)
	out = append(out, obj[:i+1]...) // through '{'
	i++
	found, members := false, 0
	for i < len(obj) {
		i = skipWS(obj, i)
		if obj[i] == '}' {
			break
		}
		if obj[i] == ',' {
			i = skipWS(obj, i+1)
		}
		ks := i
		ke := skipString(obj, i)
		k, _ := keyText(obj[ks:ke])
		i = skipWS(obj, ke)
		i = skipWS(obj, i+1) // ':'
		ve := skipValue(obj, i)
		if members > 0 {
			out = append(out, ',')
		}
		members++
		out = append(out, obj[ks:ke]...)
		out = append(out, ':')
		if string(k) == key {
			found = true
			out = append(out, value...)
		} else {
			out = append(out, obj[i:ve]...)
		}
		i = ve
	}
	if !found {
		if members > 0 {
			out = append(out, ',')
		}
		q, _ := json.Marshal(key)
		out = append(out, q...)
		out = append(out, ':')
		out = append(out, value...)
	}
	return append(out, '}')
}

// ErrorResponse builds an error response; a nil id is written as null.
func ErrorResponse(id []byte, code int, message string, data any) []byte {
	if id == nil {
		id = []byte("null")
	}
	e := struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Data    any    `json:"data,omitempty"`
	}{code, message, data}
	b, err := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   any             `json:"error"`
	}{"2.0", id, e})
	if err != nil {
		b, _ = json.Marshal(struct {
			JSONRPC string          `json:"jsonrpc"`
			ID      json.RawMessage `json:"id"`
			Error   any             `json:"error"`
		}{"2.0", id, struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}{code, message}})
	}
	return b
}

// ErrorFrom builds an error response carrying errObj, the error object of
// another peer's response, as is; a nil id is written as null.
func ErrorFrom(id, errObj []byte) []byte {
	if id == nil {
		id = []byte("null")
	}
	out := append([]byte(`{"jsonrpc":"2.0","id":`), id...)
	out = append(out, `,"error":`...)
	out = append(out, errObj...)
	return append(out, '}')
}

// Response builds a result response.
func Response(id []byte, result any) ([]byte, error) {
	return json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Result  any             `json:"result"`
	}{"2.0", id, result})
}

// Request builds a request.
func Request(id []byte, method string, params any) ([]byte, error) {
	return json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Method  string          `json:"method"`
		Params  any             `json:"params,omitempty"`
	}{"2.0", id, method, params})
}

// Notification builds a notification.
func Notification(method string, params any) ([]byte, error) {
	return json.Marshal(struct {
		JSONRPC string `json:"jsonrpc"`
		Method  string `json:"method"`
		Params  any    `json:"params,omitempty"`
	}{"2.0", method, params})
}

// ParamsMember returns the raw value of a top-level member of a JSON
// object, or nil.
func ParamsMember(obj []byte, key string) []byte {
	var v []byte
	eachMember(obj, func(k, val []byte) bool {
		if string(k) == key {
			v = val
			return false
		}
		return true
	})
	return v
}

// Members finds several top-level members of a JSON object in one pass:
// vals[i] is what ParamsMember(obj, keys[i]) returns. vals is as long as
// keys.
func Members(obj []byte, keys []string, vals [][]byte) {
	clear(vals)
	left := len(keys)
	eachMember(obj, func(k, v []byte) bool {
		for i, key := range keys {
			if vals[i] == nil && string(k) == key {
				vals[i] = v
				left--
				break
			}
		}
		return left > 0
	})
}

// eachMember calls f with the name and the raw value of each top-level
// member of a JSON object, in order, until f returns false. It stops
// early, without an error, at anything that is not a well-formed member.
func eachMember(obj []byte, f func(k, v []byte) bool) {
	i := skipWS(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return
	}
	i++
	for i < len(obj) {
		i = skipWS(obj, i)
		if i >= len(obj) || obj[i] == '}' {
			return
		}
		if obj[i] == ',' {
			i = skipWS(obj, i+1)
		}
		if i >= len(obj) || obj[i] != '"' {
			return
		}
		ke := skipString(obj, i)
		k, err := keyText(obj[i:ke])
		if err != nil {
			return
		}
		i = skipWS(obj, ke)
		i = skipWS(obj, i+1)
		if i >= len(obj) {
			return
		}
		ve := skipValue(obj, i)
		if !f(k, obj[i:ve]) {
			return
		}
		i = ve
	}
}

// MetaMember returns a member of params._meta, or nil.
func MetaMember(params []byte, key string) []byte {
	meta := ParamsMember(params, "_meta")
	if meta == nil {
		return nil
	}
	return ParamsMember(meta, key)
}

// StrictError says where a message guard decides on is ambiguous.
type StrictError struct {
	Path    string
	Problem string
}

func (e *StrictError) Error() string {
	if e.Path == "" {
		return e.Problem
	}
	return e.Path + ": " + e.Problem
}

// Strict checks a whole message: no object has duplicate member names or
// names that differ only in case, and no string holds invalid UTF-8 or a
// lone surrogate. raw is valid JSON (Parse accepted it).
func Strict(raw []byte) error {
	return strict(raw, false)
}

// resultMembers are the members a result of tools/call defines (through
// 2026-07-28's rounds): a case variant of one is read as it by some
// clients and ignored by others.
var resultMembers = []string{"content", "structuredContent", "isError", "_meta", "resultType", "inputRequests", "requestState"}

// StrictResult checks a result that the client will read: no object
// anywhere has a member name twice, no string holds invalid UTF-8 or a lone
// surrogate, and, for a tools/call result (toolCall), no top-level member
// differs only in case from one the protocol defines, under the Unicode
// simple case folding encoding/json matches names with ("iſError" is
// isError to it). Case variants inside a tool's own data stay allowed. raw
// is valid JSON.
func StrictResult(raw []byte, toolCall bool) error {
	if err := strict(raw, true); err != nil {
		return err
	}
	if !toolCall {
		return nil
	}
	i := skipWS(raw, 0)
	if raw[i] != '{' {
		return nil
	}
	for i = skipWS(raw, i+1); raw[i] != '}'; i = skipWS(raw, i) {
		if raw[i] == ',' {
			i = skipWS(raw, i+1)
		}
		ke := skipString(raw, i)
		k, _ := keyText(raw[i:ke])
		for _, name := range resultMembers {
			if caseVariant(k, name) {
				return &StrictError{Path: string(k), Problem: fmt.Sprintf("member differs only in case from %q", name)}
			}
		}
		i = skipWS(raw, skipWS(raw, ke)+1)
		i = skipValue(raw, i)
	}
	return nil
}

// toolMembers are the members of a tool's definition that guard pins and
// decides by, and annotationMembers those of its annotations: a case
// variant of one is read as it by guard (encoding/json) and some clients,
// and ignored by others.
var (
	toolMembers       = []string{"name", "title", "description", "inputSchema", "outputSchema", "annotations", "_meta"}
	annotationMembers = []string{"title", "readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"}
)

// StrictListing checks a tools/list result as StrictResult checks any
// result (no duplicate member names, valid UTF-8), and that no member of a
// tool's definition, or of its annotations, differs only in case from one
// the protocol defines: {"readOnlyHint":false,"ReadOnlyHint":true} would
// be read-only to guard and not to a JavaScript client. Case variants
// inside a tool's schemas stay allowed. raw is valid JSON.
func StrictListing(raw []byte) error {
	if err := strict(raw, true); err != nil {
		return err
	}
	tools := ParamsMember(raw, "tools")
	if len(tools) == 0 || tools[0] != '[' {
		return nil
	}
	var err error
	for i := skipWS(tools, 1); i < len(tools) && tools[i] != ']' && err == nil; i = skipWS(tools, i) {
		if tools[i] == ',' {
			i = skipWS(tools, i+1)
		}
		e := skipValue(tools, i)
		def := tools[i:e]
		err = caseVariants(def, toolMembers, "tools[].")
		if err == nil {
			err = caseVariants(ParamsMember(def, "annotations"), annotationMembers, "tools[].annotations.")
		}
		i = e
	}
	return err
}

// caseVariants reports the first member of obj that differs only in case
// from one of names.
func caseVariants(obj []byte, names []string, path string) error {
	var err error
	eachMember(obj, func(k, _ []byte) bool {
		for _, name := range names {
			if caseVariant(k, name) {
				err = &StrictError{Path: path + string(k), Problem: fmt.Sprintf("member differs only in case from %q", name)}
				return false
			}
		}
		return true
	})
	return err
}

// strict checks every value of raw (see strictWalk.value). The walk keeps
// no path: when it finds a problem, it is done again with paths, for the
// error to say where.
func strict(raw []byte, exact bool) error {
	w := strictWalk{exact: exact, utf8: utf8.Valid(raw)}
	i := skipWS(raw, 0)
	if _, err := w.value(raw, i, nil); err == nil {
		return nil
	}
	w.paths = true
	_, err := w.value(raw, i, nil)
	return err
}

// strictWalk is how strict walks a message.
type strictWalk struct {
	// exact compares member names as written (duplicates only), otherwise
	// as a case-insensitive decoder does.
	exact bool
	// utf8: the whole message is valid UTF-8, so a string's escapes are
	// all that is left to check.
	utf8 bool
	// paths builds each value's position as the walk descends (at); without
	// it at is nil and errors name no path.
	paths bool
}

// where is a position in a message, built as the walk descends and turned
// into text only for an error.
type where struct {
	up    *where
	key   []byte // a member name, or nil for an array element
	index int
}

func (w *where) String() string {
	if w == nil {
		return ""
	}
	up := w.up.String()
	if w.key == nil {
		return up + "[" + strconv.Itoa(w.index) + "]"
	}
	if up == "" {
		return string(w.key)
	}
	return up + "." + string(w.key)
}

// checkString checks a quoted string of the message walked.
func (w strictWalk) checkString(q []byte) error {
	if w.utf8 {
		return checkEscapes(q)
	}
	return checkString(q)
}

// value checks the value at b[i] and returns the index after it.
func (w strictWalk) value(b []byte, i int, at *where) (int, error) {
	switch b[i] {
	case '"':
		e := skipString(b, i)
		if err := w.checkString(b[i:e]); err != nil {
			return e, &StrictError{Path: at.String(), Problem: err.Error()}
		}
		return e, nil
	case '[':
		i = skipWS(b, i+1)
		for n := 0; b[i] != ']'; n++ {
			if b[i] == ',' {
				i = skipWS(b, i+1)
			}
			var next *where
			if w.paths {
				next = &where{up: at, index: n}
			}
			var err error
			i, err = w.value(b, i, next)
			if err != nil {
				return i, err
			}
			i = skipWS(b, i)
		}
		return i + 1, nil
	case '{':
		var small [8][]byte // the names seen, as written (most objects are small)
		names := small[:0]
		var folded map[string][]byte // folded → as written, past eight names
		key := fold
		if w.exact {
			key = func(s string) string { return s }
		}
		i = skipWS(b, i+1)
		for b[i] != '}' {
			if b[i] == ',' {
				i = skipWS(b, i+1)
			}
			ke := skipString(b, i)
			if err := w.checkString(b[i:ke]); err != nil {
				return ke, &StrictError{Path: at.String(), Problem: "a member name: " + err.Error()}
			}
			k := memberName(b[i:ke])
			if folded == nil && len(names) == cap(small) {
				folded = make(map[string][]byte, 16)
				for _, n := range names {
					folded[key(string(n))] = n
				}
			}
			if folded != nil {
				f := key(string(k))
				if prev, ok := folded[f]; ok {
					return ke, dupError(at, prev, k)
				}
				folded[f] = k
			} else {
				for _, prev := range names {
					if (w.exact && string(prev) == string(k)) || (!w.exact && sameName(prev, k)) {
						return ke, dupError(at, prev, k)
					}
				}
			}
			names = append(names, k)
			i = skipWS(b, ke)
			i = skipWS(b, i+1)
			var next *where
			if w.paths {
				next = &where{up: at, key: k}
			}
			var err error
			i, err = w.value(b, i, next)
			if err != nil {
				return i, err
			}
			i = skipWS(b, i)
		}
		return i + 1, nil
	default:
		return skipValue(b, i), nil
	}
}

// memberName returns the text of a member name checkString accepted: the
// quoted bytes themselves when it has no escapes, not a copy.
func memberName(q []byte) []byte {
	if bytes.IndexByte(q, '\\') < 0 {
		return q[1 : len(q)-1]
	}
	var s string
	if json.Unmarshal(q, &s) != nil {
		return nil
	}
	return []byte(s)
}

// sameName reports whether two member names are one for a decoder that
// ignores case.
func sameName(a, b []byte) bool {
	if len(a) == len(b) {
		ascii := true
		for i := range a {
			x, y := a[i], b[i]
			if x >= utf8.RuneSelf || y >= utf8.RuneSelf {
				ascii = false
				break
			}
			if x != y && lowerASCII(x) != lowerASCII(y) {
				return false
			}
		}
		if ascii {
			return true
		}
	} else if isASCII(a) && isASCII(b) {
		return false
	}
	return fold(string(a)) == fold(string(b))
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

func dupError(at *where, prev, k []byte) error {
	if string(prev) == string(k) {
		return &StrictError{Path: at.String(), Problem: fmt.Sprintf("duplicate key %q", k)}
	}
	return &StrictError{Path: (&where{up: at, key: k}).String(), Problem: fmt.Sprintf("key differs only in case from %q", prev)}
}

// fold maps a name to a key shared by every name that a case-insensitive
// decoder would take for it.
func fold(s string) string {
	ascii := true
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	if ascii {
		return strings.ToUpper(s) // the smallest member of each ASCII letter's fold orbit
	}
	var b strings.Builder
	for _, r := range s {
		min := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			if f < min {
				min = f
			}
		}
		b.WriteRune(min)
	}
	return b.String()
}

// checkString refuses invalid UTF-8 and escaped lone surrogates in a quoted
// JSON string.
func checkString(q []byte) error {
	if !utf8.Valid(q) {
		return errors.New("invalid UTF-8")
	}
	return checkEscapes(q)
}

// checkEscapes refuses escaped lone surrogates in a quoted JSON string.
func checkEscapes(q []byte) error {
	if bytes.IndexByte(q, '\\') < 0 {
		return nil
	}
	for i := 0; i < len(q); i++ {
		if q[i] != '\\' {
			continue
		}
		i++
		if i >= len(q) || q[i] != 'u' || i+4 >= len(q) {
			continue
		}
		r, err := strconv.ParseUint(string(q[i+1:i+5]), 16, 32)
		if err != nil {
			continue
		}
		i += 4
		if !utf16.IsSurrogate(rune(r)) {
			continue
		}
		if r >= 0xDC00 {
			return fmt.Errorf(`lone surrogate \u%04x`, r)
		}
		// a high surrogate must be followed by an escaped low one
		if i+6 < len(q) && q[i+1] == '\\' && q[i+2] == 'u' {
			lo, err := strconv.ParseUint(string(q[i+3:i+7]), 16, 32)
			if err == nil && lo >= 0xDC00 && lo <= 0xDFFF {
				i += 6
				continue
			}
		}
		return fmt.Errorf(`lone surrogate \u%04x`, r)
	}
	return nil
}

// ErrorCode is the code of a JSON-RPC error object (0 when it has none).
func ErrorCode(errObj []byte) int {
	var e struct {
		Code int `json:"code"`
	}
	if json.Unmarshal(errObj, &e) != nil {
		return 0
	}
	return e.Code
}
