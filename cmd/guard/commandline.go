package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// commandMakers make guard's top-level commands. A command is a file of
// its own whose init function registers its maker: adding one touches
// nothing else. The makers are called anew for every command line, so
// that no flag's value outlives it (tests run many in one process).
var commandMakers []func(*app) *cobra.Command

// register adds a top-level command to guard's command line.
func register(maker func(*app) *cobra.Command) {
	commandMakers = append(commandMakers, maker)
}

// Annotations of guard's commands.
const (
	// annotationLogsInfo marks a command whose log people read while it
	// runs (guard run, guard serve: whether isolation is in force, where
	// the UI is): it logs at info unless told otherwise. The others
	// answer a person, print their answer only, and log at warn.
	annotationLogsInfo = "guard/logs-info"
	// annotationServerArgs marks a command whose arguments after the
	// first positional one are another program's (guard run's server):
	// flags stop there.
	annotationServerArgs = "guard/server-args"
)

// commandLine builds guard's command tree for one command line.
func (a *app) commandLine() *cobra.Command {
	root := a.group("guard", "a security proxy for the Model Context Protocol",
		"guard sits between an MCP client and its servers: it decides every tool call by policy,\n"+
			"holds sensitive calls for a person, and records every invocation in a verifiable audit log.")
	root.Flags().Bool("version", false, "print guard's version, revision and platform")
	root.SilenceErrors, root.SilenceUsage = true, true
	root.CompletionOptions.DisableDefaultCmd = true // completion.go's own, exit statuses and all
	root.SetIn(a.stdin)
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.SetUsageFunc(usage)
	a.logFlags(root)
	a.versionFlag(root)
	for _, newCommand := range commandMakers {
		root.AddCommand(newCommand(a))
	}
	// cobra's help command, in guard's words (cobra adds it as it runs
	// unless it is there).
	root.InitDefaultHelpCmd()
	if help, _, err := root.Find([]string{"help"}); err == nil && help != root {
		help.Short = "print a command's usage: guard help COMMAND..."
	}
	markRequired(root)
	mentionVariables(root)
	return root
}

// usage writes c's usage, cobra's in guard's words: commands of
// subcommands are commands too, and "COMMAND -h" is how guard's own usage
// lines send a person on. It is Go rather than a cobra usage template:
// a template executes through text/template, whose calls of methods by
// name make the linker keep every exported method of every type in the
// binary (4 MB of guard's).
func usage(c *cobra.Command) error {
	inherited := c.InheritedFlags() // merges the parents' flags into c's, which UseLine reads
	var b strings.Builder
	fmt.Fprintf(&b, "Usage:\n  %s", c.UseLine())
	if c.HasExample() {
		fmt.Fprintf(&b, "\n\nExamples:\n%s", c.Example)
	}
	if c.HasAvailableSubCommands() {
		b.WriteString("\n\nCommands:")
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() || sub.Name() == "help" {
				fmt.Fprintf(&b, "\n  %-*s %s", sub.NamePadding(), sub.Name(), sub.Short)
			}
		}
	}
	if c.HasAvailableLocalFlags() {
		fmt.Fprintf(&b, "\n\nFlags:\n%s", strings.TrimRightFunc(c.LocalFlags().FlagUsages(), unicode.IsSpace))
	}
	if c.HasAvailableInheritedFlags() {
		fmt.Fprintf(&b, "\n\nGlobal Flags:\n%s", strings.TrimRightFunc(inherited.FlagUsages(), unicode.IsSpace))
	}
	if c.HasAvailableSubCommands() {
		fmt.Fprintf(&b, "\n\n\"%s COMMAND -h\" tells more about a command.", c.CommandPath())
	}
	b.WriteString("\n")
	_, err := io.WriteString(c.OutOrStderr(), b.String())
	return err
}

// versionFlag makes guard --version print what guard version prints,
// before anything else runs (the log settings are not read). cobra's own
// --version prints through a template (see usage).
func (a *app) versionFlag(root *cobra.Command) {
	asked := func() bool { v, _ := root.Flags().GetBool("version"); return v }
	pre, run := root.PersistentPreRunE, root.RunE
	root.PersistentPreRunE = func(c *cobra.Command, args []string) error {
		if c == root && asked() {
			return nil
		}
		return pre(c, args)
	}
	root.RunE = func(c *cobra.Command, args []string) error {
		if asked() {
			fmt.Fprint(a.stdout, versionText(thisBuild()))
			return nil
		}
		return run(c, args)
	}
}

