package auth_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/guard-mcp/guard/auth"
	"github.com/guard-mcp/guard/auth/oidctest"
)

// A token's email is the caller's only where the token says
// email_verified: true. mallory, whose profile at the provider carries
// alice's address unverified, is mallory (her subject) and nothing more:
// whether the claim is false, the string "false", or left out; a verifier
// told to trust the provider's emails (auth.trust_email) takes one that
// comes without the claim, and never one the provider says is unverified.
// Introspection answers are read the same way.
func TestTokenEmailNeedsVerification(t *testing.T) {
	const stolen = "alice@example.com"
	mallory := func(v any) oidctest.User {
		return oidctest.User{Subject: "mallory-" + label(v), Email: stolen, EmailVerified: v}
	}
	claims := []any{false, "false", "true", oidctest.Omitted{}}
	o := oidctest.Options{}
	for _, v := range claims {
		o.Users = append(o.Users, mallory(v))
	}
	p := provider(t, o)
	strict := verifier(t, p, true)
	trusting, err := auth.New(auth.Config{Issuer: p.Issuer, Audience: audience, Scopes: []string{"mcp"}, TrustEmail: true,
		IntrospectionClientID: guardC.ID, IntrospectionClientSecret: guardC.Secret})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	email := func(v *auth.Verifier, m oidctest.Mint) string {
		t.Helper()
		got, err := v.Verify(ctx, p.Mint(t, m), "")
		if err != nil {
			t.Fatalf("%+v: %v", m, err)
		}
		if got.User.Subject != m.Subject {
			t.Fatalf("%+v: the caller is %q", m, got.User.Subject)
		}
		return got.User.Email
	}
	for _, opaque := range []bool{false, true} {
		for _, v := range claims {
			m := oidctest.Mint{Subject: mallory(v).Subject, Audience: []string{audience}, Scopes: []string{"mcp"}, Opaque: opaque}
			if got := email(strict, m); got != "" {
				t.Errorf("opaque %v, email_verified %s: the caller's email is %q", opaque, label(v), got)
			}
			want := ""
			if _, omitted := v.(oidctest.Omitted); omitted {
				want = stolen
			}
			if got := email(trusting, m); got != want {
				t.Errorf("opaque %v, email_verified %s, trust_email: the caller's email is %q, want %q", opaque, label(v), got, want)
			}
		}
		// alice's own token, whose email the provider verified.
		m := oidctest.Mint{Subject: "alice", Audience: []string{audience}, Scopes: []string{"mcp"}, Opaque: opaque}
		if got := email(strict, m); got != stolen {
			t.Errorf("opaque %v: alice's verified email is %q", opaque, got)
		}
	}
}

// label names a claim's value, for subjects and messages.
func label(v any) string {
	switch x := v.(type) {
	case oidctest.Omitted:
		return "omitted"
	case string:
		return "string-" + x
	}
	return fmt.Sprint(v)
}
