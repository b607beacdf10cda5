package secrets_test

import (
	"testing"

	"github.com/guard-mcp/guard/policy/secrets"
)

// secretArgs is cleanArgs with a private key, an AWS key and a bearer
// token in it.
var secretArgs = `{"path":"/home/dev/project/deploy/config.env","content":"AWS_ACCESS_KEY_ID=` + awsAccessKey + `\nAWS_SECRET_ACCESS_KEY=` + awsSecretKey + `\nAPI_AUTH=Bearer 9f8e7d6c5b4a39281706f5e4d3c2b1a0\n","key":` + jsonString(rsaKey) + `,"options":{"recursive":true,"maxDepth":3},"requestId":"123e4567-e89b-12d3-a456-426614174000","limit":50}`

func BenchmarkMaskJSONClean(b *testing.B) { benchMaskJSON(b, masker(b), cleanArgs, 0) }

// benchMaskJSON measures m on doc, which has n secrets.
func benchMaskJSON(b *testing.B, m *secrets.Masker, doc string, n int) {
	raw := []byte(doc)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		if _, got := m.MaskJSON(raw); got != n {
			b.Fatal(got)
		}
	}
}

func BenchmarkMaskJSONSecret(b *testing.B) {
	m := masker(b)
	doc := []byte(secretArgs)
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, n := m.MaskJSON(doc); n != 4 {
			b.Fatal(n)
		}
	}
}

// A clean document with \u escapes, as Python's json module writes
// non-ASCII text.
func BenchmarkMaskJSONCleanEscaped(b *testing.B) {
	m := masker(b)
	doc := []byte(`{"title":"R\u00e9sum\u00e9 of the meeting","body":"Caf\u00e9 at 10:00, \u2014 agenda: budget, hiring, the na\u00efve plan","tags":["caf\u00e9","r\u00e9sum\u00e9"],"path":"C:\\Users\\dev\\notes.txt","n":3}`)
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, n := m.MaskJSON(doc); n != 0 {
			b.Fatal(n)
		}
	}
}

func BenchmarkMaskClean(b *testing.B) {
	m := masker(b)
	b.SetBytes(int64(len(cleanArgs)))
	b.ReportAllocs()
	for b.Loop() {
		if _, n := m.Mask(cleanArgs); n != 0 {
			b.Fatal(n)
		}
	}
}

// guardValues are what guard masks of its own: a UI token, forms of its
// signing key, a configured credential.
var guardValues = []string{
	"9b1f0c2d3e4a5b6c7d8e9f0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e",
	"4E3D2C1B0A99887766554433221100FFEEDDCCBBAA99887766554433221100FF",
	"4e3d2c1b0a99887766554433221100ffeeddccbbaa99887766554433221100ff",
	"TjPSwbCpmId2ZVRDMiERAP/u3cy7qpmId2ZVRDMiEQD/",
	"s3cr3t-remote-credential",
}

// The cost of guard's own values on a clean message, with the built-ins.
func BenchmarkMaskJSONCleanWithValues(b *testing.B) {
	benchMaskJSON(b, masker(b).WithValues("guard-secret", guardValues), cleanArgs, 0)
}

// The cost of guard's own values alone on a clean message: what every
// result the client reads pays.
func BenchmarkMaskJSONCleanValuesOnly(b *testing.B) {
	benchMaskJSON(b, secrets.Values("guard-secret", guardValues), cleanArgs, 0)
}
