package auth_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/guard-mcp/guard/auth"
	"github.com/guard-mcp/guard/auth/oidctest"
)

const audience = "https://guard.test/mcp"

var (
	alice  = oidctest.User{Subject: "alice", Email: "alice@example.com", Groups: []string{"sre", "staff"}}
	bob    = oidctest.User{Subject: "bob", Email: "bob@example.com", Groups: []string{"contractors"}}
	cli    = oidctest.Client{ID: "cli", RedirectURIs: []string{"http://127.0.0.1/callback"}}
	guardC = oidctest.Client{ID: "guard", Secret: "guard-secret", RedirectURIs: []string{"http://127.0.0.1:1/cb"}}
)

func provider(t *testing.T, o oidctest.Options) *oidctest.Provider {
	o.Users = append(o.Users, alice, bob)
	o.Clients = append(o.Clients, cli, guardC)
	return oidctest.Start(t, o)
}

func verifier(t *testing.T, p *oidctest.Provider, introspect bool) *auth.Verifier {
	c := auth.Config{Issuer: p.Issuer, Audience: audience, Scopes: []string{"mcp"}}
	if introspect {
		c.IntrospectionClientID, c.IntrospectionClientSecret = guardC.ID, guardC.Secret
	}
	v, err := auth.New(c)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// refusal checks that err is an *auth.Error with the status and code, whose
// description says want.
func refusal(t *testing.T, err error, status int, code, want string) {
	t.Helper()
	var e *auth.Error
	if !errors.As(err, &e) {
		t.Fatalf("want a refusal (%d %s), got %v", status, code, err)
	}
	if e.Status != status || e.Code != code || !strings.Contains(e.Description, want) {
		t.Fatalf("got %d %s %q, want %d %s with %q", e.Status, e.Code, e.Description, status, code, want)
	}
}

func TestLoginFlowGivesAVerifiableJWT(t *testing.T) {
	p := provider(t, oidctest.Options{})
	v := verifier(t, p, false)
	// A public client with PKCE, asking for guard's resource (RFC 8707).
	tok := p.Login(t, cli, "http://127.0.0.1:5555/callback", "alice", "openid mcp", audience)
	got, err := v.Verify(context.Background(), tok.AccessToken, "")
	if err != nil {
		t.Fatal(err)
	}
	if got.User.Subject != "alice" || got.User.Email != "alice@example.com" || !slices.Equal(got.User.Groups, []string{"sre", "staff"}) {
		t.Fatalf("identity: %+v", got.User)
	}
	if got.ClientID != "cli" || !slices.Contains(got.Scopes, "mcp") {
		t.Fatalf("client %q, scopes %v", got.ClientID, got.Scopes)
	}
	// The endpoint's own URL is an audience too: a client that asked for
	// it as its resource is served there, and nowhere else.
	tok = p.Login(t, cli, "http://127.0.0.1:5555/callback", "bob", "mcp", "https://guard.test/mcp/files")
	if got, err := v.Verify(context.Background(), tok.AccessToken, "https://guard.test/mcp/files"); err != nil || got.User.Subject != "bob" {
		t.Fatalf("for the endpoint's URL: %v %v", got, err)
	}
	_, err = v.Verify(context.Background(), tok.AccessToken, "https://guard.test/mcp/db")
	refusal(t, err, 401, "invalid_token", `the token is for "https://guard.test/mcp/files", not for`)
}

func TestRefusals(t *testing.T) {
	p := provider(t, oidctest.Options{})
	other := provider(t, oidctest.Options{})
	v := verifier(t, p, false)
	ctx := context.Background()
	good := oidctest.Mint{Subject: "alice", ClientID: "cli", Audience: []string{audience}, Scopes: []string{"mcp"}}
	if _, err := v.Verify(ctx, p.Mint(t, good), ""); err != nil {
		t.Fatalf("a good token: %v", err)
	}

	_, err := v.Verify(ctx, "", "")
	refusal(t, err, 401, "", "an access token is needed")

	wrongAud := good
	wrongAud.Audience = []string{"https://elsewhere.test/api"}
	_, err = v.Verify(ctx, p.Mint(t, wrongAud), "")
	refusal(t, err, 401, "invalid_token", `the token is for "https://elsewhere.test/api", not for "https://guard.test/mcp"`)

	expired := good
	expired.Lifetime = -time.Hour
	_, err = v.Verify(ctx, p.Mint(t, expired), "")
	refusal(t, err, 401, "invalid_token", "the token expired at")

	_, err = v.Verify(ctx, other.Mint(t, good), "")
	refusal(t, err, 401, "invalid_token", "the token was issued by "+`"`+other.Issuer+`", not by`)

	// Another provider's token claiming to be this one's: its signature
	// does not verify with this issuer's keys.
	forged := good
	forged.Claims = map[string]any{"iss": p.Issuer}
	_, err = v.Verify(ctx, other.Mint(t, forged), "")
	refusal(t, err, 401, "invalid_token", "signature does not verify")

	// A tampered payload: alice's token made to say she is in "admins".
	parts := strings.Split(p.Mint(t, good), ".")
	parts[1] = strings.Split(p.Mint(t, oidctest.Mint{Subject: "alice", Audience: []string{audience}, Scopes: []string{"mcp"},
		Claims: map[string]any{"groups": []string{"admins"}}}), ".")[1]
	_, err = v.Verify(ctx, strings.Join(parts, "."), "")
	refusal(t, err, 401, "invalid_token", "signature does not verify")

	noScope := good
	noScope.Scopes = []string{"openid"}
	_, err = v.Verify(ctx, p.Mint(t, noScope), "")
	refusal(t, err, 403, "insufficient_scope", "the token lacks the scope mcp")

	_, err = v.Verify(ctx, "not-a-jwt", "")
	refusal(t, err, 401, "invalid_token", "opaque tokens only by introspection")

	_, err = v.Verify(ctx, "eyJhbGciOiJub25lIn0.eyJzdWIiOiJhbGljZSJ9.", "")
	refusal(t, err, 401, "invalid_token", "not a JWT guard accepts")
}

func TestIntrospection(t *testing.T) {
	p := provider(t, oidctest.Options{})
	v := verifier(t, p, true)
	ctx := context.Background()
	opaque := p.Mint(t, oidctest.Mint{Subject: "bob", ClientID: "cli", Audience: []string{audience}, Scopes: []string{"mcp"}, Opaque: true})
	if strings.Count(opaque, ".") == 2 {
		t.Fatalf("not an opaque token: %s", opaque)
	}
	got, err := v.Verify(ctx, opaque, "")
	if err != nil {
		t.Fatal(err)
	}
	if got.User.Subject != "bob" || got.User.Email != "bob@example.com" || !slices.Equal(got.User.Groups, []string{"contractors"}) || got.ClientID != "cli" {
		t.Fatalf("identity: %+v, client %q", got.User, got.ClientID)
	}
	wrong := p.Mint(t, oidctest.Mint{Subject: "bob", Audience: []string{"https://elsewhere.test"}, Scopes: []string{"mcp"}, Opaque: true})
	_, err = v.Verify(ctx, wrong, "")
	refusal(t, err, 401, "invalid_token", `the token is for "https://elsewhere.test"`)
	expired := p.Mint(t, oidctest.Mint{Subject: "bob", Audience: []string{audience}, Scopes: []string{"mcp"}, Opaque: true, Lifetime: -time.Minute})
	_, err = v.Verify(ctx, expired, "")
	refusal(t, err, 401, "invalid_token", "not active")
	_, err = v.Verify(ctx, "made-up", "")
	refusal(t, err, 401, "invalid_token", "not active")

	// Wrong credentials for the introspection endpoint: the provider
	// cannot be asked, which is not the token's fault.
	bad, _ := auth.New(auth.Config{Issuer: p.Issuer, Audience: audience, IntrospectionClientID: "guard", IntrospectionClientSecret: "wrong"})
	_, err = bad.Verify(ctx, opaque, "")
	refusal(t, err, 503, "temporarily_unavailable", "introspection endpoint answered HTTP 401")
}

func TestChallengeAndMetadata(t *testing.T) {
	v, err := auth.New(auth.Config{Issuer: "https://login.test", Audience: audience, Scopes: []string{"mcp", "tools"}})
	if err != nil {
		t.Fatal(err)
	}
	meta := "https://guard.test" + auth.MetadataPath("/mcp/files")
	if meta != "https://guard.test/.well-known/oauth-protected-resource/mcp/files" {
		t.Fatal(meta)
	}
	if got, want := v.Challenge(meta, auth.ErrNoToken), `Bearer resource_metadata="`+meta+`", scope="mcp tools"`; got != want {
		t.Errorf("no token:\n got %s\nwant %s", got, want)
	}
	e := &auth.Error{Status: 401, Code: "invalid_token", Description: `the token is for "x"` + "\n"}
	if got, want := v.Challenge(meta, e), `Bearer error="invalid_token", error_description="the token is for 'x'?", resource_metadata="`+meta+`", scope="mcp tools"`; got != want {
		t.Errorf("refused:\n got %s\nwant %s", got, want)
	}
	m := v.Metadata("https://guard.test/mcp/files", "guard: files")
	if m.Resource != "https://guard.test/mcp/files" || !slices.Equal(m.AuthorizationServers, []string{"https://login.test"}) ||
		!slices.Equal(m.BearerMethodsSupported, []string{"header"}) || !slices.Equal(m.ScopesSupported, []string{"mcp", "tools"}) {
		t.Fatalf("%+v", m)
	}
	r, _ := http.NewRequest("GET", "/", nil)
	r.Header.Set("Authorization", "bearer  abc ")
	if auth.BearerToken(r) != "abc" {
		t.Fatal(auth.BearerToken(r))
	}
}

func TestUnreachableProvider(t *testing.T) {
	v, _ := auth.New(auth.Config{Issuer: "http://127.0.0.1:1", Audience: audience})
	p := provider(t, oidctest.Options{})
	_, err := v.Verify(context.Background(), p.Mint(t, oidctest.Mint{Subject: "alice", Audience: []string{audience},
		Claims: map[string]any{"iss": "http://127.0.0.1:1"}}), "")
	refusal(t, err, 503, "temporarily_unavailable", "metadata could not be read")
}

func TestTokenExchange(t *testing.T) {
	p := provider(t, oidctest.Options{})
	v := verifier(t, p, false)
	x := &auth.Exchanger{Verifier: v, ClientID: guardC.ID, ClientSecret: guardC.Secret, Audience: "https://upstream.test", Scope: "read"}
	ctx := context.Background()
	subject := p.Mint(t, oidctest.Mint{Subject: "alice", ClientID: "cli", Audience: []string{audience}, Scopes: []string{"mcp"}})
	up, err := x.Token(ctx, "alice", subject)
	if err != nil {
		t.Fatal(err)
	}
	if up == subject {
		t.Fatal("the caller's own token came back")
	}
	// The new token is alice's, for the upstream's audience.
	uv, _ := auth.New(auth.Config{Issuer: p.Issuer, Audience: "https://upstream.test", Scopes: []string{"read"}})
	got, err := uv.Verify(ctx, up, "")
	if err != nil || got.User.Subject != "alice" || got.User.Email != "alice@example.com" {
		t.Fatalf("the exchanged token: %+v %v", got, err)
	}
	if _, err := v.Verify(ctx, up, ""); err == nil {
		t.Fatal("the exchanged token is accepted by guard's own audience")
	}
	// Kept until it expires: the provider is asked once.
	if again, err := x.Token(ctx, "alice", subject); err != nil || again != up {
		t.Fatalf("again: %v", err)
	}
	if n := len(p.Exchanges()); n != 1 {
		t.Fatalf("%d exchanges, want 1", n)
	}
	if _, err := x.Token(ctx, "", ""); !errors.Is(err, auth.ErrNoSubjectToken) {
		t.Fatalf("no subject token: %v", err)
	}
	bad := &auth.Exchanger{Verifier: v, ClientID: guardC.ID, ClientSecret: "wrong", Audience: "https://upstream.test"}
	if _, err := bad.Token(ctx, "bob", subject); err == nil || !strings.Contains(err.Error(), "token exchange: the identity provider answered HTTP") {
		t.Fatalf("wrong secret: %v", err)
	}
}

// A provider with one audience per API (it ignores the resource a client
// names): its tokens are for guard's configured audience, and serve at
// every endpoint.
func TestFixedAudience(t *testing.T) {
	p := provider(t, oidctest.Options{Audience: audience})
	v := verifier(t, p, false)
	tok := p.Login(t, cli, "http://127.0.0.1:5555/callback", "alice", "mcp", "https://guard.test/mcp/files")
	for _, endpoint := range []string{"https://guard.test/mcp/files", "https://guard.test/mcp/db"} {
		if got, err := v.Verify(context.Background(), tok.AccessToken, endpoint); err != nil || got.User.Subject != "alice" {
			t.Fatalf("at %s: %v %v", endpoint, got, err)
		}
	}
}
