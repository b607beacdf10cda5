package web_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/store"
)

const (
	digestA = "sha256:aaaa0000000000000000000000000000000000000000000000000000000000aa"
	digestB = "sha256:bbbb0000000000000000000000000000000000000000000000000000000000bb"
)

// note records a configuration change as a running guard does.
func (e *env) note(digest, summary string) {
	e.t.Helper()
	if err := e.db.Configs().NoteConfigChange(context.Background(), digest, summary); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) configChange(digest string) *store.ConfigChange {
	e.t.Helper()
	c, err := e.db.Configs().ConfigChangeByDigest(context.Background(), digest)
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// configEvents returns the audit records of decisions on configuration
// changes, as "decision by digest".
func (e *env) configEvents() []string {
	e.t.Helper()
	var out []string
	err := e.db.Reader().Records(context.Background(), func(r *guard.Record) error {
		if r.Kind == guard.KindConfig && (r.Decision == store.ConfigApplied || r.Decision == store.ConfigDismissed) {
			d := digestA
			if strings.Contains(r.Detail, digestB) {
				d = digestB
			}
			out = append(out, r.Decision+" "+r.DecidedBy+" "+d)
		}
		return nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

func TestConfigChangePageShowsThePendingChange(t *testing.T) {
	e := newEnv(t)
	b := e.login("alice")
	_, body := b.get("/config")
	if !strings.Contains(body, "No configuration change waits") || strings.Contains(body, `data-action="apply-config"`) {
		t.Errorf("with nothing pending: %s", body)
	}
	if !strings.Contains(body, `data-config="0"`) {
		t.Error("nav: the configuration count is not 0")
	}
	e.note(digestA, "rule \"no-echo\" added\npolicy.default: allow → <deny>")
	res, body := b.get("/config")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /config: %d", res.StatusCode)
	}
	checkHeaders(t, "config page", res.Header)
	for _, want := range []string{
		"<li>rule &#34;no-echo&#34; added</li>", "<li>policy.default: allow → &lt;deny&gt;</li>", // one line each, escaped
		digestA, `data-config-digest="` + digestA + `"`,
		"The previous policy stays in force until this change is applied",
		"the running guards keep the policy in force", "A later, different change of the files is noted here anew",
		`data-action="apply-config"`, `data-action="dismiss-config"`, `name="digest" value="` + digestA + `"`,
		`name="csrf" value="` + b.csrf + `"`, `data-config="1"`, "guard policy reload",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("config page: missing %q", want)
		}
	}
	c := e.configChange(digestA)
	if !strings.Contains(body, c.Created[:10]) {
		t.Errorf("config page: the time it was noted (%s) is not shown", c.Created)
	}
	// Every page's nav shows it waits, and the fragment the live page fetches.
	for _, p := range []string{"/", "/fragments/nav"} {
		if _, body := b.get(p); !strings.Contains(body, `data-config="1"`) || !strings.Contains(body, `href="/config"`) {
			t.Errorf("%s: the nav does not show the waiting change", p)
		}
	}
	if _, body := b.get("/fragments/config"); !strings.Contains(body, `data-config-digest="`+digestA+`"`) || strings.Contains(body, "<html") {
		t.Errorf("fragment: %s", body)
	}
	if res, _ := e.client().get("/config"); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("without a session: %d", res.StatusCode)
	}
}

// Apply and Dismiss each record the decision with the person's name, write
// their audit event, and say so on the page they lead back to.
func TestConfigChangeApplyAndDismiss(t *testing.T) {
	for _, tc := range []struct {
		decision, state, event, flash string
		applied                       bool
	}{
		{"apply", store.ConfigApplied, store.ConfigApplied, "Applied the configuration change", true},
		{"dismiss", store.ConfigDismissed, store.ConfigDismissed, "keep the policy in force", false},
	} {
		t.Run(tc.decision, func(t *testing.T) {
			e := newEnv(t)
			e.note(digestA, `rule "no-echo" added`)
			b := e.login("alice")
			res, _ := b.post("/config/decide", url.Values{"digest": {digestA}, "decision": {tc.decision}})
			if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/config" {
				t.Fatalf("%s: %d %s", tc.decision, res.StatusCode, res.Header.Get("Location"))
			}
			if c := e.configChange(digestA); c.State != tc.state || c.DecidedBy != "alice" {
				t.Fatalf("after %s: %+v", tc.decision, c)
			}
			if ok, _ := e.db.Configs().ConfigApplied(context.Background(), digestA); ok != tc.applied {
				t.Fatalf("running guards would apply it: %v, want %v", ok, tc.applied)
			}
			if got := e.configEvents(); len(got) != 1 || got[0] != tc.event+" alice "+digestA {
				t.Errorf("audit: %q", got)
			}
			_, body := b.get("/config")
			if !strings.Contains(body, tc.flash) || !strings.Contains(body, "No configuration change waits") || !strings.Contains(body, `data-config="0"`) {
				t.Errorf("after %s: %s", tc.decision, body)
			}
		})
	}
}

