package web_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/auth/oidctest"
	"github.com/guard-mcp/guard/web"
)

const (
	oidcClientID     = "guard-ui"
	oidcClientSecret = "s3cret-of-the-ui-client"
)

// newOIDCEnv is a UI that logs people in through a real provider in the
// test's process, whose users are alice (sre) and bob (dev); configure
// changes its options further.
func newOIDCEnv(t *testing.T, configure ...func(*web.Options)) (*env, *oidctest.Provider) {
	t.Helper()
	return newOIDCEnvWith(t, nil, configure...)
}

// newOIDCEnvWith is newOIDCEnv with more users at the provider.
func newOIDCEnvWith(t *testing.T, more []oidctest.User, configure ...func(*web.Options)) (*env, *oidctest.Provider) {
	t.Helper()
	var prov *oidctest.Provider
	e := newEnvAt(t, t.TempDir()+"/g.db", append([]func(*web.Options){func(o *web.Options) {
		back := "http://" + o.AllowedHosts[0] + "/login/oidc/callback"
		prov = oidctest.Start(t, oidctest.Options{
			Users: append([]oidctest.User{
				{Subject: "u-alice", Email: "alice@example.com", Groups: []string{"sre"}},
				{Subject: "u-bob", Email: "bob@example.com", Groups: []string{"dev"}},
			}, more...),
			Clients: []oidctest.Client{{ID: oidcClientID, Secret: oidcClientSecret, RedirectURIs: []string{back}}},
		})
		o.OIDC = &web.OIDC{Issuer: prov.Issuer, ClientID: oidcClientID, ClientSecret: oidcClientSecret, RedirectURL: back}
	}}, configure...)...)
	return e, prov
}

// oidcStart asks the UI to start a login, and returns where it sends the
// browser (the provider's authorization URL).
func (b *browser) oidcStart() string {
	b.t.Helper()
	res, _ := b.get("/login/oidc")
	loc := res.Header.Get("Location")
	if res.StatusCode != http.StatusSeeOther || loc == "" {
		b.t.Fatalf("/login/oidc: HTTP %d, Location %q", res.StatusCode, loc)
	}
	return loc
}

// code goes through the provider's login (as whoever it logs in) and
// returns the callback URL it sends the browser to.
func (b *browser) code(authURL string) url.Values {
	b.t.Helper()
	back := b.e.ts.URL + "/login/oidc/callback"
	code, err := oidctest.FollowToCode(http.DefaultClient, authURL, back)
	if err != nil {
		b.t.Fatal(err)
	}
	u, _ := url.Parse(authURL)
	return url.Values{"code": {code}, "state": {u.Query().Get("state")}}
}

func (b *browser) callback(q url.Values) (*http.Response, string) {
	b.t.Helper()
	return b.get("/login/oidc/callback?" + q.Encode())
}

// oidcLogin logs in through the provider as a person would, and reads the
// session's CSRF token.
func (e *env) oidcLogin(p *oidctest.Provider, user string) *browser {
	e.t.Helper()
	p.LoginAs(user)
	b := e.client()
	res, body := b.callback(b.code(b.oidcStart()))
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/" {
		e.t.Fatalf("callback: HTTP %d %s: %s", res.StatusCode, res.Header.Get("Location"), body)
	}
	_, body = b.get("/")
	m := csrfRE.FindStringSubmatch(body)
	if m == nil {
		e.t.Fatalf("no CSRF token on the pending page: %s", body)
	}
	b.csrf = m[1]
	return b
}

// A login through the provider makes the provider's user the approver, a
// verified identity that cannot be typed over; the decision names them and
// says how guard knew.
func TestOIDCLoginDecidesAsTheVerifiedIdentity(t *testing.T) {
	e, p := newOIDCEnv(t)
	b := e.client()
	res, body := b.get("/")
	if res.StatusCode != http.StatusUnauthorized || !strings.Contains(body, `href="/login/oidc"`) ||
		!strings.Contains(body, "Log in with "+p.Issuer) {
		t.Fatalf("the login page offers no login through the provider: %d %s", res.StatusCode, body)
	}
	// A browser at another of the UI's names is sent to the redirect
	// URL's first, where the login's cookie must be when the provider
	// sends it back.
	_, port, _ := strings.Cut(e.host, ":")
	req, _ := http.NewRequest(http.MethodGet, "http://localhost:"+port+"/login/oidc", nil)
	if res, _ := b.do(req); res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != e.ts.URL+"/login/oidc" {
		t.Fatalf("/login/oidc at localhost: HTTP %d to %s", res.StatusCode, res.Header.Get("Location"))
	}
	b = e.oidcLogin(p, "u-alice")
	for _, c := range b.c.Jar.Cookies(mustURL(e.ts.URL)) {
		if c.Name == "guard_oidc" {
			t.Errorf("the login's binding cookie outlived the login")
		}
	}
	_, body = b.get("/")
	if !strings.Contains(body, `data-via="oidc"`) || !strings.Contains(body, "alice@example.com") {
		t.Fatalf("the page does not show the verified approver: %s", body)
	}
	if res, _ := b.post("/name", url.Values{"name": {"mallory"}, "next": {"/"}}); res.StatusCode != http.StatusBadRequest {
		t.Fatalf("a verified session took a typed name: HTTP %d", res.StatusCode)
	}
	a := e.hold("files", "delete_file", `{"path":"/srv/x"}`)
	if res, _ := b.post("/approvals/"+a.ID+"/approve", nil); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("approve: HTTP %d", res.StatusCode)
	}
	got := e.approval(a.ID)
	if got.State != guard.ApprovalApproved || got.DecidedBy != "alice@example.com" || len(got.Reviews) != 1 ||
		got.Reviews[0].Via != guard.ViaOIDC || got.Reviews[0].By.Subject != "u-alice" || strings.Join(got.Reviews[0].By.Groups, ",") != "sre" {
		t.Fatalf("the decision: %+v %+v", got, got.Reviews)
	}
	if strings.Contains(e.logs.String(), oidcClientSecret) {
		t.Fatal("the client secret is in the log")
	}
}

