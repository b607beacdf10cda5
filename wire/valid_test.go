package wire

import (
	"encoding/json"
	"slices"
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
		checkValid(t, []byte(s))
	}
}

// checkValid checks valid against json.Valid, and the members it finds in
// a top-level object against those a walk of the object finds.
func checkValid(t *testing.T, b []byte) {
	t.Helper()
	top, ok := valid(b, nil)
	if want := json.Valid(b); ok != want {
		t.Fatalf("%.40q: valid %v, json.Valid %v", b, ok, want)
	}
	var want []span
	if i := skipWS(b, 0); ok && b[i] == '{' {
		for i = skipWS(b, i+1); b[i] != '}'; i = skipWS(b, i) {
			if b[i] == ',' {
				i = skipWS(b, i+1)
			}
			ke := skipString(b, i)
			vs := skipWS(b, skipWS(b, ke)+1)
			want = append(want, span{keyStart: i, keyEnd: ke, valueStart: vs, valueEnd: skipValue(b, vs)})
			i = want[len(want)-1].valueEnd
		}
	}
	if ok && !slices.Equal(top, want) {
		t.Fatalf("%.40q: members %v, want %v", b, top, want)
	}
}

func FuzzValid(f *testing.F) {
	for _, s := range []string{`{"jsonrpc":"2.0","id":1,"method":"a","params":{"x":[1,-2.5e3,true,null,"\u00e9\n"]}}`, `[[],{}]`, `"\"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(checkValid)
}

// The word-at-a-time searches find what a byte-at-a-time loop finds.
func TestIndexSpecial(t *testing.T) {
	var b []byte
	for c := range 256 {
		b = append(b, 'a', byte(c), 0xff, 0x20, 'b', 0x80, '!', 0x1f, '[', 0x5b, 0x5d, 0x22^0x80, 0x5c^0x80, byte(c)^0x20)
	}
	for i := 0; i <= len(b); i++ {
		want1, want2 := len(b), len(b)
		for j := len(b) - 1; j >= i; j-- {
			if c := b[j]; c == '"' || c == '\\' {
				want1, want2 = j, j
			} else if c < 0x20 {
				want2 = j
			}
		}
		if got := indexQuoteOrBackslash(b, i); got != want1 {
			t.Fatalf("indexQuoteOrBackslash from %d: %d, want %d", i, got, want1)
		}
		if got := indexSpecial(b, i); got != want2 {
			t.Fatalf("indexSpecial from %d: %d, want %d", i, got, want2)
		}
	}
}
