package clients

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
)

// tomlDoc is a TOML file (Codex's), edited as text: no TOML encoder keeps
// comments and layout, so each edit is a splice of bytes at the place the
// parser reports, and the file is parsed afresh before the next one.
type tomlDoc struct {
	data []byte
	// values is the file decoded, for the entries' values.
	values map[string]any
}

func parseTOML(data []byte) (*tomlDoc, error) {
	d := &tomlDoc{data: data}
	if err := toml.Unmarshal(data, &d.values); err != nil {
		var de *toml.DecodeError
		if errors.As(err, &de) {
			row, _ := de.Position()
			return nil, &SyntaxError{Line: row, Msg: de.Error()}
		}
		return nil, &SyntaxError{Msg: err.Error()}
	}
	return d, nil
}

func (d *tomlDoc) bytes() []byte { return d.data }

// tomlExpr is one top-level expression: a table's header, or a key and
// its value.
type tomlExpr struct {
	table bool
	// path is the full path of keys: a header's, or a key's under the
	// table it is in.
	path []string
	// key is a key-value's own key (dotted keys have several parts).
	key []string
	// start and end span the expression's lines, the last one's line
	// break included.
	start, end int
	// indent is the white space before the expression on its line.
	indent string
	// valStart and valEnd span a key-value's value.
	valStart, valEnd int
	valKind          unstable.Kind
	// first and last are the offsets of the first element's start and the
	// last element's end, in an array or an inline table (-1: empty).
	first, last int
	// nested: the array holds arrays or tables.
	nested bool
	// elems are where the elements of an array start.
	elems []int
}

// scan lists the file's expressions.
func (d *tomlDoc) scan() ([]tomlExpr, error) {
	var p unstable.Parser
	p.Reset(d.data)
	var out []tomlExpr
	var table []string
	for p.NextExpression() {
		n := p.Expression()
		switch n.Kind {
		case unstable.Table, unstable.ArrayTable:
			keys, first, last := keyParts(n.Key())
			table = keys
			out = append(out, tomlExpr{table: true, path: keys, start: d.lineStart(first), end: d.lineEnd(last),
				indent: string(d.data[d.lineStart(first):first])})
		case unstable.KeyValue:
			keys, first, last := keyParts(n.Key())
			v := n.Value()
			e := tomlExpr{path: append(slices.Clone(table), keys...), key: keys,
				start: d.lineStart(first), indent: string(d.data[d.lineStart(first):first]),
				valStart: d.valueStart(last), valEnd: int(n.Raw.Offset + n.Raw.Length), valKind: v.Kind, first: -1, last: -1}
			e.end = d.lineEnd(e.valEnd)
			if v.Kind == unstable.Array || v.Kind == unstable.InlineTable {
				for it := v.Children(); it.Next(); {
					c := it.Node()
					if c.Kind == unstable.Comment {
						continue
					}
					s, en, ok := span(c)
					if !ok {
						e.nested = true
					}
					if e.first < 0 {
						e.first = s
					}
					e.last = en
					e.elems = append(e.elems, s)
				}
			}
			out = append(out, e)
		}
	}
	if err := p.Error(); err != nil {
		return nil, fmt.Errorf("reading TOML: %w", err)
	}
	return out, nil
}

// span is the range of an element of an array (a scalar) or of an inline
// table (a key-value, whose range covers its value); ok is false for
// an array or a table in an array, which guard does not edit.
func span(n *unstable.Node) (start, end int, ok bool) {
	if n.Kind == unstable.Array || n.Kind == unstable.InlineTable {
		return 0, 0, false
	}
	return int(n.Raw.Offset), int(n.Raw.Offset + n.Raw.Length), true
}

// keyParts reads a dotted key: its parts, the offset of its first byte
// and of the byte after it.
func keyParts(it unstable.Iterator) (parts []string, first, last int) {
	first = -1
	for it.Next() {
		k := it.Node()
		parts = append(parts, string(k.Data))
		if first < 0 {
			first = int(k.Raw.Offset)
		}
		last = int(k.Raw.Offset + k.Raw.Length)
	}
	return parts, first, last
}

