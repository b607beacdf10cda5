package main

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"
)

// logFlags adds --log-format and --log-level to c and every command under
// it, and makes the app's logger of them before a command runs.
func (a *app) logFlags(c *cobra.Command) {
	fs := c.PersistentFlags()
	fs.String("log-format", "", "the `format` of the logs on stderr: text or json (default $GUARD_LOG_FORMAT, else text)")
	fs.String("log-level", "", "write the logs of this `level` and above: debug, info, warn or error "+
		"(default $GUARD_LOG_LEVEL, else info for guard run and guard serve, warn for the others)")
	oneOf(c, "log-format", "text", "json")
	oneOf(c, "log-level", "debug", "info", "warn", "error")
	c.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if err := a.flagsFromEnvironment(cmd.Flags()); err != nil {
			return err
		}
		l, err := a.newLogger(cmd)
		if err != nil {
			return err
		}
		a.logger = l
		return nil
	}
}

// newLogger is the logger cmd runs with: the flags, else the environment
// (GUARD_LOG_FORMAT, GUARD_LOG_LEVEL: flagsFromEnvironment has put them in
// the flags), else text at the command's default level.
func (a *app) newLogger(cmd *cobra.Command) (*slog.Logger, error) {
	setting := func(flag, def string) (string, string) {
		if f := cmd.Flag(flag); f != nil && f.Value.String() != "" {
			return f.Value.String(), a.source(flag)
		}
		return def, ""
	}
	level := "warn"
	for c := cmd; c != nil; c = c.Parent() {
		if c.Annotations[annotationLogsInfo] != "" {
			level = "info"
		}
	}
	lv, from := setting("log-level", level)
	var l slog.Level
	if err := l.UnmarshalText([]byte(lv)); err != nil || strings.ContainsAny(lv, "+-") {
		return nil, fmt.Errorf("%s %q: want debug, info, warn or error", from, lv)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch f, from := setting("log-format", "text"); f {
	case "text":
		return slog.New(slog.NewTextHandler(a.stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(a.stderr, opts)), nil
	default:
		return nil, fmt.Errorf("%s %q: want text or json", from, f)
	}
}
