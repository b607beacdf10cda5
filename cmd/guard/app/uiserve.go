package app

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/approvals"
	"github.com/guard-mcp/guard/config"
	"github.com/guard-mcp/guard/health"
	"github.com/guard-mcp/guard/httplimit"
	"github.com/guard-mcp/guard/policy"
	"github.com/guard-mcp/guard/store"
	"github.com/guard-mcp/guard/web"
)

// uiProcess names the approval UI in lifecycle records: its started
// record says where it serves, and its stopped record that it no longer
// does.
const uiProcess = "guard ui"

// takeoverEvery is how often a process that does not serve the UI tries
// to, so that another takes over within seconds when the serving one exits.
const takeoverEvery = 2 * time.Second

// serveUI serves the approval UI on listen for as long as ctx lasts. The
// first guard on a machine serves it; the others share its database, and
// keep trying the address so that one of them takes over when it is free.
// tried is closed after the first try: the UI serves and its start is
// recorded, or it cannot (yet). A browser's connection is bounded by lim,
// and their number by default to a sixteenth of the process's
// descriptors: a local program that opens connections without end, or
// trickles its requests in, must not leave guard without descriptors to
// start its servers with.
func (m *Main) serveUI(ctx context.Context, st *Settings, db *store.DB, holds *approvals.Manager, engine *config.Engine, probes *health.Checker, listen string, lim httplimit.Limits, tried chan<- struct{}, logger *slog.Logger) {
	if lim.Conns <= 0 {
		lim.Conns = httplimit.Conns(16)
	}
	var once sync.Once
	done := func() { once.Do(func() { close(tried) }) }
	defer done()
	token, err := st.uiToken()
	if err != nil {
		logger.Error("approval UI not served", "err", err)
		return
	}
	var undelivered func(context.Context) ([]string, error)
	if len(st.Config.Notify) > 0 {
		undelivered = deliveryProblems(db, st.Config.Notify)
	}
	// The UI answers to the address it serves on, known once it listens
	// (a port 0 is chosen then).
	newUI := func(served string) (*web.Server, error) {
		return web.New(web.Options{
			Store:        db,
			Calls:        db.Reader(),
			Holds:        db.Holds(),
			Tools:        db.Catalog(),
			Decider:      holds,
			Token:        token,
			NoTokenLogin: !st.Config.UI.TokenLogin,
			OIDC:         uiOIDC(st.Config, served),
			Passkeys:     uiPasskeys(st.Config, db, served),
			AllowedHosts: append(allowedHosts(served), config.PublicHosts(st.Config.PublicURL)...),
			PublicOrigin: st.Config.PublicURL,
			AllowAlways:  allowAlways(db, st.RulesDir, engine.Learned()),
			Explain:      explain(ctx, engine, db),
			Undelivered:  undelivered,
			Logger:       logger.With("component", "ui"),
		})
	}
	said := false
	for {
		ln, err := net.Listen("tcp", listen)
		if err == nil {
			// The address served, not the one asked for: guard ui url
			// reads it from the record.
			served := ln.Addr().String()
			ui, err := newUI(served)
			if err != nil {
				ln.Close()
				logger.Error("approval UI not served", "err", err)
				return
			}
			logger.Info("approval UI", "addr", served, "url", uiOrigin(st.Config, served)+" (guard ui url prints the login address)")
			l := store.Lifecycle{Event: store.LifecycleStarted, Process: uiProcess, Version: m.Version,
				Serves: []string{"http://" + served}, Reason: "the approval UI started"}
			recordLifecycle(db, logger, l)
			done()
			runUI(ctx, ui, probes, httplimit.Listener(ln, lim), lim)
			l.Event, l.Reason = store.LifecycleStopped, "the approval UI stopped"
			recordLifecycle(db, logger, l)
			return
		}
		if !addrInUse(err) && !said {
			logger.Warn("approval UI: cannot listen; retrying", "listen", listen, "err", err)
		}
		said = true
		done()
		select {
		case <-ctx.Done():
			return
		case <-time.After(takeoverEvery):
		}
	}
}

