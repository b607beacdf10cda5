package main

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/guard-mcp/guard/config"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Each per-host setting comes from its variable when its flag is not
// given; an unusable value stops the command with an error naming the
// variable, and a flag given wins over it.
func TestSettingsFromTheEnvironment(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		env    map[string]string
		args   []string
		stderr string
	}{
		{map[string]string{"GUARD_LISTEN": "nonsense"}, []string{"serve"}, `GUARD_LISTEN "nonsense": want HOST:PORT`},
		{map[string]string{"GUARD_NO_UI": "maybe"}, []string{"serve"}, `GUARD_NO_UI "maybe": want true or false`},
		{map[string]string{"GUARD_ALLOW_REMOTE": "sure"}, []string{"serve"}, `GUARD_ALLOW_REMOTE "sure": want true or false`},
		{map[string]string{"GUARD_LISTEN": "0.0.0.0:0"}, []string{"serve"}, "GUARD_LISTEN 0.0.0.0:0 is reachable from other machines"},
		{map[string]string{"GUARD_LISTEN": "127.0.0.1:0"}, []string{"serve", "--listen", "0.0.0.0:0"}, "--listen 0.0.0.0:0 is reachable from other machines"},
		{map[string]string{"GUARD_UI": "0.0.0.0:0"}, []string{"run", "--", "true"}, "GUARD_UI 0.0.0.0:0 is reachable from other machines"},
		{map[string]string{"GUARD_UI": ":"}, []string{"run", "--ui", "0.0.0.0:0", "--", "true"}, "--ui 0.0.0.0:0 is reachable from other machines"},
		{map[string]string{"GUARD_PUBLIC_URL": "ftp://guard.example.com"}, []string{"serve"}, `GUARD_PUBLIC_URL "ftp://guard.example.com": public_url`},
		{map[string]string{"GUARD_ALLOWED_HOSTS": "a.internal, not a host"}, []string{"serve"}, `GUARD_ALLOWED_HOSTS "a.internal, not a host"`},
		{map[string]string{"GUARD_LOG_LEVEL": "loud"}, []string{"serve"}, `GUARD_LOG_LEVEL "loud": want debug`},
	} {
		_, stderr, code := runEnv(t, dir, tc.env, tc.args...)
		if code != exitUsage || !strings.Contains(stderr, tc.stderr) {
			t.Errorf("%v guard %s: exit %d, %q; want 2 with %q", tc.env, strings.Join(tc.args, " "), code, stderr, tc.stderr)
		}
	}
}

// GUARD_PUBLIC_URL and GUARD_ALLOWED_HOSTS, which have no flag, win over
// the file's public_url and allowed_hosts.
func TestEnvironmentOverTheFile(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "guard.yaml")
	writeFile(t, cfg, "public_url: https://file.example.com\nallowed_hosts: [file.internal]\n")
	env := map[string]string{"HOME": dir}
	a := newApp(strings.NewReader(""), nil, nil, func(k string) string { return env[k] })
	st, err := a.settings(&commonFlags{config: cfg})
	if err != nil || st.Config.PublicURL != "https://file.example.com" || !slices.Equal(st.Config.AllowedHosts, []string{"file.internal"}) {
		t.Fatalf("the file's: %+v %v", st, err)
	}
	env["GUARD_PUBLIC_URL"] = "HTTPS://Guard.Example.com:443/"
	env["GUARD_ALLOWED_HOSTS"] = "a.internal, *.replicas.example.com,10.0.0.5:8930"
	st, err = a.settings(&commonFlags{config: cfg})
	if err != nil || st.Config.PublicURL != "https://guard.example.com" ||
		!slices.Equal(st.Config.AllowedHosts, []string{"a.internal", "*.replicas.example.com", "10.0.0.5:8930"}) {
		t.Fatalf("the environment's: %+v %v", st.Config, err)
	}
}

// Every variable of a flag is the flag's on the commands it names, and
// their usage mentions it; every flag of a variable says so.
func TestEveryVariableIsAFlagsAndMentioned(t *testing.T) {
	root := newApp(strings.NewReader(""), nil, nil, func(string) string { return "" }).commandLine()
	seen := map[string]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.InheritedFlags()
		c.Flags().VisitAll(func(f *pflag.Flag) {
			v, ok := config.LookupVariable(f.Name)
			if !ok {
				return
			}
			seen[v.Name] = true
			if !strings.Contains(f.Usage, "$"+v.Name) {
				t.Errorf("%s --%s: the usage %q does not mention $%s", c.CommandPath(), f.Name, f.Usage, v.Name)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	for _, v := range config.Variables() {
		if v.Flag != "" && !seen[v.Name] {
			t.Errorf("%s stands for --%s, which no command has", v.Name, v.Flag)
		}
		if v.Flag == "" && v.Key == "" {
			t.Errorf("%s stands for nothing", v.Name)
		}
	}
}
