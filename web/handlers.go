package web

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/a-h/templ"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/approvals"
	"github.com/guard-mcp/guard/store"
)

// render writes a component as an HTML answer.
func (s *Server) render(w http.ResponseWriter, r *http.Request, code int, c templ.Component) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	if err := c.Render(r.Context(), w); err != nil && r.Context().Err() == nil {
		s.log.Error("ui: render", "path", r.URL.Path, "err", err)
	}
}

// page renders a full page with its navigation bar.
func (s *Server) page(w http.ResponseWriter, r *http.Request, p pageData, pending int, body templ.Component) {
	s.pageStatus(w, r, http.StatusOK, p, pending, body)
}

// pageStatus is page with another status than 200.
func (s *Server) pageStatus(w http.ResponseWriter, r *http.Request, code int, p pageData, pending int, body templ.Component) {
	sess := sessionOf(r.Context())
	nav, err := s.views.counts(r.Context(), pending)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	nav.Page = p.Page
	p.Nav, p.Name, p.Via, p.CSRF = nav, sess.name, sess.via, sess.csrf
	p.Passkey = s.passkeys != nil
	if v, err := s.opts.Store.Verifier().LastVerification(r.Context()); err != nil {
		s.log.Error("ui: the last verification of the audit log could not be read", "err", err)
	} else if v != nil && !v.OK {
		p.Verify = v
	}
	p.Flash = s.sessions.takeFlash(sess.key)
	s.render(w, r, code, layout(p, body))
}

// fail answers a store error.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, guard.ErrNotFound) {
		s.render(w, r, http.StatusNotFound, messagePage("Not found", "There is nothing here: "+err.Error()))
		return
	}
	if errors.Is(err, guard.ErrAuditWrite) {
		// A decision is taken only once the audit log holds it.
		s.log.Error("ui: decision refused: the audit log could not be written", "path", r.URL.Path, "err", err)
		s.render(w, r, http.StatusServiceUnavailable, messagePage("Not recorded",
			"The decision was not taken: the audit log could not record it. Nothing changed. "+err.Error()))
		return
	}
	if errors.Is(err, store.ErrNotApplied) {
		s.log.Error("ui: decision recorded but not applied", "path", r.URL.Path, "err", err)
		s.render(w, r, http.StatusInternalServerError, messagePage("Recorded, not applied",
			"The audit log records the decision, but the guard database refused the change: "+err.Error()))
		return
	}
	s.log.Error("ui: request failed", "path", r.URL.Path, "err", err)
	s.render(w, r, http.StatusInternalServerError, messagePage("Error", "The guard database could not be read: "+err.Error()))
}

func (s *Server) pendingPage(w http.ResponseWriter, r *http.Request) {
	v, err := s.views.pendingView(r.Context(), sessionOf(r.Context()))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if s.opts.Undelivered != nil {
		if v.Undelivered, err = s.opts.Undelivered(r.Context()); err != nil {
			s.log.Warn("the deliveries of announcements could not be read", "err", err)
		}
	}
	s.page(w, r, pageData{Title: "Pending", Page: "pending"}, len(v.Cards), pendingPage(v))
}

func (s *Server) pendingFragment(w http.ResponseWriter, r *http.Request) {
	v, err := s.views.pendingView(r.Context(), sessionOf(r.Context()))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, pendingList(v))
}

func (s *Server) navFragment(w http.ResponseWriter, r *http.Request) {
	nav, err := s.views.counts(r.Context(), -1)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	nav.Page = r.URL.Query().Get("page")
	s.render(w, r, http.StatusOK, navBar(nav))
}

func (s *Server) changesPage(w http.ResponseWriter, r *http.Request) {
	v, err := s.views.changesView(r.Context(), sessionOf(r.Context()))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.page(w, r, pageData{Title: "Tool changes", Page: "changes"}, -1, changesPage(v))
}

func (s *Server) changesFragment(w http.ResponseWriter, r *http.Request) {
	v, err := s.views.changesView(r.Context(), sessionOf(r.Context()))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, changesList(v))
}

func (s *Server) configPage(w http.ResponseWriter, r *http.Request) {
	v, err := s.views.configView(r.Context(), sessionOf(r.Context()))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.page(w, r, pageData{Title: "Configuration change", Page: "config"}, -1, configPage(v))
}

func (s *Server) configFragment(w http.ResponseWriter, r *http.Request) {
	v, err := s.views.configView(r.Context(), sessionOf(r.Context()))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, configChange(v))
}

func (s *Server) toolsPage(w http.ResponseWriter, r *http.Request) {
	v, err := s.views.toolsView(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.page(w, r, pageData{Title: "Servers and tools", Page: "tools"}, -1, toolsPage(v))
}

func (s *Server) toolsFragment(w http.ResponseWriter, r *http.Request) {
	v, err := s.views.toolsView(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, toolsList(v))
}

func (s *Server) activityPage(w http.ResponseWriter, r *http.Request) {
	v, err := s.views.activityView(r.Context(), r.URL.Query())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.page(w, r, pageData{Title: "Activity", Page: "activity"}, -1, activityPage(v))
}

func (s *Server) activityFragment(w http.ResponseWriter, r *http.Request) {
	v, err := s.views.activityView(r.Context(), r.URL.Query())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, activityTable(v))
}

