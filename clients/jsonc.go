package clients

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/tailscale/hujson"
)

// jsonDoc is a JSON file with comments and trailing commas (VS Code's,
// Gemini CLI's; strict JSON is a case of it), as hujson's syntax tree:
// packing it gives back every byte that no edit touched.
type jsonDoc struct {
	root hujson.Value
	// empty: the file holds nothing but white space (a client that never
	// wrote it): no servers, and nothing guard edits.
	empty bool
	// space is what such a file holds.
	space []byte
}

var hujsonError = regexp.MustCompile(`^hujson: line (\d+), column \d+: (.*)$`)

func parseJSON(data []byte) (*jsonDoc, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return &jsonDoc{empty: true, space: data}, nil
	}
	v, err := hujson.Parse(data)
	if err != nil {
		if m := hujsonError.FindStringSubmatch(err.Error()); m != nil {
			n, _ := strconv.Atoi(m[1])
			return nil, &SyntaxError{Line: n, Msg: m[2]}
		}
		return nil, &SyntaxError{Msg: strings.TrimPrefix(err.Error(), "hujson: ")}
	}
	if _, ok := v.Value.(*hujson.Object); !ok {
		return nil, &SyntaxError{Line: lineOf(data, v.StartOffset), Msg: "the file is not a JSON object"}
	}
	return &jsonDoc{root: v}, nil
}

// SyntaxError is a file that guard cannot read, and where.
type SyntaxError struct {
	// Line is where the parser stopped (0 when unknown), and Msg why.
	Line int
	Msg  string
}

// Error is the message without the file's name, which the caller adds.
func (e *SyntaxError) Error() string {
	if e.Line == 0 {
		return e.Msg
	}
	return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
}

func lineOf(data []byte, offset int) int {
	return 1 + bytes.Count(data[:min(offset, len(data))], []byte("\n"))
}

func (d *jsonDoc) bytes() []byte {
	if d.empty {
		return d.space
	}
	return d.root.Pack()
}

// memberIndex returns the index of the last member named key (the one a
// JavaScript client reads), or -1.
func memberIndex(obj *hujson.Object, key string) int {
	for i := len(obj.Members) - 1; i >= 0; i-- {
		if lit, ok := obj.Members[i].Name.Value.(hujson.Literal); ok && lit.String() == key {
			return i
		}
	}
	return -1
}

// section returns the object at the path of keys, nil when it is absent.
func (d *jsonDoc) section(path []string) (*hujson.Object, error) {
	if d.empty {
		return nil, nil
	}
	obj := d.root.Value.(*hujson.Object)
	for _, key := range path {
		i := memberIndex(obj, key)
		if i < 0 {
			return nil, nil
		}
		v := &obj.Members[i].Value
		next, ok := v.Value.(*hujson.Object)
		if !ok {
			if v.Value.Kind() == 'n' {
				return nil, nil
			}
			return nil, fmt.Errorf("%q is not an object", key)
		}
		obj = next
	}
	return obj, nil
}

func (d *jsonDoc) entries(path []string) ([]docEntry, error) {
	obj, err := d.section(path)
	if err != nil || obj == nil {
		return nil, err
	}
	var out []docEntry
	for i, m := range obj.Members {
		name := m.Name.Value.(hujson.Literal).String()
		if memberIndex(obj, name) != i {
			continue // a duplicate that a client does not read
		}
		e := docEntry{name: name, text: string(trimmed(m.Value))}
		if _, ok := m.Value.Value.(*hujson.Object); ok {
			std := m.Value.Clone()
			std.Standardize()
			if err := json.Unmarshal(std.Pack(), &e.value); err != nil {
				return nil, fmt.Errorf("server %q: %w", name, err)
			}
		}
		out = append(out, e)
	}
	return out, nil
}

// trimmed is v's text without the white space and comments around it.
func trimmed(v hujson.Value) []byte {
	v.BeforeExtra, v.AfterExtra = nil, nil
	return v.Pack()
}

// entry returns the object of the entry named, and the white space its
// name is indented by.
func (d *jsonDoc) entry(path []string, name string) (*hujson.Object, *hujson.Value, error) {
	obj, err := d.section(path)
	if err != nil {
		return nil, nil, err
	}
	if obj == nil {
		return nil, nil, fmt.Errorf("no %s", strings.Join(path, "."))
	}
	i := memberIndex(obj, name)
	if i < 0 {
		return nil, nil, fmt.Errorf("no server %q", name)
	}
	m := &obj.Members[i]
	e, ok := m.Value.Value.(*hujson.Object)
	if !ok {
		return nil, nil, fmt.Errorf("server %q is not an object", name)
	}
	return e, &m.Name, nil
}

func (d *jsonDoc) setEntry(path []string, name, text string) error {
	obj, err := d.section(path)
	if err != nil {
		return err
	}
	if obj == nil {
		return fmt.Errorf("no %s", strings.Join(path, "."))
	}
	i := memberIndex(obj, name)
	if i < 0 {
		return fmt.Errorf("no server %q", name)
	}
	v, err := hujson.Parse([]byte(text))
	if err != nil {
		return fmt.Errorf("server %q: %w", name, err)
	}
	obj.Members[i].Value.Value = v.Value
	return nil
}

