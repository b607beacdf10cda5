package main

import (
	"context"
	"time"

	guardapp "github.com/guard-mcp/guard/cmd/guard/app"
	"github.com/spf13/cobra"
)

func init() { register(demoCommand) }

// demoCommand is the guided tour: the example server behind guard, the
// UI, and a scripted client whose calls show each kind of decision.
func demoCommand(a *app) *cobra.Command {
	c := leaf("demo", "the guided tour: the example server behind guard, the UI, and a scripted client", exactly())
	fs := c.Flags()
	uiAddr := fs.String("ui", "127.0.0.1:8931", "serve the approval UI on `ADDR`")
	dir := fs.String("dir", "", "`directory` for the demo's database and configuration (default: a new temporary one)")
	wait := fs.Duration("wait", 55*time.Second, "how long a held call blocks waiting for your decision before its client is told to retry (approval.wait)")
	timeout := fs.Duration("timeout", 10*time.Minute, "how long a hold stays open for a decision, the client's wait included (approval.timeout)")
	stay := fs.Bool("stay", true, "keep the UI open after the tour, until Ctrl-C")
	c.RunE = a.runs(func(ctx context.Context, _ []string) int {
		return a.wiring().Demo(ctx, guardapp.DemoOptions{UI: *uiAddr, Dir: *dir, Wait: *wait, Timeout: *timeout, Stay: *stay})
	})
	return c
}
