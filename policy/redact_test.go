package policy

import "testing"

// Arguments as tools receive them, with secrets set by name or written in
// URLs inside their strings, and what the audit log records of them.
func TestRedactAssignmentsAndURLs(t *testing.T) {
	r := Default().Redactor()
	for _, tc := range []struct{ name, in, want string }{
		{"environment text",
			`{"command":"psql","env":"PGHOST=db.internal\nPGPASSWORD=Zx9kq2LmP0wRt7v\n"}`,
			`{"command":"psql","env":"PGHOST=db.internal\nPGPASSWORD=[REDACTED:credential]\n"}`},
		{"nested shell step",
			`{"steps":[{"run":"curl -H 'X-Api-Key: k-81f3' 'https://deploy:hunter2@api.example.com/v1?token=abc123&page=2'"}]}`,
			`{"steps":[{"run":"curl -H 'X-Api-Key: [REDACTED:credential]' 'https://deploy:[REDACTED:url_credential]@api.example.com/v1?token=[REDACTED:credential]&page=2'"}]}`},
		{"yaml file content",
			`{"path":"config.yaml","content":"db:\n  url: postgres://app:S3cret@db:5432/prod\n  password: S3cret\nlog: info\n"}`,
			`{"path":"config.yaml","content":"db:\n  url: postgres://app:[REDACTED:url_credential]@db:5432/prod\n  password: [REDACTED:credential]\nlog: info\n"}`},
		{"json in a string",
			`{"body":"{\"user\":\"app\",\"password\":\"hunter2\"}"}`,
			`{"body":"{\"user\":\"app\",\"password\":\"[REDACTED:credential]\"}"}`},
		{"secret-named members",
			`{"env":{"DB_HOST":"db","DB_PASSWORD":"hunter2","GITHUB_TOKEN":"ghp_R8v2Kq7LmW3xT9bN4cZ1pY6sH0jD5fG2aE8u"}}`,
			`{"env":{"DB_HOST":"db","DB_PASSWORD":"[REDACTED:credential]","GITHUB_TOKEN":"[REDACTED:github_token]"}}`},
		{"configured key, as before",
			`{"password":"hunter2","path":"/x"}`,
			`{"password":"[REDACTED]","path":"/x"}`},
		{"what is not a secret",
			`{"note":"our password_policy requires 12 characters; the token budget is tight","url":"https://example.com/a?b=c#d","repo":"ssh://git@github.com/org/r.git","email":"alice@example.com","max_tokens":4096,"pageToken":"CAoQAA","code":"password = os.Getenv(\"DB_PASSWORD\")"}`,
			`{"note":"our password_policy requires 12 characters; the token budget is tight","url":"https://example.com/a?b=c#d","repo":"ssh://git@github.com/org/r.git","email":"alice@example.com","max_tokens":4096,"pageToken":"CAoQAA","code":"password = os.Getenv(\"DB_PASSWORD\")"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := r.Redact([]byte(tc.in))
			if got != tc.want {
				t.Errorf("Redact(%s)\n = %s\nwant %s", tc.in, got, tc.want)
			}
			if again := r.Redact([]byte(got)); again != got {
				t.Errorf("redacting again: %s", again)
			}
		})
	}
}