func (d *jsonDoc) apply(path []string, name string, ops []op) error {
	obj, entryName, err := d.entry(path, name)
	if err != nil {
		return err
	}
	ed := jsonEditor{obj: obj, outer: lastLine(entryName.BeforeExtra)}
	for _, o := range ops {
		if err := ed.apply(o); err != nil {
			return fmt.Errorf("server %q: %w", name, err)
		}
	}
	return nil
}

// jsonEditor edits one entry's object in the style of its members.
type jsonEditor struct {
	obj *hujson.Object
	// outer is the white space before the entry's own name: its members
	// are indented one step further.
	outer string
}

func (ed *jsonEditor) apply(o op) error {
	i := memberIndex(ed.obj, o.key)
	if o.kind == opDelete {
		// Every member of that name: with the last gone, an earlier
		// duplicate would count.
		for ; i >= 0; i = memberIndex(ed.obj, o.key) {
			ed.remove(i)
		}
		return nil
	}
	if i < 0 {
		if o.kind != opTrim {
			ed.insert(o)
		}
		return nil
	}
	v := &ed.obj.Members[i].Value
	switch o.kind {
	case opSet:
		v.Value = ed.value(o.value, ed.memberIndent())
	case opPrepend, opAppend:
		arr, ok := v.Value.(*hujson.Array)
		if !ok {
			return fmt.Errorf("%q is not a list", o.key)
		}
		insertElements(arr, o.value.([]string), o.kind == opPrepend)
	case opTrim:
		arr, ok := v.Value.(*hujson.Array)
		if !ok {
			return fmt.Errorf("%q is not a list", o.key)
		}
		trimElements(arr, o.value.(int))
	case opAddMembers:
		sub, ok := v.Value.(*hujson.Object)
		if !ok {
			return fmt.Errorf("%q is not an object", o.key)
		}
		ed.addMembers(sub, o.value.([]member))
	}
	return nil
}

// memberIndent is the white space before the entry's members' names:
// a line break and an indentation, or a space on a single line.
func (ed *jsonEditor) memberIndent() string {
	ms := ed.obj.Members
	switch {
	case len(ms) > 1:
		return lastLine(ms[1].Name.BeforeExtra)
	case len(ms) == 1 && strings.Contains(string(ms[0].Name.BeforeExtra), "\n"):
		return lastLine(ms[0].Name.BeforeExtra)
	}
	return " "
}

// unit is one step of indentation: the members' beyond the entry's.
func (ed *jsonEditor) unit() string {
	in := ed.memberIndent()
	if breaks(in) && breaks(ed.outer) && len(in) > len(ed.outer) && strings.HasPrefix(in, ed.outer) {
		return in[len(ed.outer):]
	}
	return "  "
}

// insert adds a member where o says: before or after another, else last.
func (ed *jsonEditor) insert(o op) {
	at := len(ed.obj.Members)
	if j := memberIndex(ed.obj, o.before); o.before != "" && j >= 0 {
		at = j
	} else if j := memberIndex(ed.obj, o.after); o.after != "" && j >= 0 {
		at = j + 1
	}
	in := ed.memberIndent()
	m := hujson.ObjectMember{
		Name:  hujson.Value{BeforeExtra: hujson.Extra(in), Value: hujson.String(o.key)},
		Value: hujson.Value{BeforeExtra: hujson.Extra(" "), Value: ed.value(o.value, in)},
	}
	if len(ed.obj.Members) > 0 {
		// The value's spacing after the colon is its siblings'.
		if sp := ed.obj.Members[0].Value.BeforeExtra; isSpace(sp) {
			m.Value.BeforeExtra = append(hujson.Extra(nil), sp...)
		}
	}
	if at == 0 && len(ed.obj.Members) > 0 {
		// The first member keeps the opening's spacing (comments
		// included); the one it displaces takes a sibling's.
		m.Name.BeforeExtra, ed.obj.Members[0].Name.BeforeExtra = ed.obj.Members[0].Name.BeforeExtra, hujson.Extra(in)
	}
	if at == len(ed.obj.Members) && at > 0 {
		// A trailing comma, or its absence, stays at the end.
		last := &ed.obj.Members[at-1].Value
		m.Value.AfterExtra, last.AfterExtra = last.AfterExtra, nil
	}
	ed.obj.Members = append(ed.obj.Members[:at], append([]hujson.ObjectMember{m}, ed.obj.Members[at:]...)...)
}

func (ed *jsonEditor) remove(i int) {
	ms := ed.obj.Members
	if i == len(ms)-1 && i > 0 {
		ms[i-1].Value.AfterExtra = ms[i].Value.AfterExtra
	}
	if i == 0 && len(ms) > 1 {
		ms[1].Name.BeforeExtra = ms[0].Name.BeforeExtra
	}
	ed.obj.Members = append(ms[:i], ms[i+1:]...)
}

