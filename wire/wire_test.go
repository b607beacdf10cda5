package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
)

func TestParseClassifies(t *testing.T) {
	for _, tc := range []struct {
		raw    string
		kind   Kind
		method string
		id     string
	}{
		{`{"jsonrpc":"2.0","id":1,"method":"ping"}`, KindRequest, "ping", "1"},
		{`{"jsonrpc":"2.0","id":"x","method":"tools\/call","params":{"name":"a"},"extra":{"k":[1,2]}}`, KindRequest, "tools/call", `"x"`},
		{` {"method":"notifications/initialized","jsonrpc":"2.0"} `, KindNotification, "notifications/initialized", ""},
		{`{"jsonrpc":"2.0","id":null,"error":{"code":1,"message":"m"}}`, KindResponse, "", "null"},
		{`{"jsonrpc":"2.0","id":15,"result":{}}`, KindResponse, "", "15"},
		{`[{"jsonrpc":"2.0","id":1,"method":"ping"}]`, KindBatch, "", ""},
	} {
		m, err := Parse([]byte(tc.raw))
		if err != nil {
			t.Errorf("%s: %v", tc.raw, err)
			continue
		}
		if m.Kind != tc.kind || m.Method != tc.method || string(m.ID) != tc.id {
			t.Errorf("%s: got kind %d method %q id %s", tc.raw, m.Kind, m.Method, m.ID)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	for _, tc := range []struct {
		raw   string
		parse bool   // ErrParse rather than InvalidError
		id    string // id recovered for -32600
	}{
		{`{"jsonrpc":"2.0","id":1,"method":`, true, ""},
		{`not json`, true, ""},
		{`"a string"`, false, ""},
		{`{"id":2,"method":"ping"}`, false, "2"},
		{`{"jsonrpc":"1.0","id":"a","method":"ping"}`, false, `"a"`},
		{`{"jsonrpc":"2.0","id":3,"method":"ping","method":"tools/call"}`, false, ""},
		{`{"jsonrpc":"2.0","id":3,"method":"ping","Method":"tools/call"}`, false, ""},
		{`{"jsonrpc":"2.0","ID":3,"method":"ping"}`, false, ""},
		{`{"jsonrpc":"2.0","id":{},"method":"ping"}`, false, ""},
		{`{"jsonrpc":"2.0","id":4,"method":5}`, false, "4"},
		{`{"jsonrpc":"2.0","id":5,"result":1,"error":{}}`, false, "5"},
		{`{"jsonrpc":"2.0","result":1}`, false, ""},
		{`{"jsonrpc":"2.0","id":6}`, false, "6"},
		{`{"jsonrpc":"2.0","id":7,"method":"x","params":3}`, false, "7"},
		{"{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"tools/\xffcall\"}", false, "8"},
		{`{"jsonrpc":"2.0","id":9,"method":"tools/call\udc00"}`, false, "9"},
	} {
		_, err := Parse([]byte(tc.raw))
		var inv *InvalidError
		switch {
		case tc.parse && !errors.Is(err, ErrParse):
			t.Errorf("%s: got %v, want ErrParse", tc.raw, err)
		case !tc.parse && !errors.As(err, &inv):
			t.Errorf("%s: got %v, want InvalidError", tc.raw, err)
		case !tc.parse && string(inv.ID) != tc.id:
			t.Errorf("%s: id %s, want %s", tc.raw, inv.ID, tc.id)
		}
	}
}

func TestStrict(t *testing.T) {
	ok := []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":{"path":"/x","list":[{"a":1},{"a":2}]}}}`,
		`{"a":"\ud83d\ude00"}`,
	}
	for _, s := range ok {
		if err := Strict([]byte(s)); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
	for _, tc := range []struct{ raw, want string }{
		{`{"params":{"arguments":{"path":"a","path":"b"}}}`, `params.arguments: duplicate key "path"`},
		{`{"params":{"arguments":{"path":"a","p\u0061th":"b"}}}`, `params.arguments: duplicate key "path"`},
		{`{"params":{"name":"a","Name":"b"}}`, `params.Name: key differs only in case from "name"`},
		{`{"params":{"arguments":{"x":"` + "\xff" + `"}}}`, `params.arguments.x: invalid UTF-8`},
		{`{"a":["\ud800"]}`, `a[0]: lone surrogate \ud800`},
		{`{"a":"\udc00\ud800"}`, `a: lone surrogate \udc00`},
		{`{"\u212a":1,"k":2}`, "k: key differs only in case from \"\u212a\""},
	} {
		err := Strict([]byte(tc.raw))
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: got %v, want %s", tc.raw, err, tc.want)
		}
	}
}

// A message nested deeper than MaxDepth is refused, and still classified:
// a request is answered with its id, a response still answers its request.
func TestParseRefusesDeepMessages(t *testing.T) {
	nest := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	// The message is the first level, params the second.
	at := func(levels int) string { return `{"a":` + nest(levels-2) + `}` }
	for _, tc := range []struct {
		raw    string
		kind   Kind
		id     string
		method string
	}{
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":` + at(MaxDepth+1) + `}`, KindRequest, "1", "tools/call"},
		{`{"params":` + at(MaxDepth+1) + `,"method":"tools/call","jsonrpc":"2.0","id":"later"}`, KindRequest, `"later"`, "tools/call"},
		{`{"jsonrpc":"2.0","method":"notifications/progress","params":` + at(MaxDepth+1) + `}`, KindNotification, "", "notifications/progress"},
		// The TypeScript SDK writes a result before its id.
		{`{"result":` + at(MaxDepth+1) + `,"jsonrpc":"2.0","id":7}`, KindResponse, "7", ""},
		{`{"jsonrpc":"2.0","id":8,"error":{"code":1,"message":"m","data":` + nest(MaxDepth-1) + `}}`, KindResponse, "8", ""},
		// Deeper than encoding/json reads (10,000): still a depth refusal.
		{`{"jsonrpc":"2.0","id":9,"method":"ping","params":{"a":` + nest(20000) + `}}`, KindRequest, "9", "ping"},
		// An id nested too deep is no id.
		{`{"jsonrpc":"2.0","id":` + nest(MaxDepth) + `,"method":"ping"}`, KindRequest, "", ""},
	} {
		m, err := Parse([]byte(tc.raw))
		var inv *InvalidError
		if !errors.As(err, &inv) {
			t.Errorf("%.60s: got %v, want InvalidError", tc.raw, err)
			continue
		}
		if tc.id == "" && tc.method == "" { // refused for its id
			if inv.ID != nil || inv.Kind != KindRequest {
				t.Errorf("%.60s: id %s kind %d", tc.raw, inv.ID, inv.Kind)
			}
			continue
		}
		if !errors.Is(err, ErrTooDeep) || inv.Kind != tc.kind || string(inv.ID) != tc.id || m.Kind != tc.kind || m.Method != tc.method || string(m.ID) != tc.id {
			t.Errorf("%.60s: %v: kind %d/%d id %s/%s method %q", tc.raw, err, inv.Kind, m.Kind, inv.ID, m.ID, m.Method)
		}
	}
	for _, raw := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":` + at(MaxDepth) + `}`,
		`{"jsonrpc":"2.0","id":1,"result":` + at(MaxDepth) + `}`,
	} {
		if _, err := Parse([]byte(raw)); err != nil {
			t.Errorf("%d levels refused: %v", MaxDepth, err)
		}
	}
	// In a batch, each element is judged alone.
	elem := `{"jsonrpc":"2.0","id":2,"method":"ping","params":` + at(MaxDepth) + `}`
	batch := `[{"jsonrpc":"2.0","id":1,"method":"ping"},` + elem + `]`
	if m, err := Parse([]byte(batch)); err != nil || m.Kind != KindBatch {
		t.Fatalf("batch: %v", err)
	}
	parts, err := SplitBatch([]byte(batch))
	if err != nil || len(parts) != 2 || string(parts[1]) != elem {
		t.Fatalf("split: %v %q", err, parts)
	}
	if _, err := Parse(parts[1]); err != nil {
		t.Fatalf("element: %v", err)
	}
}

