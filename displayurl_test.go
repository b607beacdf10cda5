package guard_test

import (
	"testing"

	guard "github.com/guard-mcp/guard"
)

// DisplayURL drops what may be a credential in an address: the password of
// its user information and its query string; the rest stays.
func TestDisplayURL(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"https://otel.example.com:4318/v1/logs", "https://otel.example.com:4318/v1/logs"},
		{"https://alice:s3cret@otel.example.com/v1/logs", "https://alice@otel.example.com/v1/logs"},
		{"https://witness.example.com/cp?token=abc123&x=1", "https://witness.example.com/cp"},
		{"https://u:p%40ss@h/x?api_key=k#frag", "https://u@h/x#frag"},
		{"https://h/x?", "https://h/x"},
		{"tcp://logs.example.com:6514", "tcp://logs.example.com:6514"},
		{"tls://bob@logs.example.com:6514", "tls://bob@logs.example.com:6514"},
		// Not a URL: what could be a credential is dropped all the same.
		{"https://u:p@ss%zz@h/x?token=abc", "https://h/x"},
		{"ht tp://u:secret@h:1/p?token=abc", "ht tp://h:1/p"},
	} {
		if got := guard.DisplayURL(c.in); got != c.want {
			t.Errorf("DisplayURL(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
