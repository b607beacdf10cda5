package secrets_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/guard-mcp/guard/policy/secrets"
)

func FuzzMaskJSON(f *testing.F) {
	for _, c := range maskCases {
		f.Add([]byte(c.in))
		f.Add([]byte(jsonString(c.in)))
		f.Add([]byte(`{"a":[` + jsonString(c.in) + `,{"b":` + jsonString("x "+c.in) + `}]}`))
	}
	for _, c := range nearMisses {
		f.Add([]byte(c.in))
	}
	f.Add([]byte(cleanArgs))
	f.Add([]byte(`{"aws_secret_access_key":"` + awsSecretKey + `","Authorization":"Basic dXNlcjpwYXNzd29yZA=="}`))
	f.Add([]byte(`["\u0041KIAIOSFODNN7EXAMPLE","\ud83d\ude00\ud800 x",  "a\/b"]`))
	f.Add([]byte("[\"-----BEGIN PRIVATE KEY-----\x01-----END PRIVATE KEY-----\",\"\\u0041KIAIOSFODNN7EXAMPLE\"]"))
	f.Add([]byte(awsAccessKey + githubPAT + " Bearer " + jwt + "x" + stripeKey + "-" + opensshKey))

	m, err := secrets.New(nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		in := bytes.Clone(doc)
		out, n := m.MaskJSON(doc)
		if !bytes.Equal(doc, in) {
			t.Fatalf("MaskJSON changed its input")
		}
		valid := json.Valid(doc)
		if valid && !json.Valid(out) {
			t.Fatalf("MaskJSON(%q) = %q: not valid JSON", doc, out)
		}
		if (n == 0) != bytes.Equal(out, doc) {
			t.Fatalf("MaskJSON(%q) = %q, %d", doc, out, n)
		}
		if n > 0 && !bytes.Contains(out, []byte("[REDACTED:")) {
			t.Fatalf("MaskJSON(%q) = %q, %d: no mask", doc, out, n)
		}
		again, k := m.MaskJSON(out)
		if k != 0 || !bytes.Equal(again, out) {
			t.Fatalf("MaskJSON(%q) = %q, and again %q, %d", doc, out, again, k)
		}
		if valid && utf8.Valid(doc) {
			checkValues(t, m, doc, out)
		}

		s := string(doc)
		masked, n := m.Mask(s)
		if (n == 0) != (masked == s) {
			t.Fatalf("Mask(%q) = %q, %d", s, masked, n)
		}
		if again, k := m.Mask(masked); k != 0 || again != masked {
			t.Fatalf("Mask(%q) = %q, and again %q, %d", s, masked, again, k)
		}
	})
}

// checkValues compares the documents decoded: out is doc with every
// string value masked by Mask, but for the values that their member's name
// makes secret, which only have to be masked, or left.
func checkValues(t *testing.T, m *secrets.Masker, doc, out []byte) {
	decode := func(b []byte) any {
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	want, got := decode(doc), decode(out)
	var walk func(path string, w, g any, named bool)
	walk = func(path string, w, g any, named bool) {
		switch w := w.(type) {
		case string:
			g, ok := g.(string)
			switch {
			case !ok:
				t.Fatalf("%s: %q became %#v", path, w, g)
			case named:
				if g != w && !strings.Contains(g, "[REDACTED:") {
					t.Fatalf("%s: %q became %q", path, w, g)
				}
			default:
				if masked, _ := m.Mask(w); g != masked {
					t.Fatalf("%s: %q became %q, Mask makes it %q", path, w, g, masked)
				}
			}
		case []any:
			g, ok := g.([]any)
			if !ok || len(g) != len(w) {
				t.Fatalf("%s: %#v became %#v", path, w, g)
			}
			for i := range w {
				walk(path+"[]", w[i], g[i], false)
			}
		case map[string]any:
			g, ok := g.(map[string]any)
			if !ok || len(g) != len(w) {
				t.Fatalf("%s: %#v became %#v", path, w, g)
			}
			for k, v := range w {
				walk(path+"."+k, v, g[k], secretName(k))
			}
		default:
			if w != g {
				t.Fatalf("%s: %#v became %#v", path, w, g)
			}
		}
	}
	walk("$", want, got, false)
}

// secretName reports whether MaskJSON may mask a member's value for its
// name alone.
func secretName(k string) bool {
	k = strings.ToLower(strings.NewReplacer("_", "", "-", "", ".", "").Replace(k))
	for _, w := range []string{"password", "passwd", "passphrase", "secret", "token", "apikey", "secretkey", "privatekey"} {
		if strings.HasSuffix(k, w) {
			return true
		}
	}
	return strings.HasSuffix(k, "secretaccesskey") || k == "awssecretkey" || strings.HasSuffix(k, "authorization")
}