// value is a new value: a string, a list of strings on one line, or an
// object of strings, one member a line when the entry has one a line
// (indent is the white space before the member that holds it).
func (ed *jsonEditor) value(v any, indent string) hujson.ValueTrimmed {
	switch v := v.(type) {
	case string:
		return hujson.String(v)
	case []string:
		arr := &hujson.Array{}
		insertElements(arr, v, false)
		return arr
	case []member:
		obj := &hujson.Object{}
		if breaks(indent) {
			obj.AfterExtra = hujson.Extra(indent)
		}
		ed.addMembers(obj, v)
		return obj
	}
	panic(fmt.Sprintf("clients: no JSON form for %T", v))
}

// addMembers adds string members at the end of obj, spaced as its own
// are (or, in a new object, indented one step beyond obj's closing).
func (ed *jsonEditor) addMembers(obj *hujson.Object, ms []member) {
	in, colon := " ", hujson.Extra(" ")
	switch n := len(obj.Members); {
	case n > 0:
		in = lastLine(obj.Members[n-1].Name.BeforeExtra)
		if isSpace(obj.Members[n-1].Value.BeforeExtra) {
			colon = obj.Members[n-1].Value.BeforeExtra
		}
	case breaks(string(obj.AfterExtra)):
		in = string(obj.AfterExtra) + ed.unit()
	default:
		in = ""
	}
	for _, m := range ms {
		nm := hujson.ObjectMember{
			Name:  hujson.Value{BeforeExtra: hujson.Extra(in), Value: hujson.String(m.key)},
			Value: hujson.Value{BeforeExtra: append(hujson.Extra(nil), colon...), Value: hujson.String(m.value)},
		}
		if n := len(obj.Members); n > 0 {
			last := &obj.Members[n-1].Value
			nm.Value.AfterExtra, last.AfterExtra = last.AfterExtra, nil
		} else if in == "" {
			in = " "
		}
		obj.Members = append(obj.Members, nm)
	}
}

// insertElements puts strings at the start or the end of arr, spaced as
// its elements are: one a line when they are, else after a space.
func insertElements(arr *hujson.Array, vs []string, front bool) {
	sep := " "
	if n := len(arr.Elements); n > 0 {
		sep = lastLine(arr.Elements[min(1, n-1)].BeforeExtra)
		if n == 1 && !breaks(sep) {
			sep = " "
		}
	}
	els := make([]hujson.Value, len(vs))
	for i, v := range vs {
		els[i] = hujson.Value{BeforeExtra: hujson.Extra(sep), Value: hujson.String(v)}
	}
	switch {
	case len(arr.Elements) == 0:
		els[0].BeforeExtra = nil
		arr.Elements = els
	case front:
		// The first new element takes the opening's spacing; the old
		// first keeps its comments, on a line of its own or after a
		// space.
		first := &arr.Elements[0]
		els[0].BeforeExtra = hujson.Extra(lastLine(first.BeforeExtra))
		if !breaks(sep) {
			els[0].BeforeExtra = first.BeforeExtra
			if isSpace(first.BeforeExtra) {
				first.BeforeExtra = hujson.Extra(sep)
			}
		}
		arr.Elements = append(els, arr.Elements...)
	default:
		last := &arr.Elements[len(arr.Elements)-1]
		els[len(els)-1].AfterExtra, last.AfterExtra = last.AfterExtra, nil
		arr.Elements = append(arr.Elements, els...)
	}
}

// trimElements removes the first n elements of arr; the new first takes
// the old first's spacing unless it has comments of its own.
func trimElements(arr *hujson.Array, n int) {
	n = min(n, len(arr.Elements))
	if n == 0 {
		return
	}
	first := arr.Elements[0].BeforeExtra
	if n == len(arr.Elements) {
		// No element is left, and so no trailing comma.
		arr.AfterExtra = append(hujson.Extra(nil), bytes.TrimLeft(arr.AfterExtra, " \t\r\n")...)
		arr.Elements = nil
		return
	}
	arr.Elements = arr.Elements[n:]
	if isSpace(arr.Elements[0].BeforeExtra) {
		arr.Elements[0].BeforeExtra = first
	}
}

// lastLine is the white space that starts extra's last line (with its
// line break), or a space when extra holds no line break.
func lastLine(extra hujson.Extra) string {
	s := string(extra)
	i := strings.LastIndexByte(s, '\n')
	if i < 0 {
		if isSpace(extra) {
			return s
		}
		return " "
	}
	nl := "\n"
	if i > 0 && s[i-1] == '\r' {
		nl = "\r\n" // the file's own line breaks
	}
	if tail := s[i+1:]; strings.Trim(tail, " \t") == "" {
		return nl + tail
	}
	return nl
}

func isSpace(b []byte) bool {
	return len(bytes.Trim(b, " \t\r\n")) == 0
}

// breaks reports whether white space starts with a line break (a member
// or element on a line of its own).
func breaks(s string) bool {
	return strings.HasPrefix(strings.TrimPrefix(s, "\r"), "\n")
}
