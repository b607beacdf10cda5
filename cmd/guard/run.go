package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	guardapp "github.com/guard-mcp/guard/cmd/guard/app"
	"github.com/spf13/cobra"
	"golang.org/x/net/http/httpguts"
)

func init() { register(runCommand) }

// runCommand is guard run: a stdio server, or a remote one, behind guard
// for a stdio client. Everything after the server's command is the
// server's, flags too: guard's flags come before it (and before --).
func runCommand(a *app) *cobra.Command {
	c := leaf("run [flags] -- CMD [ARGS...]", "wrap a stdio MCP server (or, with --upstream, a remote one) for a stdio client", nil)
	c.Long = `Wrap a stdio MCP server: guard speaks MCP on its stdin and stdout, as the server would,
decides every call, and records it. Put it in a client's configuration in place of the
server's command:

  guard run [flags] -- CMD [ARGS...]     a server guard starts
  guard run [flags] --upstream URL       a remote server (Streamable HTTP, or --sse)

guard's flags come before the server's command; everything after it is the server's.
Exit status: the server's once it has run (128+N when signal N ended it); before that
1 for a failure, 2 for bad usage or configuration.`
	c.Annotations = map[string]string{annotationLogsInfo: "yes", annotationServerArgs: "yes"}
	fs := c.Flags()
	fs.SetInterspersed(false)
	cf := addCommonFlags(fs)
	name := fs.String("name", "", "the server's `name` in rules and records (default: derived from the command)")
	uiAddr := fs.String("ui", "", "serve the approval UI on `ADDR` (default $GUARD_UI, else ui.listen, 127.0.0.1:8931)")
	noUI := fs.Bool("no-ui", false, "do not serve the approval UI")
	upstream := fs.String("upstream", "", "relay to a remote MCP server at `URL` instead of a command")
	var headerEnv headerEnvFlags
	fs.Var(&headerEnv, "header-env", "with --upstream: send the header `Header=ENVNAME`, its value read from the variable ENVNAME (repeated)")
	bearerEnv := fs.String("bearer-env", "", "with --upstream: send Authorization: Bearer and the value of the variable `ENVNAME`")
	sse := fs.Bool("sse", false, "with --upstream: the server speaks the legacy HTTP+SSE transport (2024-11-05)")
	c.Args = func(_ *cobra.Command, argv []string) error {
		switch {
		case *upstream == "" && (len(headerEnv) > 0 || *bearerEnv != "" || *sse):
			return errors.New("--header-env, --bearer-env and --sse go with --upstream URL")
		case *upstream != "" && len(argv) > 0:
			return errors.New("--upstream URL and a command are exclusive")
		case *upstream != "":
			if u, err := url.Parse(*upstream); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return fmt.Errorf("--upstream %q: want the http:// or https:// URL of an MCP endpoint", *upstream)
			}
		case len(argv) == 0:
			return errors.New("missing the server's command (after --), or --upstream URL")
		}
		return nil
	}
	c.RunE = a.runs(a.profiled(func(ctx context.Context, argv []string) int {
		st, status, ok := a.settingsOrExit(cf)
		if !ok {
			return status
		}
		return a.wiring().Run(ctx, st, guardapp.RunOptions{Name: *name, UI: guardapp.UIFlags{Addr: *uiAddr, AddrFrom: a.source("ui"), Off: *noUI}, Upstream: *upstream,
			HeaderEnv: headerEnv, BearerEnv: *bearerEnv, SSE: *sse}, argv)
	}))
	return c
}

// headerEnvFlags are the repeated --header-env values, Header=ENVNAME.
type headerEnvFlags []string

func (h *headerEnvFlags) String() string { return strings.Join(*h, ", ") }

// Type is what -h calls the value where its usage does not name it.
func (h *headerEnvFlags) Type() string { return "Header=ENVNAME" }

func (h *headerEnvFlags) Set(v string) error {
	name, env, ok := strings.Cut(v, "=")
	switch {
	case !ok || name == "" || env == "":
		return fmt.Errorf("want Header=ENVNAME, not %q", v)
	case !httpguts.ValidHeaderFieldName(name):
		return fmt.Errorf("%q is not a header name", name)
	}
	*h = append(*h, v)
	return nil
}