func (d *tomlDoc) lineStart(off int) int {
	return bytes.LastIndexByte(d.data[:off], '\n') + 1
}

// lineEnd is the offset after the line break that ends the line off is
// on (after a comment there), or the end of the file.
func (d *tomlDoc) lineEnd(off int) int {
	if i := bytes.IndexByte(d.data[off:], '\n'); i >= 0 {
		return off + i + 1
	}
	return len(d.data)
}

// valueStart is where the value starts after a key that ends at off.
func (d *tomlDoc) valueStart(off int) int {
	i := off
	for i < len(d.data) && (d.data[i] == ' ' || d.data[i] == '\t') {
		i++
	}
	if i < len(d.data) && d.data[i] == '=' {
		i++
	}
	for i < len(d.data) && (d.data[i] == ' ' || d.data[i] == '\t') {
		i++
	}
	return i
}

// newline is the file's line break.
func (d *tomlDoc) newline() string {
	if bytes.Contains(d.data, []byte("\r\n")) {
		return "\r\n"
	}
	return "\n"
}

// block is where an entry is in the file: written as a table of its own
// ([mcp_servers.NAME], with its sub-tables right after it), from its
// header to its last line. fixed says why guard does not edit an entry
// written otherwise.
type block struct {
	start, end int
	exprs      []tomlExpr
	fixed      string
}

func (d *tomlDoc) block(exprs []tomlExpr, path []string) block {
	var b block
	in, header := false, -1
	for i, e := range exprs {
		under := hasPrefix(e.path, path)
		switch {
		case e.table && slices.Equal(e.path, path):
			header, in = i, true
			b.start = e.start
		case e.table:
			in = in && under
		}
		if under {
			if !in {
				b.fixed = "it is written as an inline table, as dotted keys or in pieces, which guard does not edit: write it as a table of its own, [" + tomlKey(path...) + "]"
			}
			b.exprs = append(b.exprs, e)
			b.end = e.end
		}
	}
	if header < 0 && b.fixed == "" {
		b.fixed = "it is not a table of its own"
	}
	return b
}

func hasPrefix(p, prefix []string) bool {
	return len(p) >= len(prefix) && slices.Equal(p[:len(prefix)], prefix)
}

func (d *tomlDoc) entries(section []string) ([]docEntry, error) {
	var m any = d.values
	for _, k := range section {
		mm, _ := m.(map[string]any)
		m = mm[k]
	}
	servers, _ := m.(map[string]any)
	if len(servers) == 0 {
		return nil, nil
	}
	exprs, err := d.scan()
	if err != nil {
		return nil, err
	}
	// The file's order: where each server is first named.
	var names []string
	for _, e := range exprs {
		if len(e.path) > len(section) && hasPrefix(e.path, section) && !slices.Contains(names, e.path[len(section)]) {
			names = append(names, e.path[len(section)])
		}
	}
	var out []docEntry
	for _, name := range names {
		de := docEntry{name: name}
		switch v := servers[name].(type) {
		case map[string]any:
			de.value = v
		default:
			continue // not a server: a value of the map itself
		}
		b := d.block(exprs, append(slices.Clone(section), name))
		de.fixed = b.fixed
		if b.fixed == "" {
			de.text = string(d.data[b.start:b.end])
		}
		out = append(out, de)
	}
	return out, nil
}

func (d *tomlDoc) setEntry(section []string, name, text string) error {
	exprs, err := d.scan()
	if err != nil {
		return err
	}
	b := d.block(exprs, append(slices.Clone(section), name))
	if b.fixed != "" {
		return fmt.Errorf("server %q: %s", name, b.fixed)
	}
	return d.splice(b.start, b.end, text)
}

// splice replaces the bytes from start to end, and reads the file again.
func (d *tomlDoc) splice(start, end int, text string) error {
	data := slices.Concat(d.data[:start:start], []byte(text), d.data[end:])
	nd, err := parseTOML(data)
	if err != nil {
		// An edit of guard's that breaks the file is a bug: say so
		// rather than write it.
		return fmt.Errorf("an edit would break the file (%v): please report it", err)
	}
	*d = *nd
	return nil
}