// What the callback refuses: a state it did not give or gave already
// (so a replayed code), a state another browser started, a code used
// once, an ID token whose nonce is not the login's.
func TestOIDCCallbackRefuses(t *testing.T) {
	e, p := newOIDCEnv(t)
	p.LoginAs("u-bob")
	refused := func(what string, b *browser, q url.Values, why string) {
		t.Helper()
		_, hadSession := b.get("/")
		res, body := b.callback(q)
		if res.StatusCode != http.StatusForbidden || !strings.Contains(body, why) {
			t.Errorf("%s: HTTP %d %s", what, res.StatusCode, body)
		}
		if res, body := b.get("/"); res.StatusCode != http.StatusUnauthorized && body != hadSession {
			t.Errorf("%s: a session after all: HTTP %d", what, res.StatusCode)
		}
	}

	b := e.client()
	q := b.code(b.oidcStart())
	wrong := url.Values{"code": q["code"], "state": {strings.Repeat("0", 64)}}
	refused("a wrong state", b, wrong, "unknown, used or expired state")
	// The state is this browser's; in another browser it is refused, and
	// used up.
	refused("another browser", e.client(), q, "started by another browser")
	refused("the state again", b, q, "unknown, used or expired state")

	// A code exchanged once is refused with a fresh state of the same
	// browser: the provider knows it was used (and the PKCE verifier is
	// another).
	b = e.client()
	q = b.code(b.oidcStart())
	if res, body := b.callback(q); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("the first login: HTTP %d %s", res.StatusCode, body)
	}
	fresh, _ := url.Parse(b.oidcStart())
	refused("a replayed code", b, url.Values{"code": q["code"], "state": {fresh.Query().Get("state")}}, "the code was not accepted")

	// A nonce other than the login's (as an ID token injected from another
	// login would carry).
	b = e.client()
	auth, _ := url.Parse(b.oidcStart())
	aq := auth.Query()
	aq.Set("nonce", strings.Repeat("1", 64))
	auth.RawQuery = aq.Encode()
	refused("another nonce", b, b.code(auth.String()), "nonce")

	// The provider's own refusal reaches the person.
	b = e.client()
	auth, _ = url.Parse(b.oidcStart())
	refused("an error from the provider", b, url.Values{"error": {"access_denied"}, "error_description": {"no"}, "state": auth.Query()["state"]},
		"access_denied")
}

// An ID token of another issuer than the configured one is refused, even
// signed with keys the discovery document names: here the configured
// issuer's discovery points at a real provider whose tokens name itself.
func TestOIDCTokenFromAnotherIssuer(t *testing.T) {
	var p *oidctest.Provider
	e, _ := newOIDCEnv(t, func(o *web.Options) {
		back := o.OIDC.RedirectURL
		p = oidctest.Start(t, oidctest.Options{
			Users:   []oidctest.User{{Subject: "u-eve", Email: "eve@example.com"}},
			Clients: []oidctest.Client{{ID: oidcClientID, Secret: oidcClientSecret, RedirectURIs: []string{back}}},
		})
		// The one fake: a discovery document (no real provider names
		// an issuer other than its own) for the issuer guard trusts,
		// whose endpoints are the other provider's.
		var other *httptest.Server
		other = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			res, err := http.Get(p.Issuer + r.URL.Path)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			defer res.Body.Close()
			var doc map[string]any
			b, _ := io.ReadAll(res.Body)
			if err := json.Unmarshal(b, &doc); err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			doc["issuer"] = other.URL
			_ = json.NewEncoder(w).Encode(doc)
		}))
		t.Cleanup(other.Close)
		o.OIDC.Issuer = other.URL
	})
	p.LoginAs("u-eve")
	b := e.client()
	res, body := b.callback(b.code(b.oidcStart()))
	if res.StatusCode != http.StatusForbidden || !strings.Contains(body, "issued by a different provider") {
		t.Fatalf("a token of another issuer: HTTP %d %s", res.StatusCode, body)
	}
}

// token_login: false: the token link is refused, saying where to log in.
func TestOIDCTokenLinkOff(t *testing.T) {
	e, p := newOIDCEnv(t, func(o *web.Options) { o.NoTokenLogin = true })
	b := e.client()
	res, body := b.get("/login?token=" + testToken)
	if res.StatusCode != http.StatusForbidden || !strings.Contains(body, "/login/oidc") {
		t.Fatalf("the token link with token_login off: HTTP %d %s", res.StatusCode, body)
	}
	if res, _ := b.get("/"); res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a session from the token link: HTTP %d", res.StatusCode)
	}
	if _, body := b.get("/"); strings.Contains(body, "guard ui url") {
		t.Fatalf("the login page still offers the token link: %s", body)
	}
	e.oidcLogin(p, "u-alice")
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}