// A case variant of a member a tools/call result defines is refused, under
// Unicode simple case folding: encoding/json reads "ſtructuredContent"
// (U+017F) as structuredContent, and a client that does sees what guard's
// checks never did.
func TestStrictResultRefusesCaseVariants(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{`{"content":[],"ſtructuredContent":{"rows":1}}`, `ſtructuredContent: member differs only in case from "structuredContent"`},
		{`{"content":[],"iſError":true}`, `iſError: member differs only in case from "isError"`},
		{`{"content":[],"IsError":true}`, `IsError: member differs only in case from "isError"`},
		{`{"content":[],"_meta":{},"resultType":"complete","requeſtState":"x"}`, `requeſtState: member differs only in case from "requestState"`},
		{`{"content":[],"structuredContent":{},"structuredContent":{}}`, `duplicate key "structuredContent"`},
	} {
		err := StrictResult([]byte(tc.raw), true)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: got %v, want %s", tc.raw, err, tc.want)
		}
	}
	for _, raw := range []string{
		`{"content":[{"type":"text","text":"x"}],"structuredContent":{"iſError":1,"Content":2},"isError":false}`,
		`{"contents":[],"ſtructured":1}`,
	} {
		if err := StrictResult([]byte(raw), true); err != nil {
			t.Errorf("%s: %v", raw, err)
		}
	}
}

