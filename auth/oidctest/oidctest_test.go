package oidctest_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/guard-mcp/guard/auth"
	"github.com/guard-mcp/guard/auth/oidctest"
)

// Without a user named, the login page offers one button per user (what a
// browser test clicks); LoginAs logs a user in without it; an unknown user
// is refused.
func TestLoginStep(t *testing.T) {
	web := oidctest.Client{ID: "web", Secret: "s", RedirectURIs: []string{"http://127.0.0.1:9/cb"}}
	p := oidctest.Start(t, oidctest.Options{Users: []oidctest.User{{Subject: "carol", Email: "carol@example.com", Groups: []string{"ops"}}},
		Clients: []oidctest.Client{web}})
	authURL := p.Issuer + "/authorize?" + url.Values{"response_type": {"code"}, "client_id": {"web"}, "redirect_uri": {"http://127.0.0.1:9/cb"},
		"scope": {"openid email"}, "state": {"x"}}.Encode()
	_, err := oidctest.FollowToCode(http.DefaultClient, authURL, "http://127.0.0.1:9/cb")
	if err == nil || !strings.Contains(err.Error(), `id="login-carol"`) {
		t.Fatalf("the login page: %v", err)
	}
	p.LoginAs("carol")
	if code, err := oidctest.FollowToCode(http.DefaultClient, authURL, "http://127.0.0.1:9/cb"); err != nil || code == "" {
		t.Fatalf("preset user: %q %v", code, err)
	}
	p.LoginAs("")
	if _, err := oidctest.FollowToCode(http.DefaultClient, authURL+"&login_hint=mallory", "http://127.0.0.1:9/cb"); err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("an unknown user: %v", err)
	}
	// A confidential client's login, as a web application's: an ID token
	// for the client, and an access token for the client too (no
	// resource asked for).
	tok := p.Login(t, web, "http://127.0.0.1:9/cb", "carol", "openid email", "")
	if tok.IDToken == "" || tok.AccessToken == "" {
		t.Fatalf("%+v", tok)
	}
	resp, err := http.Get(p.Issuer + "/.well-known/openid-configuration")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`"introspection_endpoint"`, `"S256"`, `urn:ietf:params:oauth:grant-type:token-exchange`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the metadata lacks %s: %s", want, b)
		}
	}
}

// A confidential client's token of its own, for the resource it names.
func TestClientCredentials(t *testing.T) {
	svc := oidctest.Client{ID: "svc", Secret: "s", RedirectURIs: []string{"http://127.0.0.1:9/cb"}}
	p := oidctest.Start(t, oidctest.Options{Clients: []oidctest.Client{svc}})
	tok := p.ClientCredentials(t, svc, "mcp", "https://guard.test/mcp")
	v, _ := auth.New(auth.Config{Issuer: p.Issuer, Audience: "https://guard.test/mcp", Scopes: []string{"mcp"}})
	got, err := v.Verify(context.Background(), tok.AccessToken, "")
	if err != nil || got.User.Subject != "svc" || got.ClientID != "svc" {
		t.Fatalf("%+v %v", got, err)
	}
}
