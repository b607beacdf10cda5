package app

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
	"github.com/guard-mcp/guard/policy"
	"github.com/guard-mcp/guard/store"
)

// PolicyTest is guard policy test: it decides tc as the relay would, with
// the catalog of db (nil: none yet), and says why.
func (m *Main) PolicyTest(ctx context.Context, db *store.DB, st *Settings, tc *TestCall) int {
	p, status, ok := m.loadPolicy(st)
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
	fmt.Fprintf(m.Stdout, "decision: %s\n", v.Action)
	if v.Would != "" {
		fmt.Fprintf(m.Stdout, "monitor mode: enforcement would %s\n", v.Would)
	}
	fmt.Fprintf(m.Stdout, "rule:     %s%s\n", v.Rule, ruleOrigin(p, v.Rule))
	fmt.Fprintf(m.Stdout, "reason:   %s\n", v.Reason)
	if !v.Approvers.IsZero() {
		fmt.Fprintf(m.Stdout, "needs:    %s, each a verified identity\n", v.Approvers)
	}
	if v.Action == guard.ActionDeny || v.Would == guard.ActionDeny {
		fmt.Fprintf(m.Stdout, "the client reads: %s\n", guard.DenialText(v))
	}
	for _, l := range st.Config.Limits {
		if l.Applies(call) {
			notes = append(notes, fmt.Sprintf("rate limit %d per %s, burst %d (%s:%d) also applies", l.Count, l.Per, l.Burst, l.File, l.Line))
		}
	}
	for _, n := range notes {
		fmt.Fprintln(m.Stdout, n)
	}
	return ExitOK
}

// PolicyReplay is guard policy replay: it decides the calls of the last
// since again under st's configuration, and says what it would have
// decided differently, with examples per kind of change.
func (m *Main) PolicyReplay(ctx context.Context, db *store.DB, st *Settings, since time.Duration, examples int) int {
	p, status, ok := m.loadPolicy(st)
	if !ok {
		return status
	}
	contracts := policy.NewContracts(st.Config.AssertFormats)
	from := time.Now().Add(-since)
	var total, same int
	skipped := map[string]int{}
	changed := map[string][]replayed{}
	err := db.Reader().Decisions(ctx, from, func(r *store.Decided) error {
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
			t, err := db.Catalog().ToolByPin(ctx, r.Server, r.Tool, r.Pin)
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
		fmt.Fprintf(m.Stderr, "guard policy replay: %v\n", err)
		return ExitFailure
	}
	src := st.ConfigPath
	if src == "" {
		src = "built-in defaults"
	}
	fmt.Fprintf(m.Stdout, "replayed %d calls since %s against %s (policy %s)\n", total, from.UTC().Format(time.RFC3339), src, p.Version())
	fmt.Fprintf(m.Stdout, "  same decision:      %d\n", same)
	fmt.Fprintf(m.Stdout, "  different decision: %d\n", total-same)
	kinds := make([]string, 0, len(changed))
	for k := range changed {
		kinds = append(kinds, k)
	}
	slices.SortFunc(kinds, func(x, y string) int { return len(changed[y]) - len(changed[x]) })
	for _, k := range kinds {
		fmt.Fprintf(m.Stdout, "\n%s: %d\n", k, len(changed[k]))
		for i, c := range changed[k] {
			if i == examples {
				break
			}
			fmt.Fprintf(m.Stdout, "  %s  %s/%s %s  was %s, now rule %s\n", c.d.Time.UTC().Format(time.RFC3339), c.d.Server, c.d.Tool,
				clip(c.d.Arguments, 60), c.d.DecidedBy, c.rule)
		}
	}
	for why, n := range skipped {
		fmt.Fprintf(m.Stdout, "\nnot replayed: %d (%s)\n", n, why)
	}
	return ExitOK
}

// TestCall is what `guard policy test --call` reads.
type TestCall struct {
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

// loadPolicy compiles the configured policy with the rules learned from
// approvals, or says why not (exit 2).
func (m *Main) loadPolicy(st *Settings) (*policy.Policy, int, bool) {
	eo := policy.EngineOptions{RulesDir: st.RulesDir, Protected: st.protected(), Getenv: m.Getenv}
	if st.Postgres {
		// The learned rules are the database's; one guard never opened
		// has learned none (as a missing SQLite database reads as empty),
		// and its configuration can be checked before the first start.
		db, err := store.OpenReadOnly(context.Background(), store.Options{Path: st.DBPath, Logger: m.Logger, KeyPath: st.KeyPath()})
		switch {
		case errors.Is(err, store.ErrNotGuardDatabase):
		case err != nil:
			fmt.Fprintf(m.Stderr, "guard: %v\n", err)
			return nil, ExitFailure, false
		default:
			defer db.Close()
			eo.Learned = learnedRules{db: db, getenv: m.Getenv}
		}
	}
	engine, err := config.NewEngine(st.ConfigPath, st.Config, eo)
	if err != nil {
		fmt.Fprintf(m.Stderr, "guard: %v\n", err)
		return nil, ExitUsage, false
	}
	return engine.Policy(), 0, true
}
