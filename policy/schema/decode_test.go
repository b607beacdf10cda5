package schema

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// Decode agrees with encoding/json (UseNumber) on valid JSON and refuses
// what it refuses, and also numbers that overflow a double.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{}`, `[]`, `{"a":[1,-2.5e3,true,false,null,"x\"\u00e9\ud83d\ude00"]}`, `"\u0000"`, `0`, `-0.0E+1`,
		`{"a":{"b":{"c":[[]]}}}`, `01`, `1.`, `"\x"`, `{"a" 1}`, "\"\xff\"", `[1,]`, ` {"k" : "v" } `} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := Decode(b)
		var want any
		var werr error
		if !json.Valid(b) {
			werr = errInvalid
		} else {
			d := json.NewDecoder(strings.NewReader(string(b)))
			d.UseNumber()
			werr = d.Decode(&want)
		}
		if (err == nil) != (werr == nil) {
			// encoding/json replaces invalid UTF-8; Decode refuses it.
			if err != nil && werr == nil && strings.Contains(err.Error(), "UTF-8") {
				return
			}
			// encoding/json keeps a number that overflows a double as
			// text; Decode refuses it.
			var re *RangeError
			if werr == nil && errors.As(err, &re) {
				return
			}
			t.Fatalf("%q: Decode error %v, encoding/json error %v", b, err, werr)
		}
		if err == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: Decode %#v, encoding/json %#v", b, got, want)
		}
	})
}

var errInvalid = jsonError("not valid JSON")

type jsonError string

func (e jsonError) Error() string { return string(e) }

func BenchmarkDecode(b *testing.B) {
	doc := []byte(`{"title":"Login fails on Safari","body":"Steps: open the page, sign in.","project":"WEB","priority":2,
"labels":["bug","auth"],"assignee":"alice","due":"2026-12-01","estimate":1.5,"private":false,"parent":null}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(doc); err != nil {
			b.Fatal(err)
		}
	}
}

func TestDecodeRefusesNumbersThatOverflowADouble(t *testing.T) {
	for in, path := range map[string]string{
		`1e400`:                                  "",
		`{"a":{"b/c":[1,-1e400]}}`:               "/a/b~1c/1",
		`[1e308, 1e309]`:                         "/1",
		`{"n":` + strings.Repeat("9", 400) + `}`: "/n",
	} {
		_, err := Decode([]byte(in))
		var re *RangeError
		if !errors.As(err, &re) || re.Path != path {
			t.Errorf("%.60s: %v, want a RangeError at %q", in, err, path)
		}
	}
	for _, ok := range []string{`1e308`, `1e-400`, `-0.5e-999`, strings.Repeat("9", 300)} {
		if _, err := Decode([]byte(ok)); err != nil {
			t.Errorf("%.40s: %v", ok, err)
		}
	}
}
