package secrets_test

import "testing"

// secretArgs is cleanArgs with a private key, an AWS key and a bearer
// token in it.
var secretArgs = `{"path":"/home/dev/project/deploy/config.env","content":"AWS_ACCESS_KEY_ID=` + awsAccessKey + `\nAWS_SECRET_ACCESS_KEY=` + awsSecretKey + `\nAPI_AUTH=Bearer 9f8e7d6c5b4a39281706f5e4d3c2b1a0\n","key":` + jsonString(rsaKey) + `,"options":{"recursive":true,"maxDepth":3},"requestId":"123e4567-e89b-12d3-a456-426614174000","limit":50}`

func BenchmarkMaskJSONClean(b *testing.B) {
	m := masker(b)
	doc := []byte(cleanArgs)
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, n := m.MaskJSON(doc); n != 0 {
			b.Fatal(n)
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
