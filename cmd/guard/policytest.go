package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/config"
	"github.com/guard-mcp/guard/config/read"
	"github.com/guard-mcp/guard/policy"
	"github.com/guard-mcp/guard/store"
	"github.com/spf13/cobra"
)

// testCall is what `guard policy test --call` reads.
type testCall struct {
	Server string          `json:"server"`
	Tool   string          `json:"tool"`
	Method string          `json:"method"`
	URI    string          `json:"uri"`
	Args   json.RawMessage `json:"args"`
	Client struct {
		Name     string `json:"name"`
		Version  string `json:"version"`
		Protocol string `json:"protocol"`
	} `json:"client"`
	// User is the caller as the front would have authenticated it.
	User struct {
		Sub    string   `json:"sub"`
		Email  string   `json:"email"`
		Groups []string `json:"groups"`
	} `json:"user"`
}

// policyTestCommand decides one call as the relay would, and says why.
func policyTestCommand(a *app) *cobra.Command {
	c := leaf("test --call JSON", "decide one call as guard would, and say why", exactly())
	fs := c.Flags()
	cf := addCommonFlags(fs)
	raw := fs.String("call", "", "the call, as `JSON`: {\"server\":\"files\",\"tool\":\"write_file\",\"args\":{...}} (also method, uri, client, user: {\"sub\",\"email\",\"groups\"})")
	_ = c.MarkFlagRequired("call") // it exists
	c.RunE = a.runs(func(ctx context.Context, _ []string) int {
		var tc testCall
		dec := json.NewDecoder(strings.NewReader(*raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&tc); err != nil || *raw == "" {
			fmt.Fprintf(a.stderr, "guard policy test: --call: want a JSON object like {\"server\":\"files\",\"tool\":\"write_file\",\"args\":{}}: %v\n", err)
			return exitUsage
		}
		if tc.Method == "" {
			tc.Method = "tools/call"
		}
		if len(tc.Args) == 0 {
			tc.Args = json.RawMessage(`{}`)
		}
		// A PostgreSQL database guard never opened has no catalog yet (as a
		// missing SQLite file reads as empty): the call is decided without.
		db, st, status, ok := a.openWith(ctx, cf, func(ctx context.Context, st *settings) (*store.DB, error) {
			db, err := store.OpenReadOnly(ctx, store.Options{Path: st.DBPath, Logger: a.logger, KeyPath: keyPath(st)})
			if st.Postgres && errors.Is(err, store.ErrNotGuardDatabase) {
				return nil, nil
			}
			return db, err
		})
		if !ok {
			return status
		}
		if db != nil {
			defer db.Close()
		}
		p, status, ok := a.loadPolicy(st)
		if !ok {
			return status
		}
		call := &guard.Call{Server: tc.Server, Method: tc.Method, ToolName: tc.Tool, URI: tc.URI, Arguments: tc.Args,
			Client: guard.ClientInfo{Name: tc.Client.Name, Version: tc.Client.Version, Protocol: tc.Client.Protocol},
			User:   guard.Identity{Subject: tc.User.Sub, Email: tc.User.Email, Groups: tc.User.Groups}}
		var notes []string
		if tc.Method == "tools/call" {
			var t *guard.Tool
			err := guard.ErrNotFound // no catalog yet
			if db != nil {
				t, err = currentTool(ctx, db, tc.Server, tc.Tool)
			}
			if err == nil {
				call.Tool = t
				notes = append(notes, fmt.Sprintf("tool: %s as last listed (pin %s; %s)", tc.Tool, t.Pin, annotationText(t.Annotations)))
				if v, err := policy.NewContracts(st.Config.AssertFormats).Arguments(t, call); err != nil {
					notes = append(notes, "inputSchema unusable: "+err.Error())
				} else {
					call.Violations = v
				}
				call.Review, call.ReviewReason = reviewOf(ctx, db, t)
			} else {
				notes = append(notes, "tool: not in the catalog (decided as a tool guard has not seen listed)")
			}
		}
		v := p.Decide(call)
		fmt.Fprintf(a.stdout, "decision: %s\n", v.Action)
		if v.Would != "" {
			fmt.Fprintf(a.stdout, "monitor mode: enforcement would %s\n", v.Would)
		}
		fmt.Fprintf(a.stdout, "rule:     %s%s\n", v.Rule, ruleOrigin(p, v.Rule))
		fmt.Fprintf(a.stdout, "reason:   %s\n", v.Reason)
		if !v.Approvers.IsZero() {
			fmt.Fprintf(a.stdout, "needs:    %s, each a verified identity\n", v.Approvers)
		}
		if v.Action == guard.ActionDeny || v.Would == guard.ActionDeny {
			fmt.Fprintf(a.stdout, "the client reads: %s\n", guard.DenialText(v))
		}
		for _, l := range st.Config.Limits {
			if l.Applies(call) {
				notes = append(notes, fmt.Sprintf("rate limit %d per %s, burst %d (%s:%d) also applies", l.Count, l.Per, l.Burst, l.File, l.Line))
			}
		}
		for _, n := range notes {
			fmt.Fprintln(a.stdout, n)
		}
		return exitOK
	})
	return c
}

func ruleOrigin(p *policy.Policy, name string) string {
	for _, r := range p.Rules() {
		if r.Name == name && r.File != "" {
			return fmt.Sprintf(" (%s:%d)", r.File, r.Line)
		}
	}
	switch name {
	case "default":
		return " (the default: " + p.DefaultAction() + ")"
	case guard.SelfProtectionRule, guard.InputSchemaRule, guard.ToolReviewRule, guard.RateLimitRule:
		return " (built in)"
	}
	return ""
}

// replayed is one call decided differently by the replayed policy.
type replayed struct {
	d    *store.Decided
	rule string
}

// policyReplayCommand decides the calls of a past period again under the
// configuration given, and says what it would have decided differently.
func policyReplayCommand(a *app) *cobra.Command {
	c := leaf("replay", "what a policy (--config NEW) would have decided differently over past calls", exactly())
	fs := c.Flags()
	cf := addCommonFlags(fs)
	since := fs.String("since", "7d", "replay the calls of this long ago until now (`DUR`, like 24h, 7d)")
	examples := fs.Int("examples", 3, "examples shown per kind of change")
	c.RunE = a.runs(func(ctx context.Context, _ []string) int {
		d, err := read.ParseDuration(*since)
		if err != nil || d <= 0 {
			fmt.Fprintf(a.stderr, "guard policy replay: --since %q: want a duration like 24h or 7d\n", *since)
			return exitUsage
		}
		if *examples < 0 {
			fmt.Fprintf(a.stderr, "guard policy replay: --examples %d: want 0 or more\n", *examples)
			return exitUsage
		}
		db, st, status, ok := a.openReadOnly(ctx, cf)
		if !ok {
			return status
		}
		defer db.Close()
		p, status, ok := a.loadPolicy(st)
		if !ok {
			return status
		}
		contracts := policy.NewContracts(st.Config.AssertFormats)
		from := time.Now().Add(-d)
		var total, same int
		skipped := map[string]int{}
		changed := map[string][]replayed{}
		err = db.Decisions(ctx, from, func(r *store.Decided) error {
			was := recordedAction(r)
			switch r.DecidedBy {
			case guard.ToolReviewRule, guard.RateLimitRule, guard.PendingLimitRule:
				skipped["decided by a tool review or a limit, not by rules"]++
				return nil
			}
			if strings.HasPrefix(r.Arguments, `{"truncated":true`) {
				skipped["arguments larger than the audit keeps"]++
				return nil
			}
			name, version, _ := strings.Cut(r.Client, "/")
			call := &guard.Call{Server: r.Server, Method: r.Method, ToolName: r.Tool, Arguments: json.RawMessage(r.Arguments),
				Time: r.Time, Client: guard.ClientInfo{Name: name, Version: version, Protocol: r.Protocol}, User: r.Caller}
			if r.Pin != "" {
				t, err := db.ToolByPin(ctx, r.Server, r.Tool, r.Pin)
				if err != nil {
					return err
				}
				call.Tool = t
				if t != nil {
					if v, err := contracts.Arguments(t, call); err == nil {
						call.Violations = v
					}
				}
			}
			total++
			v := p.Decide(call)
			now := v.Action
			if v.Would != "" {
				now = v.Would
			}
			if now == was {
				same++
				return nil
			}
			k := actionWord(was) + " → " + actionWord(now)
			changed[k] = append(changed[k], replayed{r, v.Rule})
			return nil
		})
		if err != nil {
			fmt.Fprintf(a.stderr, "guard policy replay: %v\n", err)
			return exitFailure
		}
		src := st.ConfigPath
		if src == "" {
			src = "built-in defaults"
		}
		fmt.Fprintf(a.stdout, "replayed %d calls since %s against %s (policy %s)\n", total, from.UTC().Format(time.RFC3339), src, p.Version())
		fmt.Fprintf(a.stdout, "  same decision:      %d\n", same)
		fmt.Fprintf(a.stdout, "  different decision: %d\n", total-same)
		kinds := make([]string, 0, len(changed))
		for k := range changed {
			kinds = append(kinds, k)
		}
		slices.SortFunc(kinds, func(x, y string) int { return len(changed[y]) - len(changed[x]) })
		for _, k := range kinds {
			fmt.Fprintf(a.stdout, "\n%s: %d\n", k, len(changed[k]))
			for i, c := range changed[k] {
				if i == *examples {
					break
				}
				fmt.Fprintf(a.stdout, "  %s  %s/%s %s  was %s, now rule %s\n", c.d.Time.UTC().Format(time.RFC3339), c.d.Server, c.d.Tool,
					clip(c.d.Arguments, 60), c.d.DecidedBy, c.rule)
			}
		}
		for why, n := range skipped {
			fmt.Fprintf(a.stdout, "\nnot replayed: %d (%s)\n", n, why)
		}
		return exitOK
	})
	return c
}

// recordedAction is what policy did with a recorded call: the decision
// of its request record, or, in monitor mode, what enforcement would have
// done.
func recordedAction(r *store.Decided) string {
	var d struct {
		Monitor struct{ Would string } `json:"monitor"`
	}
	if r.Detail != "" && json.Unmarshal([]byte(r.Detail), &d) == nil && d.Monitor.Would != "" {
		return d.Monitor.Would
	}
	switch r.Decision {
	case guard.DecisionDenied:
		return guard.ActionDeny
	case guard.DecisionHeld:
		return guard.ActionApprove
	}
	return guard.ActionAllow
}

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
	r, _ := db.Review(ctx, t.Server, t.Name, t.Pin)
	return pendingReview(ctx, db, t, r)
}