func (s *Server) callPage(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id := r.PathValue("id")
	c, err := s.views.findCall(ctx, id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	v, err := s.views.callView(ctx, c)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.page(w, r, pageData{Title: "Call " + id, Page: "activity"}, -1, callPage(v))
}

// localPath returns next when it is a path on this site, else "/".
func localPath(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") {
		return "/"
	}
	if u, err := url.Parse(next); err != nil || u.Host != "" || u.Scheme != "" {
		return "/"
	}
	return next
}

func (s *Server) namePage(w http.ResponseWriter, r *http.Request) {
	next := localPath(r.URL.Query().Get("next"))
	s.page(w, r, pageData{Title: "Your name", Page: "name"}, -1, namePage(sessionOf(r.Context()), next, ""))
}

// validName checks an approver's name: 1 to 64 printable characters.
func validName(name string) bool {
	if name == "" || utf8.RuneCountInString(name) > 64 || !utf8.ValidString(name) {
		return false
	}
	for _, c := range name {
		if !unicode.IsPrint(c) {
			return false
		}
	}
	return true
}

func (s *Server) setName(w http.ResponseWriter, r *http.Request) {
	sess := sessionOf(r.Context())
	name := strings.TrimSpace(r.PostForm.Get("name"))
	next := localPath(r.PostForm.Get("next"))
	if sess.via != "" {
		s.pageStatus(w, r, http.StatusBadRequest, pageData{Title: "Your name", Page: "name"}, -1,
			namePage(sess, next, "You are logged in as "+sess.user.Name()+", verified ("+sess.via+"): that is who decides, and it cannot be typed."))
		return
	}
	if !validName(name) {
		s.pageStatus(w, r, http.StatusBadRequest, pageData{Title: "Your name", Page: "name"}, -1,
			namePage(sess, next, "A name is 1 to 64 printable characters."))
		return
	}
	s.sessions.setName(sess.key, name)
	s.log.Info("ui: approver named", "name", name)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

type action int

const (
	actionApprove action = iota + 1
	actionDeny
	actionApproveAlways
)

// needName sends a person who has not given a name to the name form.
func (s *Server) needName(w http.ResponseWriter, r *http.Request, sess session, back string) bool {
	if sess.named() {
		return false
	}
	s.sessions.setFlash(sess.key, "Give your name first: it is recorded with every decision.")
	http.Redirect(w, r, "/name?next="+url.QueryEscape(back), http.StatusSeeOther)
	return true
}

// decide records a decision on a held call, then goes back to the pending
// page with a message saying what happened.
func (s *Server) decide(act action) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		sess := sessionOf(ctx)
		if s.needName(w, r, sess, "/") {
			return
		}
		id := r.PathValue("id")
		reason := strings.TrimSpace(r.PostForm.Get("reason"))
		approve := act != actionDeny
		if act == actionDeny && reason == "" {
			s.render(w, r, http.StatusBadRequest, messagePage("A reason is needed",
				"A denial needs a reason: the client reads it. Go back and give one."))
			return
		}
		a, err := s.opts.Holds.Approval(ctx, id)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		var before func(*guard.Approval) error
		var ruleErr error
		if act == actionApproveAlways {
			if s.opts.AllowAlways == nil {
				s.render(w, r, http.StatusNotFound, messagePage("Not available", "This guard does not write rules from the UI."))
				return
			}
			if a.State != guard.ApprovalPending {
				s.sessions.setFlash(sess.key, alreadyText(a))
				http.Redirect(w, r, "/", http.StatusSeeOther)
				return
			}
			// The rule is written with the decision, under its lock,
			// once the approval is known to be still pending: an
			// approval someone denies meanwhile leaves no rule.
			before = func(a *guard.Approval) error {
				ruleErr = s.opts.AllowAlways(a, sess.user.Name())
				return ruleErr
			}
			reason = "approved, and " + a.Tool + " on " + a.Server + " is allowed from now on"
		}
		d, err := s.opts.Decider.Review(ctx, a.ID, sess.reviewer(), approve, reason, before)
		if ruleErr != nil {
			s.log.Error("ui: allow rule", "server", a.Server, "tool", a.Tool, "err", ruleErr)
			s.sessions.setFlash(sess.key, "The rule allowing "+a.Server+"/"+a.Tool+" could not be written, and the call was not approved: "+ruleErr.Error())
			http.Redirect(w, r, "/", http.StatusSeeOther)
			return
		}
		switch {
		case errors.Is(err, guard.ErrAlreadyDecided), errors.Is(err, guard.ErrNotApprover), errors.Is(err, guard.ErrAlreadyReviewed):
			s.log.Info("ui: review refused", "id", id, "by", sess.user.Name(), "why", err)
			s.sessions.setFlash(sess.key, "Not recorded: "+err.Error())
		case errors.Is(err, guard.ErrAuditWrite), errors.Is(err, store.ErrNotApplied):
			s.fail(w, r, err)
			return
		case err != nil:
			s.log.Error("ui: decide", "id", id, "err", err)
			s.sessions.setFlash(sess.key, "Not recorded: "+err.Error())
		default:
			verb := "Denied"
			if approve {
				verb = "Approved"
			}
			msg := verb + " " + d.Server + "/" + d.Tool + " (" + d.ID + ")"
			if act == actionApproveAlways {
				msg += ", and allowed this tool from now on"
			}
			if more := approvals.Waiting(d); d.State == guard.ApprovalPending && more != "" {
				msg = "Your approval of " + d.Server + "/" + d.Tool + " (" + d.ID + ") is recorded: the call waits for " + more
			}
			s.sessions.setFlash(sess.key, msg+".")
			s.log.Info("ui: decision", "id", id, "approve", approve, "by", sess.user.Name(), "via", sess.via, "always", act == actionApproveAlways)
		}
		http.Redirect(w, r, "/", http.StatusSeeOther)
	}
}

