package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	guardapp "github.com/guard-mcp/guard/cmd/guard/app"
	"github.com/guard-mcp/guard/config/read"
	"github.com/guard-mcp/guard/store"
	"github.com/spf13/cobra"
)

// policyTestCommand decides one call as the relay would, and says why.
func policyTestCommand(a *app) *cobra.Command {
	c := leaf("test --call JSON", "decide one call as guard would, and say why", exactly())
	fs := c.Flags()
	cf := addCommonFlags(fs)
	raw := fs.String("call", "", "the call, as `JSON`: {\"server\":\"files\",\"tool\":\"write_file\",\"args\":{...}} (also method, uri, client, user: {\"sub\",\"email\",\"groups\"})")
	_ = c.MarkFlagRequired("call") // it exists
	c.RunE = a.runs(func(ctx context.Context, _ []string) int {
		var tc guardapp.TestCall
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
			db, err := store.OpenReadOnly(ctx, store.Options{Path: st.DBPath, Logger: a.logger, KeyPath: st.KeyPath()})
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
		return a.wiring().PolicyTest(ctx, db, st, &tc)
	})
	return c
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
		return a.wiring().PolicyReplay(ctx, db, st, d, *examples)
	})
	return c
}