func (d *tomlDoc) apply(section []string, name string, ops []op) error {
	path := append(slices.Clone(section), name)
	for _, o := range ops {
		if err := d.applyOne(path, o); err != nil {
			return fmt.Errorf("server %q: %w", name, err)
		}
	}
	return nil
}

func (d *tomlDoc) applyOne(path []string, o op) error {
	exprs, err := d.scan()
	if err != nil {
		return err
	}
	b := d.block(exprs, path)
	if b.fixed != "" {
		return errors.New(b.fixed)
	}
	var own []tomlExpr // the entry's key-values under its own header
	var kv *tomlExpr   // the member o names, as a key-value there
	var dotted []tomlExpr
	var sub []tomlExpr // the member as a sub-table: its header and what follows
	for _, e := range b.exprs {
		switch {
		case e.table && hasPrefix(e.path, append(slices.Clone(path), o.key)):
			sub = append(sub, e)
		case len(sub) > 0 && hasPrefix(e.path, append(slices.Clone(path), o.key)):
			sub = append(sub, e)
		case !e.table && len(e.path) == len(path)+len(e.key) && slices.Equal(e.path[:len(path)], path):
			own = append(own, e)
			if slices.Equal(e.key, []string{o.key}) {
				kv = &own[len(own)-1]
			} else if e.key[0] == o.key {
				dotted = append(dotted, e)
			}
		}
	}
	nl := d.newline()
	switch o.kind {
	case opDelete:
		// From the last, so that the offsets before stay right.
		var spans [][2]int
		if kv != nil {
			spans = append(spans, [2]int{kv.start, kv.end})
		}
		for _, e := range dotted {
			spans = append(spans, [2]int{e.start, e.end})
		}
		if len(sub) > 0 {
			spans = append(spans, [2]int{sub[0].start, sub[len(sub)-1].end})
		}
		slices.SortFunc(spans, func(a, b [2]int) int { return b[0] - a[0] })
		for _, s := range spans {
			if err := d.splice(s[0], s[1], ""); err != nil {
				return err
			}
		}
		return nil
	case opSet:
		if kv != nil {
			return d.splice(kv.valStart, kv.valEnd, tomlValue(o.value))
		}
	case opTrim:
		if kv == nil {
			return nil
		}
		if kv.valKind != unstable.Array || kv.nested {
			return fmt.Errorf("%q is not a list of strings", o.key)
		}
		if n := o.value.(int); n < len(kv.elems) {
			return d.splice(kv.elems[0], kv.elems[n], "")
		}
		return d.splice(kv.valStart, kv.valEnd, "[]")
	case opPrepend, opAppend:
		if kv != nil {
			if kv.valKind != unstable.Array || kv.nested {
				return fmt.Errorf("%q is not a list of strings", o.key)
			}
			return d.insertElements(kv, o.value.([]string), o.kind == opPrepend)
		}
	case opAddMembers:
		ms := o.value.([]member)
		switch {
		case kv != nil:
			if kv.valKind != unstable.InlineTable {
				return fmt.Errorf("%q is not a table", o.key)
			}
			return d.insertMembers(kv, ms)
		case len(sub) > 0:
			// A sub-table of its own: one line a member after its last.
			at, indent := sub[len(sub)-1].end, sub[len(sub)-1].indent
			var text strings.Builder
			for _, m := range ms {
				text.WriteString(indent + tomlKey(m.key) + " = " + tomlString(m.value) + nl)
			}
			return d.insertLines(at, text.String())
		case len(dotted) > 0:
			last := dotted[len(dotted)-1]
			var text strings.Builder
			for _, m := range ms {
				text.WriteString(last.indent + tomlKey(o.key, m.key) + " = " + tomlString(m.value) + nl)
			}
			return d.insertLines(last.end, text.String())
		}
	}
	if len(dotted) > 0 || len(sub) > 0 {
		return fmt.Errorf("%q is written as a table, which guard does not replace", o.key)
	}
	// A new key-value: next to the one named, else after the entry's
	// last (before its sub-tables), else after its header.
	at, indent := exprs[0].end, ""
	for _, e := range b.exprs {
		if e.table && slices.Equal(e.path, path) {
			at = e.end
		}
	}
	if len(own) > 0 {
		at, indent = own[len(own)-1].end, own[len(own)-1].indent
	}
	for _, e := range own {
		switch {
		case o.before != "" && slices.Equal(e.key, []string{o.before}):
			return d.insertLines(e.start, e.indent+tomlKey(o.key)+" = "+tomlValue(o.value)+nl)
		case o.after != "" && slices.Equal(e.key, []string{o.after}):
			at, indent = e.end, e.indent
		}
	}
	return d.insertLines(at, indent+tomlKey(o.key)+" = "+tomlValue(o.value)+nl)
}