func alreadyText(a *guard.Approval) string {
	if a.DecidedBy != "" {
		return "Not recorded: the call was already " + a.State + " by " + a.DecidedBy + " at " + fmtTime(a.DecidedAt) + "."
	}
	return "Not recorded: the call is already " + a.State + "."
}

// decideTool accepts or rejects a tool's definition, then settles the calls
// held for its review (approvals.DecideDefinition), as guard tools accept
// does.
func (s *Server) decideTool(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	sess := sessionOf(ctx)
	if s.needName(w, r, sess, "/tools/changes") {
		return
	}
	server, name, pin := r.PostForm.Get("server"), r.PostForm.Get("name"), r.PostForm.Get("pin")
	var accept bool
	switch r.PostForm.Get("decision") {
	case "accept":
		accept = true
	case "reject":
	default:
		s.render(w, r, http.StatusBadRequest, messagePage("Bad request", "The decision is accept or reject."))
		return
	}
	if server == "" || name == "" || pin == "" {
		s.render(w, r, http.StatusBadRequest, messagePage("Bad request", "The server, the tool and the definition's pin are needed."))
		return
	}
	rev, settled, err := approvals.DecideDefinition(ctx, s.opts.Tools, s.opts.Holds, s.opts.Decider, server, name, pin, accept, sess.reviewer(), "")
	if rev == nil {
		s.fail(w, r, err)
		return
	}
	s.log.Info("ui: tool decision", "server", server, "tool", name, "pin", pin, "state", rev.State, "by", sess.name,
		"released", settled.Decided, "kept", settled.Kept)
	if err != nil {
		s.log.Error("ui: settle held calls", "err", err)
	}
	msg := server + "/" + name + " " + shortPin(pin) + ": " + rev.State + "."
	if text := settled.String(); text != "" {
		msg += " " + text + "."
	}
	s.sessions.setFlash(sess.key, msg)
	http.Redirect(w, r, "/tools/changes", http.StatusSeeOther)
}

// decideConfig applies or dismisses the pending configuration change the
// form names by its digest, as guard policy reload does (store.ApplyConfig).
// A form for a change that is no longer the pending one (the files
// changed again, or someone decided first) is refused, with why, over the
// page as it is now.
func (s *Server) decideConfig(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	sess := sessionOf(ctx)
	if s.needName(w, r, sess, "/config") {
		return
	}
	digest := r.PostForm.Get("digest")
	decide, verb := s.opts.Store.Configs().ApplyConfig, "Applied"
	switch r.PostForm.Get("decision") {
	case "apply":
	case "dismiss":
		decide, verb = s.opts.Store.Configs().DismissConfig, "Dismissed"
	default:
		s.render(w, r, http.StatusBadRequest, messagePage("Bad request", "The decision is apply or dismiss."))
		return
	}
	if digest == "" {
		s.render(w, r, http.StatusBadRequest, messagePage("Bad request", "The change's digest is needed."))
		return
	}
	c, err := decide(ctx, digest, sess.name)
	var np *store.NotPendingError
	switch {
	case errors.As(err, &np):
		s.log.Info("ui: configuration decision refused", "digest", digest, "by", sess.name, "why", err)
		v, verr := s.views.configView(ctx, sess)
		if verr != nil {
			s.fail(w, r, verr)
			return
		}
		v.Problem = "Not recorded: " + err.Error() + ". The page now shows what waits."
		s.pageStatus(w, r, http.StatusConflict, pageData{Title: "Configuration change", Page: "config"}, -1, configPage(v))
		return
	case err != nil:
		s.fail(w, r, err)
		return
	}
	s.log.Info("ui: configuration decision", "digest", digest, "state", c.State, "by", sess.name)
	msg := verb + " the configuration change " + shortPin(digest) + "."
	if c.State == store.ConfigApplied {
		msg += " The running guards apply it within seconds."
	} else {
		msg += " The running guards keep the policy in force."
	}
	s.sessions.setFlash(sess.key, msg)
	http.Redirect(w, r, "/config", http.StatusSeeOther)
}
