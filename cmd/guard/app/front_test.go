package app

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/guard-mcp/guard/config"
)

// A bearer token names its client; a wrong token, another scheme, an empty
// or missing header do not.
func TestBearerAuth(t *testing.T) {
	sum := func(s string) string { b := sha256.Sum256([]byte(s)); return hex.EncodeToString(b[:]) }
	auth := bearerAuth([]config.Client{{Name: "alice", TokenSHA256: sum("a-token")}, {Name: "bob", TokenSHA256: sum("b-token")}})
	for header, want := range map[string]string{
		"Bearer a-token":   "alice",
		"bearer  b-token ": "bob",
		"Bearer c-token":   "",
		"Basic a-token":    "",
		"Bearer ":          "",
		"a-token":          "",
		"":                 "",
	} {
		r := httptest.NewRequest("POST", "http://h/mcp", nil)
		if header != "" {
			r.Header.Set("Authorization", header)
		}
		name, ok := auth(r)
		if name != want || ok != (want != "") {
			t.Errorf("Authorization %q: %q %v, want %q", header, name, ok, want)
		}
	}
}

// A loopback listen address answers to every loopback name of its port
// and no other host; any other address only to itself.
func TestAllowedHosts(t *testing.T) {
	got := allowedHosts("127.0.0.1:8930")
	for _, want := range []string{"127.0.0.1:8930", "localhost:8930", "[::1]:8930"} {
		if !slices.Contains(got, want) {
			t.Errorf("127.0.0.1:8930 does not answer %s: %v", want, got)
		}
	}
	if slices.Contains(got, "localhost:8931") || slices.Contains(got, "evil.example.com:8930") {
		t.Errorf("127.0.0.1:8930 answers too much: %v", got)
	}
	if got := allowedHosts("10.0.0.5:8930"); !slices.Equal(got, []string{"10.0.0.5:8930"}) {
		t.Errorf("10.0.0.5:8930: %v", got)
	}
}
