package web

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/approvals"
	"github.com/guard-mcp/guard/store"
)

// verifiedSession starts a session whose login verified who decides, as
// an OIDC or passkey login will, and returns its cookie's value.
func verifiedSession(t *testing.T, s *Server, who guard.Identity, via string) string {
	t.Helper()
	id, err := s.sessions.create()
	if err != nil {
		t.Fatal(err)
	}
	s.sessions.update(sessionKeyOf(id), func(se *session) { se.user, se.via = who, via })
	return id
}

// post sends a form of a session, from the UI's own page.
func post(t *testing.T, s *Server, cookie, path string) *httptest.ResponseRecorder {
	t.Helper()
	sess, ok := s.sessions.get(cookie, false)
	if !ok {
		t.Fatal("no session")
	}
	req := httptest.NewRequest("POST", "http://h:1"+path, strings.NewReader(url.Values{"csrf": {sess.csrf}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "http://h:1")
	req.AddCookie(&http.Cookie{Name: sessionCookie, Value: cookie})
	w := httptest.NewRecorder()
	s.ServeHTTP(w, req)
	return w
}

// Through the UI's own routes, sessions with verified identities approve a
// call that needs two of them: the first approval leaves it pending and
// says what is still needed, the caller's own is refused, the second
// approves it; each is recorded under the session's identity.
func TestVerifiedSessionsReviewThroughTheUI(t *testing.T) {
	ctx := context.Background()
	db, err := store.Open(ctx, store.Options{Path: filepath.Join(t.TempDir(), "g.db"), Durability: "normal"})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	m := approvals.New(db.Holds(), approvals.Options{Timeout: time.Minute})
	s, err := New(Options{Store: db, Calls: db.Reader(), Holds: db.Holds(), Tools: db.Catalog(), Decider: m, Token: "t", AllowedHosts: []string{"h:1"}})
	if err != nil {
		t.Fatal(err)
	}
	caller := guard.Identity{Subject: "agent-7", Email: "dev@example.com", Groups: []string{"sre"}}
	if _, _, err := m.Hold(ctx, &guard.Approval{ID: "a1", Server: "db", Tool: "write_rows", Arguments: `{}`, Digest: "d",
		Rule: "prod-writes", Caller: caller, Approvers: guard.Approvers{Groups: []string{"sre"}, Count: 2}}); err != nil {
		t.Fatal(err)
	}
	flash := func(cookie string) string {
		var msg string
		s.sessions.update(sessionKeyOf(cookie), func(se *session) { msg = se.flash })
		return msg
	}
	own := verifiedSession(t, s, caller, guard.ViaOIDC)
	alice := verifiedSession(t, s, guard.Identity{Subject: "u-alice", Email: "alice@example.com", Groups: []string{"sre"}}, guard.ViaOIDC)
	bob := verifiedSession(t, s, guard.Identity{Subject: "u-bob", Email: "bob@example.com", Groups: []string{"sre"}}, guard.ViaPasskey)

	if w := post(t, s, own, "/approvals/a1/approve"); w.Code != http.StatusSeeOther || !strings.Contains(flash(own), "dev@example.com made this call") {
		t.Fatalf("the caller's own approval: %d %q", w.Code, flash(own))
	}
	if w := post(t, s, alice, "/approvals/a1/approve"); w.Code != http.StatusSeeOther ||
		flash(alice) != "Your approval of db/write_rows (a1) is recorded: the call waits for 1 more approval from members of sre, each a verified identity." {
		t.Fatalf("the first approval: %d %q", w.Code, flash(alice))
	}
	if a, _ := db.Holds().Approval(ctx, "a1"); a.State != guard.ApprovalPending || len(a.Reviews) != 1 || a.Reviews[0].Via != guard.ViaOIDC {
		t.Fatalf("after the first approval: %+v", a)
	}
	if w := post(t, s, bob, "/approvals/a1/approve"); w.Code != http.StatusSeeOther || flash(bob) != "Approved db/write_rows (a1)." {
		t.Fatalf("the second approval: %d %q", w.Code, flash(bob))
	}
	a, err := db.Holds().Approval(ctx, "a1")
	if err != nil || a.State != guard.ApprovalApproved || a.DecidedBy != "bob@example.com" || len(a.Reviews) != 2 || a.Reviews[1].Via != guard.ViaPasskey {
		t.Fatalf("after the second approval: %+v %v", a, err)
	}
}
