package wire

import (
	"encoding/json"
	"strings"
	"testing"
)

// valid accepts exactly what encoding/json.Valid accepts.
func TestValidIsJSONValid(t *testing.T) {
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	deepObj := func(n int) string { return strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n) }
	for _, s := range []string{
		``, ` `, `1`, ` 1 `, `-`, `-0`, `-01`, `01`, `1.`, `1.5`, `.5`, `1e`, `1e+`, `1E-7`, `1.5e10`, `0x1`,
		`true`, `tru`, `truex`, `false`, `null`, `nul`, `NaN`,
		`""`, `"a`, `"\"`, `"\\"`, `"\/\b\f\n\r\t"`, `"\x"`, `"\u12"`, `"\u12g4"`, `"\u00e9"`, "\"\x01\"", "\"\x7f\xff\"",
		`[]`, `[ ]`, `[1,]`, `[,1]`, `[1 2]`, `[1,[2,{}]]`, `[`, `]`,
		`{}`, `{ }`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{,}`, `{1:2}`, `{"a":1 "b":2}`, `{"a":[{"b":null}]}`, `{"a":1}}`, `{"a":1}]`,
		`[1]x`, `{} {}`, "\t{\r\n}\n", "\v1",
		deep(maxDepth), deep(maxDepth + 1), deepObj(maxDepth), deepObj(maxDepth + 1), "[" + deep(maxDepth-1) + "," + deep(maxDepth-1) + "]",
	} {
		if got, want := valid([]byte(s)), json.Valid([]byte(s)); got != want {
			t.Errorf("%.40q: valid %v, json.Valid %v", s, got, want)
		}
	}
}

func FuzzValid(f *testing.F) {
	for _, s := range []string{`{"jsonrpc":"2.0","id":1,"method":"a","params":{"x":[1,-2.5e3,true,null,"\u00e9\n"]}}`, `[[],{}]`, `"\"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := valid(b), json.Valid(b); got != want {
			t.Fatalf("%q: valid %v, json.Valid %v", b, got, want)
		}
	})
}