// uiOIDC is the UI's login through the identity provider, nil when
// ui.oidc is not configured. The provider sends people back to the UI's
// address as browsers reach it (uiBase).
func uiOIDC(c *config.Config, listen string) *web.OIDC {
	o := c.UI.OIDC
	if o.Issuer == "" {
		return nil
	}
	return &web.OIDC{Issuer: o.Issuer, ClientID: o.ClientID, ClientSecret: o.ClientSecret, Scopes: o.Scopes,
		GroupsClaim: o.GroupsClaim, TrustEmail: o.TrustEmail, RedirectURL: uiOrigin(c, listen) + "/login/oidc/callback"}
}

// uiPasskeys makes every decision in the UI need a passkey, nil unless
// ui.passkey: required.
func uiPasskeys(c *config.Config, db *store.DB, listen string) *web.Passkeys {
	if c.UI.Passkey != web.PasskeyRequired {
		return nil
	}
	origin, err := c.PasskeyOrigin(listen)
	if err != nil {
		// web.New refuses a UI without its passkeys' origin: no UI
		// rather than one that decides without them.
		origin = ""
	}
	return &web.Passkeys{Store: db.Passkeys(), Origin: origin}
}

// runUI serves the UI on l, and beside it /healthz and /readyz, so that a
// balancer in front of the UI reads the same readiness as guard serve's.
func runUI(ctx context.Context, ui *web.Server, probes *health.Checker, l net.Listener, lim httplimit.Limits) {
	mux := http.NewServeMux()
	probes.Routes(mux)
	mux.Handle("/", ui)
	srv := httplimit.Server(mux, lim)
	uctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go ui.Run(uctx)
	go func() {
		<-uctx.Done()
		sctx, c := context.WithTimeout(context.Background(), 2*time.Second)
		defer c()
		_ = srv.Shutdown(sctx)
	}()
	_ = srv.Serve(l)
}

// allowedHosts are the Host headers the UI answers to: the address it
// listens on, and localhost for a loopback address; for an address open
// to other machines, also this machine's name and addresses.
func allowedHosts(listen string) []string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return []string{listen}
	}
	hosts := []string{listen}
	switch {
	case host == "127.0.0.1" || host == "::1" || host == "localhost":
		hosts = append(hosts, net.JoinHostPort("localhost", port), net.JoinHostPort("127.0.0.1", port), net.JoinHostPort("::1", port))
	case host == "" || host == "0.0.0.0" || host == "::":
		hosts = append(hosts, net.JoinHostPort("localhost", port), net.JoinHostPort("127.0.0.1", port))
		if name, err := os.Hostname(); err == nil {
			hosts = append(hosts, net.JoinHostPort(name, port))
		}
		if addrs, err := net.InterfaceAddrs(); err == nil {
			for _, a := range addrs {
				if ipn, ok := a.(*net.IPNet); ok {
					hosts = append(hosts, net.JoinHostPort(ipn.IP.String(), port))
				}
			}
		}
	}
	return hosts
}

// allowAlways writes a rule that allows a tool from now on, learned from
// an approval: its record (rule_added) goes to the audit log before the
// rule is written (to rules.d/approved.yaml; in PostgreSQL mode, to the
// database, where every replica reads it), and a rule whose record cannot
// be written is not.
func allowAlways(db *store.DB, rulesDir string, learned policy.Learned) func(a *guard.Approval, by string) error {
	return func(a *guard.Approval, by string) error {
		name := "approved-" + strings.NewReplacer("*", "_", "?", "_", "[", "_", "]", "_").Replace(a.Server+"-"+a.Tool)
		r := policy.Rule{Name: name, Server: escapeGlob(a.Server), Tool: escapeGlob(a.Tool), Method: "tools/call",
			Action: guard.ActionAllow, Reason: "allowed from now on by " + by}
		if l, ok := learned.(ruleAdder); ok {
			return l.add(context.Background(), a, by, r)
		}
		file := filepath.Join(rulesDir, policy.ApprovedRulesFile)
		_, err := policy.AppendApprovedRule(rulesDir, r, func(digest string, r policy.Rule) error {
			if err := db.Operations().RecordRuleAdded(store.RuleAdded{Approval: a, By: by, Rule: r.Name, Server: r.Server, Tool: r.Tool,
				Method: r.Method, Action: r.Action, File: file}); err != nil {
				return err
			}
			return db.Configs().NoteRulesWritten(context.Background(), digest)
		})
		return err // not added: the same rule is there already
	}
}

