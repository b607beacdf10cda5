package main

import (
	"strings"

	"github.com/guard-mcp/guard/config"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// flagsFromEnvironment gives every flag of fs that has a variable
// (config.Variables) and was not given the variable's value, when it is
// set: flag, then environment, then the configuration file, then the
// default. Which flags took theirs from a variable is kept, so that a
// later error names the variable rather than a flag no one typed. An
// unusable value is an error naming the variable.
func (a *app) flagsFromEnvironment(fs *pflag.FlagSet) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		v, ok := config.LookupVariable(f.Name)
		if !ok || f.Changed || err != nil {
			return
		}
		s, rerr := config.ReadVariable(v, a.getenv)
		if rerr != nil || s == "" {
			err = rerr
			return
		}
		// Value.Set, not FlagSet.Set: the flag stays "not given".
		if serr := f.Value.Set(s); serr != nil {
			err = &config.VariableError{Name: v.Name, Value: s, Err: serr}
			return
		}
		if a.fromEnv == nil {
			a.fromEnv = map[string]string{}
		}
		a.fromEnv[f.Name] = v.Name
	})
	return err
}

// source is where the value of the flag called name came from, as an
// error names it: its variable, or the flag.
func (a *app) source(name string) string {
	if v := a.fromEnv[name]; v != "" {
		return v
	}
	return "--" + name
}

// mentionVariables adds "($GUARD_...)" to the usage of every flag of c and
// its subcommands that has a variable, unless the usage names it already.
func mentionVariables(c *cobra.Command) {
	mention := func(f *pflag.Flag) {
		if v, ok := config.LookupVariable(f.Name); ok && !strings.Contains(f.Usage, "$"+v.Name) {
			f.Usage += " ($" + v.Name + ")"
		}
	}
	c.LocalNonPersistentFlags().VisitAll(mention)
	c.PersistentFlags().VisitAll(mention)
	for _, sub := range c.Commands() {
		mentionVariables(sub)
	}
}
