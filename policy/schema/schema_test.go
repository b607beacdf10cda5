package schema

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

const (
	draft04   = `"$schema":"http://json-schema.org/draft-04/schema#"`
	draft06   = `"$schema":"http://json-schema.org/draft-06/schema#"`
	draft07   = `"$schema":"http://json-schema.org/draft-07/schema#"`
	draft2019 = `"$schema":"https://json-schema.org/draft/2019-09/schema"`
	draft2020 = `"$schema":"https://json-schema.org/draft/2020-12/schema"`
)

type check struct {
	instance string
	want     []Violation // nil: valid
}

func v(path, msg string) Violation { return Violation{Path: path, Message: msg} }

func compile(t testing.TB, raw string, opts ...Option) *Schema {
	t.Helper()
	s, err := NewCache(opts...).Compile("sha256:test", []byte(raw))
	if err != nil {
		t.Fatalf("Compile(%s): %v", raw, err)
	}
	return s
}

func runChecks(t *testing.T, s *Schema, checks []check) {
	t.Helper()
	for _, c := range checks {
		got := s.Validate([]byte(c.instance))
		if !slices.Equal(got, c.want) {
			t.Errorf("Validate(%s)\n got %q\nwant %q", c.instance, got, c.want)
		}
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		schema string
		checks []check
	}{
		{
			name: "draft-04 definitions and $ref",
			schema: `{` + draft04 + `,
				"definitions":{"mode":{"type":"string","enum":["r","w"]}},
				"type":"object",
				"properties":{"mode":{"$ref":"#/definitions/mode"},"n":{"type":"integer","maximum":5,"exclusiveMaximum":true}},
				"required":["mode"]}`,
			checks: []check{
				{`{"mode":"r","n":4}`, nil},
				{`{"mode":"x"}`, []Violation{v("/mode", `value must be one of "r", "w"`)}},
				{`{"mode":1}`, []Violation{v("/mode", "expected string, got number")}}, // type errors stop at the first
				{`{"mode":"w","n":5}`, []Violation{v("/n", "must be < 5")}},
				{`{}`, []Violation{v("", `missing property "mode"`)}},
			},
		},
		{
			name: "draft-06 const, propertyNames, numeric exclusiveMinimum",
			schema: `{` + draft06 + `,
				"propertyNames":{"pattern":"^[a-z]+$"},
				"properties":{"kind":{"const":"file"},"size":{"exclusiveMinimum":0}}}`,
			checks: []check{
				{`{"kind":"file","size":1}`, nil},
				{`{"kind":"dir","size":0}`, []Violation{v("/kind", `value must be "file"`), v("/size", "must be > 0")}},
				{`{"Bad":1}`, []Violation{v("", `property name "Bad" is not allowed`)}},
			},
		},
		{
			name: "draft-07 if/then/else",
			schema: `{` + draft07 + `,
				"if":{"properties":{"op":{"const":"write"}}},
				"then":{"required":["content"]},
				"else":{"not":{"required":["content"]}}}`,
			checks: []check{
				{`{"op":"write","content":"x"}`, nil},
				{`{"op":"read"}`, nil},
				{`{"op":"write"}`, []Violation{v("", `missing property "content"`)}},
				{`{"op":"read","content":"x"}`, []Violation{v("", `must not match the "not" schema`)}},
			},
		},
		{
			name: "2019-09 $defs, dependentRequired, array items",
			schema: `{` + draft2019 + `,
				"$defs":{"port":{"type":"integer","minimum":1,"maximum":65535}},
				"type":"object",
				"properties":{"ports":{"type":"array","items":{"$ref":"#/$defs/port"}},"user":{},"password":{}},
				"dependentRequired":{"password":["user"]}}`,
			checks: []check{
				{`{"ports":[22,443],"user":"u","password":"p"}`, nil},
				{`{"ports":[22,0,70000,"x"]}`, []Violation{
					v("/ports/1", "must be >= 1"),
					v("/ports/2", "must be <= 65535"),
					v("/ports/3", "expected integer, got string"),
				}},
				{`{"password":"p"}`, []Violation{v("", `properties "user" are required when "password" is present`)}},
			},
		},
		{
			name: "2020-12 $defs, $ref, prefixItems, items false",
			schema: `{` + draft2020 + `,
				"$defs":{"point":{"type":"array","prefixItems":[{"type":"number"},{"type":"number"}],"items":false}},
				"type":"object",
				"properties":{"from":{"$ref":"#/$defs/point"},"to":{"$ref":"#/$defs/point"}},
				"required":["from","to"]}`,
			checks: []check{
				{`{"from":[0,0],"to":[1.5,-2]}`, nil},
				{`{"from":[0,"a"],"to":[1,2,3]}`, []Violation{
					v("/from/1", "expected number, got string"),
					v("/to/2", "no value is allowed here"),
				}},
				{`{}`, []Violation{v("", `missing property "from"`), v("", `missing property "to"`)}},
			},
		},
		{
			name:   "no $schema means 2020-12",
			schema: `{"prefixItems":[{"type":"string"}]}`,
			checks: []check{
				{`["a",1]`, nil},
				{`[1]`, []Violation{v("/0", "expected string, got number")}},
			},
		},
		{
			name:   "draft-07 ignores prefixItems",
			schema: `{` + draft07 + `,"prefixItems":[{"type":"string"}]}`,
			checks: []check{{`[1]`, nil}},
		},
		{
			name:   "oneOf",
			schema: `{"oneOf":[{"type":"string"},{"type":"integer"},{"type":"number","minimum":10}]}`,
			checks: []check{
				{`"a"`, nil},
				{`3`, nil},
				{`10.5`, nil},
				{`12`, []Violation{v("", "matches more than one oneOf alternative (1 and 2)")}},
				{`true`, []Violation{
					v("", "expected integer, got boolean"),
					v("", "expected number, got boolean"),
					v("", "expected string, got boolean"),
				}},
			},
		},
		{
			name:   "anyOf",
			schema: `{"anyOf":[{"type":"string","maxLength":3},{"type":"null"}]}`,
			checks: []check{
				{`"abc"`, nil},
				{`null`, nil},
				{`"abcd"`, []Violation{v("", "expected null, got string"), v("", "must be at most 3 characters long, got 4")}},
			},
		},
		{
			name: "patternProperties and additionalProperties false",
			schema: `{"type":"object",
				"properties":{"path":{"type":"string"}},
				"patternProperties":{"^x-":{"type":"boolean"}},
				"additionalProperties":false}`,
			checks: []check{
				{`{"path":"/tmp","x-debug":true}`, nil},
				{`{"path":"/tmp","x-debug":"yes"}`, []Violation{v("/x-debug", "expected boolean, got string")}},
				{`{"path":"/tmp","mode":1,"zz":2}`, []Violation{
					v("", `additional property "mode" is not allowed`),
					v("", `additional property "zz" is not allowed`),
				}},
			},
		},
		{
			name: "several violations at once, nested arrays, escaped pointers",
			schema: `{"type":"object",
				"properties":{
					"path":{"type":"string"},
					"mode":{"enum":["read","write"]},
					"a/b":{"type":"string"},
					"m~n":{"type":"string"},
					"items":{"type":"array","items":{"type":"object","required":["name"],
						"properties":{"name":{"type":"string"},"tags":{"type":"array","items":{"type":"array","items":{"type":"string"}}}}}}},
				"required":["path","mode"]}`,
			checks: []check{
				{`{"path":"p","mode":"read","items":[{"name":"a","tags":[["x"],[]]}]}`, nil},
				{`{"path":1,"a/b":2,"m~n":3,"items":[{"name":"a"},{"tags":[["x",4]]}]}`, []Violation{
					v("", `missing property "mode"`),
					v("/a~1b", "expected string, got number"),
					v("/items/1", `missing property "name"`),
					v("/items/1/tags/0/1", "expected string, got number"),
					v("/m~0n", "expected string, got number"),
					v("/path", "expected string, got number"),
				}},
			},
		},
		{
			name:   "formats are not asserted",
			schema: `{"properties":{"to":{"type":"string","format":"email"}}}`,
			checks: []check{{`{"to":"not-an-email"}`, nil}},
		},
		{
			name:   "draft-07 formats are not asserted either",
			schema: `{` + draft07 + `,"properties":{"to":{"type":"string","format":"email"}}}`,
			checks: []check{{`{"to":"not-an-email"}`, nil}},
		},
		{
			name:   "draft-04 formats are not asserted either",
			schema: `{` + draft04 + `,"properties":{"at":{"type":"string","format":"date-time"}}}`,
			checks: []check{{`{"at":"yesterday"}`, nil}},
		},
		{
			name: "counts, uniqueness, multiples",
			schema: `{"type":"object","minProperties":1,"maxProperties":4,"properties":{
				"list":{"type":"array","minItems":2,"maxItems":3,"uniqueItems":true,"contains":{"const":0}},
				"step":{"multipleOf":0.5},
				"name":{"minLength":2},
				"no":{"not":{"type":"string"}}}}`,
			checks: []check{
				{`{"list":[0,1],"step":1.5,"name":"ab","no":1}`, nil},
				{`{}`, []Violation{v("", "must have at least 1 properties, got 0")}},
				{`{"list":[1,1,2,3],"step":0.3,"name":"a"}`, []Violation{
					v("/list", "items 0 and 1 are equal; items must be unique"),
					v("/list", "must have at most 3 items, got 4"),
					v("/list", `no item matches the "contains" schema`),
					v("/name", "must be at least 2 characters long, got 1"),
					v("/step", "must be a multiple of 0.5"),
				}},
				{`{"list":[0],"no":"s","a":1,"b":2,"c":3}`, []Violation{
					v("", "must have at most 4 properties, got 5"),
					v("/list", "must have at least 2 items, got 1"),
					v("/no", `must not match the "not" schema`),
				}},
			},
		},
		{
			name:   "2020-12 minContains and maxContains",
			schema: `{"contains":{"type":"string"},"minContains":2,"maxContains":3}`,
			checks: []check{
				{`["a",1,"b"]`, nil},
				{`["a",1]`, []Violation{v("", `must have at least 2 items matching the "contains" schema, got 1`)}},
				{`["a","b","c","d"]`, []Violation{v("", `must have at most 3 items matching the "contains" schema, got 4`)}},
			},
		},
		{
			name:   "exact numbers",
			schema: `{"type":"integer","maximum":9007199254740993}`,
			checks: []check{
				{`9007199254740993`, nil},
				{`9007199254740994`, []Violation{v("", "must be <= 9007199254740993")}},
				{`1.0000000000000000001`, []Violation{v("", "expected integer, got number")}},
			},
		},
		{
			name:   "empty schema",
			schema: ``,
			checks: []check{{`{"anything":[1,"x"]}`, nil}, {`null`, nil}},
		},
		{
			name:   "{} schema",
			schema: `{}`,
			checks: []check{{`{"anything":[1,"x"]}`, nil}, {`"s"`, nil}},
		},
		{
			name:   "true schema",
			schema: `true`,
			checks: []check{{`{"a":1}`, nil}},
		},
		{
			name:   "false schema",
			schema: `false`,
			checks: []check{{`{}`, []Violation{v("", "no value is allowed here")}}},
		},
		{
			name:   "instance not JSON",
			schema: `{"type":"object"}`,
			checks: []check{
				{`{"a":`, []Violation{v("", "not JSON: unexpected end of JSON")}},
				{``, []Violation{v("", "not JSON: unexpected end of JSON")}},
				{`{} {}`, []Violation{v("", "not JSON: invalid character '{' after the value at offset 3")}},
			},
		},
		{
			name:   "empty schema still wants JSON",
			schema: ``,
			checks: []check{{`nope`, []Violation{v("", "not JSON: invalid literal at offset 0")}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runChecks(t, compile(t, tt.schema), tt.checks)
		})
	}
}

func TestValidateDoesNotEchoValues(t *testing.T) {
	s := compile(t, `{"properties":{
		"a":{"pattern":"^x"},"b":{"enum":["x","y"]},"c":{"const":"x"},"d":{"format":"email"}}}`, AssertFormats())
	vs := s.Validate([]byte(`{"a":"SECRET","b":"SECRET","c":"SECRET","d":"SECRET"}`))
	if len(vs) != 4 {
		t.Fatalf("got %q, want 4 violations", vs)
	}
	if sum := Summary(vs); strings.Contains(sum, "SECRET") {
		t.Errorf("violations repeat the value: %s", sum)
	}
}

func TestAssertFormats(t *testing.T) {
	for _, dialect := range []string{draft04, draft07, draft2019, draft2020} {
		s := compile(t, `{`+dialect+`,"properties":{"to":{"type":"string","format":"email"}}}`, AssertFormats())
		runChecks(t, s, []check{
			{`{"to":"a@example.com"}`, nil},
			{`{"to":"not-an-email"}`, []Violation{v("/to", "not a valid email")}},
		})
	}
}

func TestCompileErrors(t *testing.T) {
	tests := []struct {
		name, schema, want string
	}{
		{"not JSON", `{"type":`, "not JSON"},
		{"bad keyword value", `{"type":5}`, "compile"},
		{"draft-04 keyword in 2020-12", `{"maximum":5,"exclusiveMaximum":true}`, "compile"},
		{"dangling internal ref", `{"$ref":"#/$defs/missing"}`, "compile"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := NewCache().Compile("sha256:bad", []byte(tt.schema))
			if err == nil || s != nil {
				t.Fatalf("Compile(%s) = %v, %v; want an error", tt.schema, s, err)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "sha256:bad") {
				t.Errorf("error %q does not contain %q and the key", err, tt.want)
			}
		})
	}
}