// ruleAdder is learned rules that take a rule learned from an approval.
type ruleAdder interface {
	add(ctx context.Context, a *guard.Approval, by string, r policy.Rule) error
}

// escapeGlob makes a name match only itself as a rule's glob.
func escapeGlob(s string) string {
	return strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`).Replace(s)
}

// explain says what the policy in force does with a call to a tool, its
// arguments aside (see policyText).
func explain(ctx context.Context, engine *config.Engine, db *store.DB) func(t guard.Tool, r *guard.Review) string {
	return func(t guard.Tool, r *guard.Review) string {
		call := &guard.Call{Server: t.Server, Method: "tools/call", ToolName: t.Name,
			Arguments: []byte("{}"), Args: map[string]any{}, Tool: &t}
		call.Review, call.ReviewReason = pendingReview(ctx, db, &t, r)
		return policyText(engine.Policy(), call)
	}
}

// policyText says what a policy does with calls to a tool whatever their
// arguments: the rules whose condition may decide a call first ("when its
// condition holds"), then what decides the others, each as the action and
// the rule.
func policyText(p *policy.Policy, call *guard.Call) string {
	conditional, otherwise := p.Outline(call)
	var parts []string
	for _, v := range conditional {
		parts = append(parts, "when its condition holds, "+verdictText(v))
	}
	if len(parts) == 0 {
		return verdictText(otherwise)
	}
	return strings.Join(append(parts, "otherwise "+verdictText(otherwise)), "; ")
}

// verdictText is a verdict for people: the action, the rule and why.
func verdictText(v guard.Verdict) string {
	text := explainWord(v.Action) + " by " + v.Rule
	if v.Reason != "" {
		text += ": " + v.Reason
	}
	if v.Would != "" {
		text += " (monitor mode: would be " + explainWord(v.Would) + ")"
	}
	return text
}

// explainWord is an action as the tools page says it: a held call waits
// for a person's approval.
func explainWord(action string) string {
	if action == guard.ActionApprove {
		return "held for approval"
	}
	return actionWord(action)
}

// actionWord is how guard says an action happened to a call: denied, held
// or allowed.
func actionWord(action string) string {
	switch action {
	case guard.ActionDeny:
		return "denied"
	case guard.ActionApprove:
		return "held"
	}
	return "allowed"
}

// reviewOf is how a tool's definition stands when it is not accepted, and
// why a call to it is held, as the relay says it; nil when accepted.
func reviewOf(ctx context.Context, db *store.DB, t *guard.Tool) (*guard.Review, string) {
	r, _ := db.Catalog().Review(ctx, t.Server, t.Name, t.Pin)
	return pendingReview(ctx, db, t, r)
}

// pendingReview is reviewOf with the review already read.
func pendingReview(ctx context.Context, db *store.DB, t *guard.Tool, r *guard.Review) (*guard.Review, string) {
	if r == nil || r.State == guard.ReviewAccepted {
		return nil, ""
	}
	var old *guard.Tool
	if r.Cause == guard.CauseChanged {
		old, _ = db.Catalog().AcceptedTool(ctx, t.Server, t.Name)
	}
	return r, guard.ReviewReason(r, t, old)
}
