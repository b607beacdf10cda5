package main

import (
	"context"
	"fmt"
	"time"

	guardapp "github.com/guard-mcp/guard/cmd/guard/app"
	"github.com/guard-mcp/guard/config/read"
	"github.com/guard-mcp/guard/httplimit"
	"github.com/spf13/cobra"
)

func init() { register(serveCommand) }

// serveCommand is guard serve: the configured servers over Streamable
// HTTP, for clients that connect to guard.
func serveCommand(a *app) *cobra.Command {
	c := leaf("serve", "serve the configured servers over Streamable HTTP at /mcp/NAME", exactly())
	c.Annotations = map[string]string{annotationLogsInfo: "yes"}
	fs := c.Flags()
	cf := addCommonFlags(fs)
	listen := fs.String("listen", "127.0.0.1:8930", "`ADDR` to serve on")
	allowRemote := fs.Bool("allow-remote", false, "allow a listen address other machines can reach")
	uiAddr := fs.String("ui", "", "serve the approval UI on `ADDR` (default $GUARD_UI, else ui.listen)")
	noUI := fs.Bool("no-ui", false, "do not serve the approval UI")
	headerTimeout := fs.Duration("header-timeout", 10*time.Second, "how long a client (of the UI too) may take to send its request headers")
	bodyTimeout := fs.Duration("body-timeout", 30*time.Second, "how long a client (of the UI too) may take to send a request's body")
	sessionIdle := fs.Duration("session-idle", 30*time.Minute, "end a client session (and its server process) unused for this long")
	aggregate := fs.Bool("aggregate", false, "also serve every server at /mcp, tools and prompts named SERVER__NAME (config: aggregate.enabled)")
	c.RunE = a.runs(a.profiled(func(ctx context.Context, _ []string) int {
		if !*allowRemote && !read.LoopbackAddr(*listen) {
			fmt.Fprintf(a.stderr, "guard serve: %s %s is reachable from other machines; use a loopback address, or --allow-remote (GUARD_ALLOW_REMOTE=true)\n", a.source("listen"), *listen)
			return exitUsage
		}
		st, status, ok := a.settingsOrExit(cf)
		if !ok {
			return status
		}
		return a.wiring().Serve(ctx, st, guardapp.ServeOptions{Listen: *listen, UI: guardapp.UIFlags{Addr: *uiAddr, AddrFrom: a.source("ui"), Off: *noUI,
			Limits: httplimit.Limits{Header: *headerTimeout, Body: *bodyTimeout}},
			SessionIdle: *sessionIdle, Aggregate: *aggregate})
	}))
	return c
}