// markRequired adds "(required)" to the usage of every required flag of
// c and its subcommands, so that -h says so.
func markRequired(c *cobra.Command) {
	c.LocalFlags().VisitAll(func(f *pflag.Flag) {
		if req := f.Annotations[cobra.BashCompOneRequiredFlag]; len(req) > 0 && req[0] == "true" {
			f.Usage += " (required)"
		}
	})
	for _, sub := range c.Commands() {
		markRequired(sub)
	}
}

// group is a command of subcommands. Run without one it prints its usage
// to stderr and exits 2; with a word that is none of them it says which
// there are, and exits 2.
func (a *app) group(name, short, long string, subs ...*cobra.Command) *cobra.Command {
	c := &cobra.Command{Use: name + " COMMAND", Short: short, Long: long, Args: cobra.ArbitraryArgs}
	c.AddCommand(subs...)
	c.RunE = func(c *cobra.Command, args []string) error {
		switch {
		case len(args) == 0:
			// What there is to run: the usage, on stderr as for every
			// usage error.
			fmt.Fprint(a.stderr, c.UsageString())
			return exitCode(exitUsage)
		case args[0] == "help":
			return c.Help()
		}
		what := "subcommand"
		if !c.HasParent() {
			what = "command"
		}
		var names []string
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() {
				names = append(names, sub.Name())
			}
		}
		msg := fmt.Sprintf("unknown %s %q (%s)", what, args[0], strings.Join(names, ", "))
		if s := c.SuggestionsFor(args[0]); len(s) > 0 {
			msg += "; did you mean " + strings.Join(s, " or ") + "?"
		}
		return errors.New(msg)
	}
	return c
}

// leaf is a command that runs: use is its usage line without "guard"
// and its parents (its name, then its arguments), args checks its
// positional arguments. The caller adds flags and its run function.
func leaf(use, short string, args cobra.PositionalArgs) *cobra.Command {
	return &cobra.Command{Use: use, Short: short, Args: args}
}

// exactly takes the positional arguments named, no more, no fewer.
func exactly(names ...string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		switch {
		case len(args) < len(names):
			return fmt.Errorf("missing %s", strings.Join(names[len(args):], " "))
		case len(args) > len(names):
			return fmt.Errorf("unexpected argument %q", args[len(names)])
		}
		return nil
	}
}

// atLeastOne takes one or more positional arguments, called name.
func atLeastOne(name string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) == 0 {
			return fmt.Errorf("missing %s", name)
		}
		return nil
	}
}

// oneOf makes the shells complete the flag name of c with values.
func oneOf(c *cobra.Command, name string, values ...string) {
	// An error here is a flag name that does not exist: a bug the
	// convention tests catch, as the flag is then not completed.
	_ = c.RegisterFlagCompletionFunc(name, cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp))
}

// oneDashLongFlags rewrites -name and -name=value as --name and
// --name=value where name is a long flag of the command args run: Go's
// flag package, which guard's command line used before, took both forms,
// and client configurations in use say "-config" and "-no-ui"; pflag
// reads -config as -c -o -n -f -i -g. Arguments after "--", a flag's
// value, and a server's command line (guard run CMD...) are left alone.
func oneDashLongFlags(root *cobra.Command, args []string) []string {
	out := slices.Clone(args)
	c, positional := root, false
	for i := 0; i < len(out); i++ {
		s := out[i]
		switch {
		case s == "--":
			return out
		case strings.HasPrefix(s, "--"):
			name, _, inline := strings.Cut(s[2:], "=")
			if f := c.Flag(name); f != nil && !inline && f.NoOptDefVal == "" {
				i++ // its value, whatever it looks like
			}
		case len(s) > 2 && s[0] == '-':
			name, _, inline := strings.Cut(s[1:], "=")
			if name == "help" {
				out[i] = "-" + s // cobra adds it as it runs
				continue
			}
			f := c.Flag(name)
			if f == nil || len(name) < 2 {
				continue // shorthands (-h), or not guard's to judge
			}
			out[i] = "-" + s
			if !inline && f.NoOptDefVal == "" {
				i++
			}
		case s == "-" || strings.HasPrefix(s, "-"):
			// "-" is an argument; -h and its kind take no value.
		default:
			if sub := subcommand(c, s); sub != nil && !positional {
				c = sub
				continue
			}
			if c.Annotations[annotationServerArgs] != "" {
				return out
			}
			positional = true
		}
	}
	return out
}

// subcommand is c's subcommand called name, or nil.
func subcommand(c *cobra.Command, name string) *cobra.Command {
	for _, sub := range c.Commands() {
		if sub.Name() == name || sub.HasAlias(name) {
			return sub
		}
	}
	return nil
}