// FuzzStrictResult: a tools/call result StrictResult accepts has no
// top-level member that encoding/json's matching (Unicode simple case
// folding, strings.EqualFold) takes for one the protocol defines.
func FuzzStrictResult(f *testing.F) {
	f.Add([]byte(`{"content":[],"isError":true}`))
	f.Add([]byte(`{"content":[],"ſtructuredContent":{}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		var top map[string]json.RawMessage
		if !json.Valid(raw) || json.Unmarshal(raw, &top) != nil || StrictResult(raw, true) != nil {
			return
		}
		for k := range top {
			for _, name := range resultMembers {
				if k != name && strings.EqualFold(k, name) {
					t.Fatalf("%q passed, a case variant of %q", k, name)
				}
			}
		}
	})
}

func TestIDKeyAndReplace(t *testing.T) {
	if IDKey([]byte(`1`)) == IDKey([]byte(`"1"`)) {
		t.Fatal("number and string ids share a key")
	}
	if IDKey([]byte(`1`)) != IDKey([]byte(`1.0`)) || IDKey([]byte(`"a"`)) != IDKey([]byte(`"\u0061"`)) {
		t.Fatal("equal ids have different keys")
	}
	raw := []byte(`{"jsonrpc":"2.0", "id" : 17 ,"method":"ping","x":[1]}`)
	m, err := Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	out := ReplaceID(m, []byte(`"guard-1"`))
	if want := `{"jsonrpc":"2.0", "id" : "guard-1" ,"method":"ping","x":[1]}`; string(out) != want {
		t.Fatalf("got %s", out)
	}
	m2, _ := Parse(out)
	if back := ReplaceID(m2, m.ID); !bytes.Equal(back, raw) {
		t.Fatalf("round trip: %s", back)
	}
}

func TestReaderFramesAndRefusesLongLines(t *testing.T) {
	in := "a\r\n\n  \nbb\n" + strings.Repeat("x", 100) + "\nccc\nlast"
	r := NewReader(strings.NewReader(in), 10)
	var got []string
	for {
		l, err := r.Next()
		var tl *TooLongError
		if errors.As(err, &tl) {
			got = append(got, "TOOLONG")
			continue
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(l))
	}
	if want := "a,bb,TOOLONG,ccc,last"; strings.Join(got, ",") != want {
		t.Fatalf("got %v, want %s", got, want)
	}
}

// endless produces n bytes of 'x' and then a newline, without holding them.
type endless struct{ n int }

func (e *endless) Read(p []byte) (int, error) {
	if e.n < 0 {
		return 0, io.EOF
	}
	k := 0
	for k < len(p) && e.n > 0 {
		p[k] = 'x'
		k++
		e.n--
	}
	if k < len(p) && e.n == 0 {
		p[k] = '\n'
		k++
		e.n = -1
	}
	return k, nil
}

func TestReaderMemoryIsBounded(t *testing.T) {
	r := NewReader(io.MultiReader(&endless{n: 200 << 20}, strings.NewReader("{}\n")), 1<<20)
	_, err := r.Next()
	var tl *TooLongError
	if !errors.As(err, &tl) || tl.Size < 200<<20 {
		t.Fatalf("got %v", err)
	}
	if cap(r.buf) > 2<<20 {
		t.Fatalf("the reader buffered %d bytes for a refused line", cap(r.buf))
	}
	l, err := r.Next()
	if err != nil || string(l) != "{}" {
		t.Fatalf("after a long line: %q %v", l, err)
	}
}

func TestMembers(t *testing.T) {
	p := []byte(`{"name":"x","_meta":{"progressToken":7,"io.modelcontextprotocol/protocolVersion":"2026-07-28"},"arguments":{}}`)
	if v := MetaMember(p, "progressToken"); string(v) != "7" {
		t.Fatalf("progressToken %s", v)
	}
	if v, _ := String(MetaMember(p, "io.modelcontextprotocol/protocolVersion")); v != "2026-07-28" {
		t.Fatalf("protocolVersion %q", v)
	}
	if ParamsMember(p, "missing") != nil {
		t.Fatal("a missing member was found")
	}
}

// Members finds in one pass what ParamsMember finds member by member: the
// first of a name given twice, nothing past a malformed member.
func TestMembersInOnePass(t *testing.T) {
	keys := []string{"arguments", "missing", "name", "_meta", "x"}
	for _, obj := range []string{
		`{"name":"x","_meta":{"a":1},"arguments":{"b":[1,"}"]},"name":"y"}`,
		` { "x" : null , "name" : "a\"b" } `,
		`{"name":1,"arguments":2,bad}`,
		`{"n\u0061me":"escaped","x":[]}`,
		`[1,2]`,
		``,
	} {
		vals := make([][]byte, len(keys))
		vals[1] = []byte("stale")
		Members([]byte(obj), keys, vals)
		for i, k := range keys {
			if want := ParamsMember([]byte(obj), k); string(vals[i]) != string(want) || (vals[i] == nil) != (want == nil) {
				t.Errorf("%s: %s = %q, ParamsMember finds %q", obj, k, vals[i], want)
			}
		}
	}
}

func FuzzReader(f *testing.F) {
	f.Add([]byte("a\nbb\r\n\nccc"), 2)
	f.Fuzz(func(t *testing.T, in []byte, max int) {
		if max < 1 || max > 1<<16 {
			return
		}
		r := NewReader(bytes.NewReader(in), max)
		total := 0
		for {
			l, err := r.Next()
			var tl *TooLongError
			if errors.As(err, &tl) {
				if tl.Size <= int64(max) {
					t.Fatalf("a line of %d bytes refused with max %d", tl.Size, max)
				}
				total += int(tl.Size)
				continue
			}
			if err != nil {
				break
			}
			if len(l) > max {
				t.Fatalf("a line of %d bytes returned with max %d", len(l), max)
			}
			if bytes.IndexByte(l, '\n') >= 0 {
				t.Fatal("a returned line holds a newline")
			}
			total += len(l)
		}
		if total > len(in) {
			t.Fatalf("accounted for %d bytes of %d", total, len(in))
		}
	})
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a"}}`))
	f.Add([]byte(`[{"jsonrpc":"2.0","id":1,"method":"ping"}]`))
	f.Add([]byte(`{"jsonrpc":"2.0","id":"\u0061","result":{}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		m, err := Parse(raw)
		if !json.Valid(raw) {
			// Past MaxDepth a text is refused for its depth, not read.
			if !errors.Is(err, ErrParse) && !errors.Is(err, ErrTooDeep) {
				t.Fatalf("invalid JSON accepted: %v", err)
			}
			return
		}
		if err != nil {
			return
		}
		if m.Kind != KindBatch && nesting(raw) > MaxDepth {
			t.Fatalf("a message nested %d levels deep accepted", nesting(raw))
		}
		if m.Kind == KindBatch {
			return
		}
		var v map[string]any
		if json.Unmarshal(raw, &v) != nil {
			t.Fatal("accepted message does not decode")
		}
		if m.Kind == KindRequest || m.Kind == KindNotification {
			// A case-insensitive decoder reads the same method.
			var d struct{ Method string }
			if json.Unmarshal(raw, &d) == nil && d.Method != m.Method {
				t.Fatalf("method %q read as %q by encoding/json", m.Method, d.Method)
			}
		}
		if m.ID != nil {
			out := ReplaceID(m, []byte(`"z"`))
			m2, err := Parse(out)
			if err != nil {
				t.Fatalf("replaced id broke the message: %v", err)
			}
			if !bytes.Equal(ReplaceID(m2, m.ID), raw) {
				t.Fatal("id round trip changed the message")
			}
		}
	})
}

func FuzzStrict(f *testing.F) {
	f.Add([]byte(`{"a":{"b":1,"B":2}}`))
	f.Add([]byte(`{"a":[{"x":"\ud800"}]}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) {
			return
		}
		if Strict(raw) != nil {
			return
		}
		// Accepted: encoding/json reads the same members as a
		// case-sensitive reader, so both see the same object.
		d := json.NewDecoder(bytes.NewReader(raw))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			t.Fatalf("strict-accepted text does not decode: %v", err)
		}
		// No member was dropped: a decoder that keeps the last of
		// duplicates would show fewer members than the text has.
		if n, m := countMembers(raw), countDecoded(v); n != m {
			t.Fatalf("%d members in the text, %d decoded", n, m)
		}
	})
}

