package wire

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// valid accepts exactly what encoding/json.Valid accepts, and says which
// texts nest deeper than MaxDepth; past that depth it only skips.
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
		deep(MaxDepth), deep(MaxDepth + 1), deepObj(MaxDepth), deepObj(MaxDepth + 1), "[" + deep(MaxDepth-1) + "," + deep(MaxDepth-1) + "]",
		"[" + deep(MaxDepth) + "]", deep(10001), `{"a":` + deep(MaxDepth) + `,"id":1}`, `{"a":` + deep(MaxDepth) + `,"id":1`, deep(MaxDepth + 1)[1:],
	} {
		checkValid(t, []byte(s))
	}
	// Past MaxDepth the brackets are counted, not matched: a deep text
	// that is not JSON passes (deep), and is refused for its depth.
	b := []byte(`{"a":` + strings.Repeat("[", MaxDepth) + `{"x" 1 ]]` + strings.Repeat("]", MaxDepth-1) + `,"id":7}`)
	if top, ok, deep := valid(b, nil); !ok || !deep || len(top) != 2 || string(b[top[1].valueStart:top[1].valueEnd]) != "7" {
		t.Fatalf("deep, not JSON: ok %v deep %v members %v", ok, deep, top)
	}
}

// checkValid checks valid against json.Valid and a count of b's nesting,
// and the members it finds in a top-level object against those a walk of
// the object finds.
func checkValid(t *testing.T, b []byte) {
	t.Helper()
	top, ok, deep := valid(b, nil)
	want := json.Valid(b)
	switch {
	case want && !ok, !want && ok && !deep:
		t.Fatalf("%.40q: valid %v, json.Valid %v", b, ok, want)
	case want && deep != (nesting(b) > MaxDepth):
		t.Fatalf("%.40q: deep %v, nesting %d", b, deep, nesting(b))
	}
	var members []span
	if i := skipWS(b, 0); want && b[i] == '{' {
		for i = skipWS(b, i+1); b[i] != '}'; i = skipWS(b, i) {
			if b[i] == ',' {
				i = skipWS(b, i+1)
			}
			ke := skipString(b, i)
			vs := skipWS(b, skipWS(b, ke)+1)
			members = append(members, span{keyStart: i, keyEnd: ke, valueStart: vs, valueEnd: skipValue(b, vs)})
			i = members[len(members)-1].valueEnd
		}
	}
	if want && !slices.Equal(top, members) {
		t.Fatalf("%.40q: members %v, want %v", b, top, members)
	}
}

// nesting is how deeply the JSON text b nests.
func nesting(b []byte) int {
	depth, most := 0, 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			i = skipString(b, i) - 1
		case '{', '[':
			depth++
			most = max(most, depth)
		case '}', ']':
			depth--
		}
	}
	return most
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