// pendingReview is reviewOf with the review already read.
func pendingReview(ctx context.Context, db *store.DB, t *guard.Tool, r *guard.Review) (*guard.Review, string) {
	if r == nil || r.State == guard.ReviewAccepted {
		return nil, ""
	}
	var old *guard.Tool
	if r.Cause == guard.CauseChanged {
		old, _ = db.AcceptedTool(ctx, t.Server, t.Name)
	}
	return r, guard.ReviewReason(r, t, old)
}

// loadPolicy compiles the configured policy with the rules learned from
// approvals, or says why not (exit 2).
func (a *app) loadPolicy(st *settings) (*policy.Policy, int, bool) {
	eo := policy.EngineOptions{RulesDir: st.RulesDir, Protected: st.protected(), Getenv: a.getenv}
	if st.Postgres {
		// The learned rules are the database's; one guard never opened
		// has learned none (as a missing SQLite database reads as empty),
		// and its configuration can be checked before the first start.
		db, err := store.OpenReadOnly(context.Background(), store.Options{Path: st.DBPath, Logger: a.logger, KeyPath: keyPath(st)})
		switch {
		case errors.Is(err, store.ErrNotGuardDatabase):
		case err != nil:
			fmt.Fprintf(a.stderr, "guard: %v\n", err)
			return nil, exitFailure, false
		default:
			defer db.Close()
			eo.Learned = learnedRules{db: db, getenv: a.getenv}
		}
	}
	engine, err := config.NewEngine(st.ConfigPath, st.Config, eo)
	if err != nil {
		fmt.Fprintf(a.stderr, "guard: %v\n", err)
		return nil, exitUsage, false
	}
	return engine.Policy(), 0, true
}