// countMembers counts the members of every object in a JSON text: the
// colons outside strings.
func countMembers(raw []byte) int {
	n := 0
	for i := 0; i < len(raw); i++ {
		switch raw[i] {
		case '"':
			i = skipString(raw, i) - 1
		case ':':
			n++
		}
	}
	return n
}

func countDecoded(v any) int {
	switch x := v.(type) {
	case map[string]any:
		n := len(x)
		for _, e := range x {
			n += countDecoded(e)
		}
		return n
	case []any:
		n := 0
		for _, e := range x {
			n += countDecoded(e)
		}
		return n
	}
	return 0
}

func BenchmarkParse(b *testing.B) {
	raw := []byte(`{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"write_file","arguments":{"path":"/home/me/projects/notes/todo.md","content":"buy milk and eggs, call the bank, finish the report for monday"},"_meta":{"progressToken":"p-42"}}}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(raw); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkStrict(b *testing.B) {
	raw := []byte(`{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"write_file","arguments":{"path":"/home/me/projects/notes/todo.md","content":"buy milk and eggs, call the bank, finish the report for monday"},"_meta":{"progressToken":"p-42"}}}`)
	b.ReportAllocs()
	for b.Loop() {
		if err := Strict(raw); err != nil {
			b.Fatal(err)
		}
	}
}

// benchResult is a tools/call result as a server sends it: content and
// structured content, a few levels deep.
var benchResult = []byte(`{"jsonrpc":"2.0","id":42,"result":{"content":[{"type":"text","text":"[{\"name\":\"todo.md\",\"size\":2048},{\"name\":\"report.docx\",\"size\":91234}]"}],"structuredContent":{"files":[{"name":"todo.md","size":2048,"tags":["notes","home"]},{"name":"report.docx","size":91234,"tags":["work"]}],"total":2},"isError":false}}`)

func BenchmarkParseResult(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(benchResult); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkStrictResult(b *testing.B) {
	m, err := Parse(benchResult)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := StrictResult(m.Result, true); err != nil {
			b.Fatal(err)
		}
	}
}

func TestRebuildAndSetMember(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a__b"},"x":true}`,
			`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"b"},"x":true}`},
		{`{"params":{"name":"a__b"} , "method":"tools/call","id":"s","jsonrpc":"2.0"}`,
			`{"params":{"name":"b"} , "method":"tools/call","id":9,"jsonrpc":"2.0"}`},
	} {
		m, err := Parse([]byte(tc.raw))
		if err != nil {
			t.Fatal(err)
		}
		got := Rebuild(m, []byte(`9`), SetMember(m.Params, "name", []byte(`"b"`)))
		if string(got) != tc.want {
			t.Errorf("Rebuild(%s) = %s, want %s", tc.raw, got, tc.want)
		}
	}
	m, _ := Parse([]byte(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	if got := Rebuild(m, nil, []byte(`{}`)); string(got) != string(m.Raw) {
		t.Errorf("params added to a message without them: %s", got)
	}
	for _, tc := range []struct{ obj, key, value, want string }{
		{`{}`, "cursor", `"c"`, `{"cursor":"c"}`},
		{` { "a" : 1 }`, "cursor", `"c"`, ` {"a":1,"cursor":"c"}`},
		{`{"cursor":"x","b":[1,{"cursor":2}]}`, "cursor", `"c"`, `{"cursor":"c","b":[1,{"cursor":2}]}`},
	} {
		if got := SetMember([]byte(tc.obj), tc.key, []byte(tc.value)); string(got) != tc.want {
			t.Errorf("SetMember(%s) = %s, want %s", tc.obj, got, tc.want)
		}
	}
}

// SetMember on any object gives valid JSON whose member is the value
// given, with every other member kept.
func FuzzSetMember(f *testing.F) {
	for _, s := range []string{`{}`, `{"name":"a","x":[1,{"name":2}]}`, ` { "a" : "\u0061" , "name" : null } `, `{"name":1,"name":2}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, obj string) {
		var before map[string]json.RawMessage
		if json.Unmarshal([]byte(obj), &before) != nil || before == nil {
			return
		}
		out := SetMember([]byte(obj), "name", []byte(`"z"`))
		var after map[string]json.RawMessage
		if err := json.Unmarshal(out, &after); err != nil {
			t.Fatalf("SetMember(%s) = %s: %v", obj, out, err)
		}
		if v := after["name"]; string(v) != `"z"` {
			t.Fatalf("SetMember(%s) = %s: name is %s", obj, out, v)
		}
		for k := range before {
			if _, ok := after[k]; !ok {
				t.Fatalf("SetMember(%s) = %s: %q lost", obj, out, k)
			}
		}
	})
}

func TestCheckID(t *testing.T) {
	for _, ok := range []string{`1`, `0`, `-1`, `9007199254740991`, `-9007199254740991`, `"a"`, `""`, `"1e400"`} {
		if err := CheckID([]byte(ok)); err != nil {
			t.Errorf("%s refused: %v", ok, err)
		}
	}
	for _, bad := range []string{`9007199254740992`, `-9007199254740992`, `123456789012345678901234567890`,
		`1e400`, `1.5`, `1e3`, `1.0`, `-0`, `true`, `false`, `null`, `{}`, `[]`, `[1]`, "\"\xff\"", `"\ud800"`} {
		if err := CheckID([]byte(bad)); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

func TestParseRefusesIDsNoPeerReadsAlike(t *testing.T) {
	for _, tc := range []struct {
		line string
		kind Kind
	}{
		{`{"jsonrpc":"2.0","id":1e400,"method":"ping"}`, KindRequest},
		{`{"jsonrpc":"2.0","id":null,"method":"ping"}`, KindRequest},
		{`{"jsonrpc":"2.0","id":true,"method":"ping"}`, KindRequest},
		{`{"jsonrpc":"2.0","id":1.5,"result":{}}`, KindResponse},
		{`{"jsonrpc":"2.0","id":[1],"error":{"code":1,"message":"x"}}`, KindResponse},
	} {
		_, err := Parse([]byte(tc.line))
		var inv *InvalidError
		if !errors.As(err, &inv) || inv.Kind != tc.kind || inv.ID != nil {
			t.Errorf("%s: %#v", tc.line, err)
		}
	}
	// An error response with id null answers a message its sender could
	// not read: it stays a response (that matches nothing).
	if m, err := Parse([]byte(`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}`)); err != nil || m.Kind != KindResponse {
		t.Errorf("id null error response: %v %v", m.Kind, err)
	}
}

func TestWithIDIsWhatParseReads(t *testing.T) {
	msgs := []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":{}}}`,
		`{"params":{"x":[1,2]},"method":"m","id":"abc","jsonrpc":"2.0"}`,
		`{"jsonrpc":"2.0","result":{"content":[]},"id":12345}`,
		`{"id":"x","jsonrpc":"2.0","error":{"code":-32601,"message":"no"}}`,
		`{ "jsonrpc" : "2.0" , "id" : 7 , "result" : null }`,
	}
	for _, raw := range msgs {
		for _, id := range []string{`"guard-1"`, `9`, `"a much longer identifier than before"`} {
			m, err := Parse([]byte(raw))
			if err != nil {
				t.Fatal(err)
			}
			got := WithID(m, []byte(id))
			want, err := Parse(ReplaceID(m, []byte(id)))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("WithID(%s, %s):\n got %+v\nwant %+v", raw, id, got, want)
			}
			// Rewritten again, as a message renamed twice would be.
			again := WithID(got, []byte(`"x"`))
			want, err = Parse(ReplaceID(want, []byte(`"x"`)))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(again, want) {
				t.Errorf("WithID twice (%s, %s):\n got %+v\nwant %+v", raw, id, again, want)
			}
		}
	}
}