func TestExternalReferencesRefused(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "application/schema+json")
		fmt.Fprint(w, `{"type":"string"}`)
	}))
	defer srv.Close()

	// A readable, valid schema on disk: the library's default loader would
	// compile a reference to it.
	local := filepath.Join(t.TempDir(), "s.json")
	if err := os.WriteFile(local, []byte(`{"type":"string"}`), 0o600); err != nil {
		t.Fatal(err)
	}

	tests := []struct{ name, schema string }{
		{"https", `{"$ref":"https://example.com/s.json"}`},
		{"file /etc/passwd", `{"$ref":"file:///etc/passwd"}`},
		{"file with a valid schema", `{"$ref":"file://` + filepath.ToSlash(local) + `"}`},
		{"local test server", `{"properties":{"a":{"$ref":"` + srv.URL + `/s.json"}}}`},
		{"local test server from draft-04", `{` + draft04 + `,"definitions":{"a":{"$ref":"` + srv.URL + `/s.json#"}},"$ref":"#/definitions/a"}`},
		{"relative to $id", `{"$id":"` + srv.URL + `/root.json","$ref":"other.json"}`},
		{"relative to the default base", `{"$ref":"other.json"}`},
		{"custom metaschema", `{"$schema":"` + srv.URL + `/meta.json"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := NewCache().Compile("sha256:ext", []byte(tt.schema))
			if err == nil {
				t.Fatalf("Compile(%s) succeeded (%v), want an error", tt.schema, s)
			}
			if !strings.Contains(err.Error(), "refuses to load external reference") {
				t.Errorf("error %q does not say the reference was refused", err)
			}
		})
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("test server got %d requests, want 0", n)
	}
}

func TestSelfReferencesWithID(t *testing.T) {
	// A ref that resolves, through $id, back into the same document is not external.
	s := compile(t, `{"$id":"https://example.com/root.json",
		"$defs":{"name":{"type":"string"}},
		"properties":{"a":{"$ref":"https://example.com/root.json#/$defs/name"},"b":{"$ref":"#/$defs/name"}}}`)
	runChecks(t, s, []check{
		{`{"a":"x","b":"y"}`, nil},
		{`{"a":1,"b":2}`, []Violation{v("/a", "expected string, got number"), v("/b", "expected string, got number")}},
	})
}

func TestCache(t *testing.T) {
	c := NewCache()
	s1, err := c.Compile("sha256:a", []byte(`{"type":"string"}`))
	if err != nil {
		t.Fatal(err)
	}
	// Same key: the first schema, even though the text differs.
	s2, err := c.Compile("sha256:a", []byte(`{"type":"number"}`))
	if err != nil {
		t.Fatal(err)
	}
	if s1 != s2 {
		t.Errorf("same key compiled twice: %p != %p", s1, s2)
	}
	if vs := s2.Validate([]byte(`1`)); len(vs) != 1 {
		t.Errorf("cached schema for sha256:a: Validate(1) = %q, want the string schema's violation", vs)
	}
	s3, err := c.Compile("sha256:b", []byte(`{"type":"number"}`))
	if err != nil {
		t.Fatal(err)
	}
	if s3 == s1 || len(s3.Validate([]byte(`1`))) != 0 {
		t.Errorf("different key did not get its own schema")
	}

	// Compile errors are cached: a later good text for the key is not compiled.
	_, err1 := c.Compile("sha256:bad", []byte(`{"type":5}`))
	s4, err2 := c.Compile("sha256:bad", []byte(`{"type":"string"}`))
	if err1 == nil || err2 != err1 || s4 != nil {
		t.Errorf("compile error not cached: %v, then %v, %v", err1, s4, err2)
	}
}

func TestConcurrent(t *testing.T) {
	c := NewCache()
	raw := []byte(`{"type":"object","properties":{"n":{"type":"integer"},"s":{"type":"string"}},"required":["n"]}`)
	const workers = 32
	schemas := make([]*Schema, workers)
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			s, err := c.Compile("sha256:shared", raw)
			if err != nil {
				t.Error(err)
				return
			}
			schemas[i] = s
			for j := range 200 {
				ok := fmt.Appendf(nil, `{"n":%d,"s":"x"}`, j)
				if vs := s.Validate(ok); len(vs) != 0 {
					t.Errorf("Validate(%s) = %q", ok, vs)
					return
				}
				bad := fmt.Appendf(nil, `{"s":%d}`, j)
				want := `/: missing property "n"; /s: expected string, got number`
				if got := Summary(s.Validate(bad)); got != want {
					t.Errorf("Validate(%s) = %s, want %s", bad, got, want)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, s := range schemas {
		if s != schemas[0] {
			t.Fatal("concurrent Compile of one key gave different schemas")
		}
	}
}

func TestSummaryAndString(t *testing.T) {
	vs := []Violation{
		v("/mode", "value must be one of \"r\", \"w\""),
		v("/path", "expected string, got number"),
		v("", `missing property "x"`),
		v("/mode", "expected string, got number"),
	}
	orig := slices.Clone(vs)
	want := `/: missing property "x"; /mode: expected string, got number; /mode: value must be one of "r", "w"; /path: expected string, got number`
	if got := Summary(vs); got != want {
		t.Errorf("Summary = %s\nwant %s", got, want)
	}
	if !slices.Equal(vs, orig) {
		t.Errorf("Summary reordered its argument: %q", vs)
	}
	if got := Summary(nil); got != "" {
		t.Errorf("Summary(nil) = %q", got)
	}
	if got := v("", "x").String(); got != "/: x" {
		t.Errorf("root String = %q", got)
	}
	if got := v("/a/0", "x").String(); got != "/a/0: x" {
		t.Errorf("String = %q", got)
	}
}

func BenchmarkValidate(b *testing.B) {
	s := compile(b, `{"type":"object","additionalProperties":false,
		"required":["path","mode","count","recursive","pattern"],
		"properties":{
			"path":{"type":"string","minLength":1},
			"mode":{"type":"string","enum":["read","write","append"]},
			"count":{"type":"integer","minimum":0,"maximum":1000},
			"recursive":{"type":"boolean"},
			"pattern":{"type":"string","maxLength":256},
			"ratio":{"type":"number"},
			"owner":{"type":"string"},
			"tags":{"type":"array","items":{"type":"string"}},
			"encoding":{"type":"string","enum":["utf-8","latin1"]},
			"depth":{"type":"integer"}}}`)
	inst := []byte(`{"path":"/srv/data/report.csv","mode":"read","count":10,"recursive":true,"pattern":"*.csv",
		"ratio":0.5,"owner":"alice","tags":["a","b"],"encoding":"utf-8","depth":3}`)
	if vs := s.Validate(inst); len(vs) != 0 {
		b.Fatalf("benchmark instance invalid: %q", vs)
	}
	b.ReportAllocs()
	for b.Loop() {
		s.Validate(inst)
	}
}

// The cache keeps a bounded number of schemas; one dropped is compiled
// again when next used.
func TestCacheIsBounded(t *testing.T) {
	c := NewCache()
	c.max = 8
	for i := range 100 {
		if _, err := c.Compile(fmt.Sprintf("sha256:%d", i), []byte(`{"type":"object"}`)); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(c.entries); n != 8 {
		t.Fatalf("%d entries kept, want 8", n)
	}
	s, err := c.Compile("sha256:0", []byte(`{"type":"string"}`))
	if err != nil || s.Validate(json.RawMessage(`"x"`)) != nil {
		t.Fatalf("a dropped key compiled again: %v", err)
	}
}
