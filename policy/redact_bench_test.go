package policy

import "testing"

// redactDocs are arguments as the audit log records them: clean ones (the
// common case), and ones with a secret to mask.
var redactDocs = []struct {
	name string
	doc  string
}{
	{"clean", `{"path":"/home/dev/project/src/server/handlers.go","content":"package server\n\nimport (\n\t\"fmt\"\n\t\"net/http\"\n)\n\n// Handle answers a request.\nfunc Handle(w http.ResponseWriter, r *http.Request) {\n\tfmt.Fprintf(w, \"hello %s\", r.URL.Path)\n}\n","options":{"recursive":true,"maxDepth":3,"include":["*.go","*.md"],"exclude":["vendor/**"]},"query":"find every caller of Handle in the repository and list the highest-risk ones","requestId":"123e4567-e89b-12d3-a456-426614174000","limit":50}`},
	{"ticket", string(benchArgs)},
	{"key", `{"url":"https://api.example.com/v1/items","method":"GET","headers":{"Accept":"application/json"},"api_key":"k-8f3a9c2e71d04b5a"}`},
	{"assignment", `{"command":"psql","env":"PGHOST=db.internal\nPGUSER=app\nPGPASSWORD=Zx9kq2LmP0wRt7v\n","args":["-c","select 1"]}`},
	{"url", `{"dsn":"postgres://app:S3cretPassw0rd@db.internal:5432/prod?sslmode=require","pool":10}`},
}

func BenchmarkRedact(b *testing.B) {
	r := Default().Redactor()
	for _, d := range redactDocs {
		b.Run(d.name, func(b *testing.B) {
			raw := []byte(d.doc)
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			for b.Loop() {
				_ = r.Redact(raw)
			}
		})
	}
}