func TestStringIs(t *testing.T) {
	for _, tc := range []struct {
		raw, s string
		want   bool
	}{
		{`"input_required"`, "input_required", true},
		{`"input\u005frequired"`, "input_required", true},
		{`"input_required"`, "input", false},
		{`"a\\b"`, `a\b`, true},
		{`"a\\b"`, `a\\b`, false},
		{`5`, "5", false},
		{``, "", false},
		{`""`, "", true},
	} {
		v, ok := String([]byte(tc.raw))
		if got := StringIs([]byte(tc.raw), tc.s); got != tc.want || got != (ok && v == tc.s) {
			t.Errorf("StringIs(%s, %q) = %v, want %v", tc.raw, tc.s, got, tc.want)
		}
	}
}

// A tool listing whose definitions or annotations carry a case variant of
// a member guard pins and decides by is refused; one inside a schema is not.
func TestStrictListing(t *testing.T) {
	for raw, bad := range map[string]bool{
		`{"tools":[{"name":"a","inputSchema":{"type":"object","properties":{"id":{},"ID":{}}},"annotations":{"readOnlyHint":true}}]}`: false,
		`{"tools":[{"name":"a","annotations":{"readOnlyHint":false,"ReadOnlyHint":true}}]}`:                                           true,
		`{"tools":[{"name":"a"},{"name":"b","Name":"delete_all"}]}`:                                                                   true,
		`{"tools":[{"name":"a","deſcription":"hidden"}]}`:                                                                             true,
		`{"tools":[{"name":"a","name":"b"}]}`:                                                                                         true,
		`{"tools":[]}`:                                                                                                                false,
	} {
		if err := StrictListing([]byte(raw)); (err != nil) != bad {
			t.Errorf("%s: %v", raw, err)
		}
	}
}

