package hosts

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, ok := range []string{"guard.internal", "Guard.Example.com:8443", "*.guard.example.com", "*.example.com:8930", "10.0.0.5", "10.0.0.5:8930", "[::1]:8930", "[::1]", "localhost", "my_host"} {
		if _, err := Parse(ok); err != nil {
			t.Errorf("Parse(%q): %v", ok, err)
		}
	}
	for in, want := range map[string]string{
		"":                        "it has no name",
		"guard.example.com:http":  "its port is not a number",
		"guard.example.com:70000": "its port is not a number",
		"guard..example.com":      "a name is labels",
		"*.":                      "it has no name",
		"*":                       "a name is labels",
		"**.example.com":          "a name is labels",
		"https://guard.example":   "give the host only",
		"guard.example.com/mcp":   "give the host only",
		"user@guard.example.com":  "give the host only",
	} {
		if _, err := Parse(in); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "write name, name:port or *.suffix") {
			t.Errorf("Parse(%q) = %v, want an error saying %q", in, err, want)
		}
	}
}

func TestAllows(t *testing.T) {
	l := New("127.0.0.1:8930", "[::1]:8930", "guard.internal", "*.guard.example.com", "*.replicas.example.com:8930", "[fe80::1%eth0]:8930")
	for host, want := range map[string]bool{
		"127.0.0.1:8930":                  true,
		"127.0.0.1":                       false,
		"127.0.0.1:8931":                  false,
		"[::1]:8930":                      true,
		"guard.internal":                  true,
		"GUARD.internal":                  true,
		"guard.internal:443":              true, // some clients send the scheme's port
		"guard.internal:80":               true,
		"guard.internal:8930":             false,
		"a.guard.example.com":             true,
		"a.b.guard.example.com:443":       true,
		"guard.example.com":               false, // the wildcard is for names under it
		"evilguard.example.com":           false,
		"a.guard.example.com.evil.com":    false,
		"r1.replicas.example.com:8930":    true,
		"r1.replicas.example.com":         false,
		"evil.example.com":                false,
		"":                                false,
		"[fe80::1%eth0]:8930":             true,
		"127.0.0.1:8930.evil.example.com": false,
	} {
		if got := l.Allows(host); got != want {
			t.Errorf("Allows(%q) = %v, want %v", host, got, want)
		}
	}
	for origin, want := range map[string]bool{
		"http://127.0.0.1:8930":       true,
		"https://a.guard.example.com": true,
		"http://guard.internal":       true,
		"https://evil.example.com":    false,
		"null":                        false,
		"ftp://guard.internal":        false,
		"https://guard.internal/path": false,
		"https://user@guard.internal": false,
	} {
		if got := l.AllowsOrigin(origin); got != want {
			t.Errorf("AllowsOrigin(%q) = %v, want %v", origin, got, want)
		}
	}
}