// insertLines puts whole lines at the start of a line (or at the end of
// a file whose last line has no line break).
func (d *tomlDoc) insertLines(at int, text string) error {
	if at == len(d.data) && at > 0 && d.data[at-1] != '\n' {
		nl := d.newline()
		text = nl + strings.TrimSuffix(text, nl)
	}
	return d.splice(at, at, text)
}

// insertElements puts strings at the front or the end of an array,
// spaced as its elements are.
func (d *tomlDoc) insertElements(kv *tomlExpr, vs []string, front bool) error {
	if kv.first < 0 {
		return d.splice(kv.valStart, kv.valEnd, tomlValue(vs))
	}
	enc := make([]string, len(vs))
	for i, v := range vs {
		enc[i] = tomlString(v)
	}
	if front {
		sep := ", "
		// One element a line: the new ones too, at the first's indent.
		if gap := d.data[kv.valStart+1 : kv.first]; bytes.ContainsRune(gap, '\n') {
			sep = "," + d.newline() + string(d.data[d.lineStart(kv.first):kv.first])
		}
		return d.splice(kv.first, kv.first, strings.Join(enc, sep)+sep)
	}
	return d.afterLast(kv, strings.Join(enc, ", "))
}

// insertMembers adds string members at the end of an inline table.
func (d *tomlDoc) insertMembers(kv *tomlExpr, ms []member) error {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = tomlKey(m.key) + " = " + tomlString(m.value)
	}
	if kv.first < 0 {
		return d.splice(kv.valStart, kv.valEnd, "{ "+strings.Join(parts, ", ")+" }")
	}
	return d.afterLast(kv, strings.Join(parts, ", "))
}

// afterLast puts text after the last element of an array or inline
// table, with the comma between them where it belongs.
func (d *tomlDoc) afterLast(kv *tomlExpr, text string) error {
	i := kv.last
	for i < kv.valEnd && (d.data[i] == ' ' || d.data[i] == '\t' || d.data[i] == '\r' || d.data[i] == '\n') {
		i++
	}
	if i < kv.valEnd && d.data[i] == ',' {
		return d.splice(i+1, i+1, " "+text+",")
	}
	return d.splice(kv.last, kv.last, ", "+text)
}

// tomlValue writes a string, a list of strings or a table of strings on
// one line.
func tomlValue(v any) string {
	switch v := v.(type) {
	case string:
		return tomlString(v)
	case []string:
		enc := make([]string, len(v))
		for i, s := range v {
			enc[i] = tomlString(s)
		}
		return "[" + strings.Join(enc, ", ") + "]"
	case []member:
		parts := make([]string, len(v))
		for i, m := range v {
			parts[i] = tomlKey(m.key) + " = " + tomlString(m.value)
		}
		return "{ " + strings.Join(parts, ", ") + " }"
	}
	panic(fmt.Sprintf("clients: no TOML form for %T", v))
}

// tomlString is a TOML basic string.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// tomlKey writes a dotted key, each part bare where TOML allows it.
func tomlKey(parts ...string) string {
	out := make([]string, len(parts))
	for i, p := range parts {
		bare := p != ""
		for _, c := range p {
			if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
				bare = false
			}
		}
		if bare {
			out[i] = p
		} else {
			out[i] = tomlString(p)
		}
	}
	return strings.Join(out, ".")
}