func TestWithParamsIsWhatParseReads(t *testing.T) {
	msgs := []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a__b","arguments":{}}}`,
		`{"params":{"x":[1,2]},"method":"m","id":"abc","jsonrpc":"2.0"}`,
		`{ "jsonrpc" : "2.0" , "method" : "n" , "params" : { } }`,
	}
	for _, raw := range msgs {
		for _, params := range []string{`{}`, `{"name":"b","arguments":{"a much longer":"value than before"}}`} {
			m, err := Parse([]byte(raw))
			if err != nil {
				t.Fatal(err)
			}
			got := WithParams(m, []byte(params))
			want, err := Parse(Rebuild(m, nil, []byte(params)))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("WithParams(%s, %s):\n got %+v\nwant %+v", raw, params, got, want)
			}
			if want.ID != nil {
				again := WithID(got, []byte(`"x"`))
				if want, _ = Parse(ReplaceID(want, []byte(`"x"`))); !reflect.DeepEqual(again, want) {
					t.Errorf("WithID after WithParams (%s, %s):\n got %+v\nwant %+v", raw, params, again, want)
				}
			}
		}
	}
}

// A line longer than the reader's buffer is read whole, whatever falls at
// the buffer's edges (here the \r of a \r\n), by Next (which reuses its
// buffer) and NextOwned (which hands it over), and as the final line
// without a newline.
func TestReaderLongLines(t *testing.T) {
	long := func(n int, c byte) string { return strings.Repeat(string(c), n) }
	a, b, c := long(64<<10-1, 'a'), long(200<<10, 'b'), long(130<<10, 'c')
	in := a + "\r\n" + b + "\nshort\n" + b + "\n" + c
	for _, owned := range []bool{false, true} {
		r := NewReader(strings.NewReader(in), 1<<20)
		var got []string
		for {
			next := r.Next
			if owned {
				next = r.NextOwned
			}
			l, err := next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, string(l))
		}
		want := []string{a, b, "short", b, c}
		if len(got) != len(want) {
			t.Fatalf("owned %v: %d lines, want %d", owned, len(got), len(want))
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("owned %v: line %d: %d bytes, want %d", owned, i, len(got[i]), len(want[i]))
			}
		}
	}
}

// BenchmarkReaderLongLine reads a line of 10 MiB, a large tool result:
// its allocations are what the line costs in memory.
func BenchmarkReaderLongLine(b *testing.B) {
	line := strings.Repeat("x", 10<<20) + "\n"
	b.SetBytes(int64(len(line)))
	b.ReportAllocs()
	for b.Loop() {
		r := NewReader(strings.NewReader(line), 64<<20)
		if l, err := r.NextOwned(); err != nil || len(l) != 10<<20 {
			b.Fatal(len(l), err)
		}
	}
}
