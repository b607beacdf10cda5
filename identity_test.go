package guard_test

import (
	"testing"

	guard "github.com/guard-mcp/guard"
)

// Only the boolean true verifies an email; a claim left out does where the
// configuration trusts the provider's emails, and nothing else does.
func TestVerifiedEmail(t *testing.T) {
	const alice = "alice@example.com"
	for _, tc := range []struct {
		name   string
		claims map[string]any
		trust  bool
		want   string
	}{
		{"true", map[string]any{"email": alice, "email_verified": true}, false, alice},
		{"false", map[string]any{"email": alice, "email_verified": false}, false, ""},
		{`the string "false"`, map[string]any{"email": alice, "email_verified": "false"}, false, ""},
		{`the string "true"`, map[string]any{"email": alice, "email_verified": "true"}, false, ""},
		{"a number", map[string]any{"email": alice, "email_verified": 1}, false, ""},
		{"null", map[string]any{"email": alice, "email_verified": nil}, false, ""},
		{"left out", map[string]any{"email": alice}, false, ""},
		{"left out, trusted", map[string]any{"email": alice}, true, alice},
		{"false, trusted", map[string]any{"email": alice, "email_verified": false}, true, ""},
		{`"false", trusted`, map[string]any{"email": alice, "email_verified": "false"}, true, ""},
		{"null, trusted", map[string]any{"email": alice, "email_verified": nil}, true, ""},
		{"no email", map[string]any{"email_verified": true}, true, ""},
		{"an email that is not a string", map[string]any{"email": 7, "email_verified": true}, true, ""},
	} {
		if got := guard.VerifiedEmail(tc.claims, tc.trust); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