func TestConfigChangeFormsNeedOriginCSRFAndAName(t *testing.T) {
	e := newEnv(t)
	e.note(digestA, `rule "no-echo" added`)
	b := e.login("alice")
	for _, tok := range []string{"", "00", b.csrf + "0", e.login("mallory").csrf} {
		res, _ := b.post("/config/decide", url.Values{"digest": {digestA}, "decision": {"apply"}, "csrf": {tok}})
		if res.StatusCode != http.StatusForbidden {
			t.Errorf("CSRF %q: %d, want 403", tok, res.StatusCode)
		}
	}
	b.origin = "http://evil.example"
	if res, _ := b.post("/config/decide", url.Values{"digest": {digestA}, "decision": {"dismiss"}}); res.StatusCode != http.StatusForbidden {
		t.Errorf("foreign Origin: %d, want 403", res.StatusCode)
	}
	if c := e.configChange(digestA); c.State != store.ConfigPending {
		t.Fatalf("decided by a forged form: %+v", c)
	}
	// No name given yet: sent to the name form, nothing decided.
	anon := e.login("")
	res, _ := anon.post("/config/decide", url.Values{"digest": {digestA}, "decision": {"apply"}})
	if res.StatusCode != http.StatusSeeOther || !strings.HasPrefix(res.Header.Get("Location"), "/name?next=") {
		t.Errorf("without a name: %d %s", res.StatusCode, res.Header.Get("Location"))
	}
	// Bad forms.
	b.origin = "http://" + e.host
	for _, f := range []url.Values{{"digest": {digestA}, "decision": {"maybe"}}, {"digest": {""}, "decision": {"apply"}}} {
		if res, _ := b.post("/config/decide", f); res.StatusCode != http.StatusBadRequest {
			t.Errorf("%v: %d, want 400", f, res.StatusCode)
		}
	}
	if c := e.configChange(digestA); c.State != store.ConfigPending || len(e.configEvents()) != 0 {
		t.Fatalf("decided: %+v", c)
	}
}

func TestConfigChangeStaleFormIsRefused(t *testing.T) {
	e := newEnv(t)
	e.note(digestA, `rule "no-echo" added`)
	alice, bob := e.login("alice"), e.login("bob")

	// The files changed again after the page was shown: the form for the
	// older change is refused, and the newer one is shown instead.
	e.note(digestB, `rule "no-echo" added`+"\n"+`rule "no-write" added`)
	res, body := alice.post("/config/decide", url.Values{"digest": {digestA}, "decision": {"apply"}})
	if res.StatusCode != http.StatusConflict {
		t.Fatalf("superseded form: %d, want 409", res.StatusCode)
	}
	for _, want := range []string{`data-role="problem"`, "Not recorded", "superseded by a newer one", `data-config-digest="` + digestB + `"`} {
		if !strings.Contains(body, want) {
			t.Errorf("superseded form: the answer lacks %q", want)
		}
	}
	if ok, _ := e.db.Configs().ConfigApplied(context.Background(), digestA); ok {
		t.Fatal("the superseded change was applied")
	}

	// Two people on the same page: the first decision wins.
	if res, _ := bob.post("/config/decide", url.Values{"digest": {digestB}, "decision": {"dismiss"}}); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("bob dismisses: %d", res.StatusCode)
	}
	res, body = alice.post("/config/decide", url.Values{"digest": {digestB}, "decision": {"apply"}})
	if res.StatusCode != http.StatusConflict || !strings.Contains(body, "already dismissed by bob") || !strings.Contains(body, "No configuration change waits") {
		t.Fatalf("apply after bob dismissed: %d %s", res.StatusCode, body)
	}
	if c := e.configChange(digestB); c.State != store.ConfigDismissed || c.DecidedBy != "bob" {
		t.Fatalf("the second decision changed the first: %+v", c)
	}
	if got := e.configEvents(); len(got) != 1 || got[0] != "dismissed bob "+digestB {
		t.Errorf("audit: %q", got)
	}
	// A digest no guard noted is never applied from a form.
	res, _ = alice.post("/config/decide", url.Values{"digest": {"sha256:made-up"}, "decision": {"apply"}})
	if res.StatusCode != http.StatusConflict {
		t.Errorf("made-up digest: %d", res.StatusCode)
	}
	if ok, _ := e.db.Configs().ConfigApplied(context.Background(), "sha256:made-up"); ok {
		t.Error("a made-up digest was applied")
	}
}
