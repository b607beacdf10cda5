package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// commandCase says how the convention tests call a command that runs: the
// positional arguments and flags a call needs to get past the command
// line, and the status it then exits with (-1: not run, as it would serve
// or wait). CONFIG and DB in them stand for the fixture's files.
type commandCase struct {
	args  []string
	flags []string
	code  int
	// noSettings marks a command that takes no --config and --db: it
	// reads neither configuration nor database.
	noSettings bool
}

// commandCases has an entry for every command that runs: a command added
// without one fails TestEveryCommandHasACase. Calls run in a directory of
// their own, with a configuration and a database that does not exist yet.
var commandCases = map[string]commandCase{
	"guard approvals list":         {code: 0},
	"guard approvals show":         {args: []string{"no-such-id"}, code: 1},
	"guard approvals approve":      {args: []string{"no-such-id"}, flags: []string{"--by", "x"}, code: 1},
	"guard approvals deny":         {args: []string{"no-such-id"}, flags: []string{"--reason", "no", "--by", "x"}, code: 1},
	"guard audit query":            {code: 0},
	"guard audit verify":           {code: exitUnverifiable},
	"guard audit key":              {code: 1},
	"guard audit checkpoint":       {code: 1},
	"guard audit prove":            {args: []string{"no-such-id"}, code: 1},
	"guard audit export":           {code: 1},
	"guard audit check":            {args: []string{"CONFIG"}, code: 1},
	"guard audit report":           {code: exitUnverifiable},
	"guard audit prune":            {code: -1},
	"guard audit acknowledge-loss": {args: []string{"no-such-id"}, code: 1},
	"guard tools list":             {code: 0},
	"guard tools diff":             {args: []string{"files", "ghost"}, code: 1},
	"guard tools accept":           {args: []string{"files", "ghost"}, flags: []string{"--by", "x"}, code: 1},
	"guard tools reject":           {args: []string{"files", "ghost"}, flags: []string{"--by", "x"}, code: 1},
	"guard policy check":           {code: 0},
	"guard policy test":            {flags: []string{"--call", `{"server":"s","tool":"x"}`}, code: 0},
	"guard policy replay":          {code: 0},
	"guard policy reload":          {code: 0},
	"guard run":                    {code: -1},
	"guard serve":                  {code: -1},
	"guard store copy":             {code: -1},
	"guard token":                  {args: []string{"ci"}, code: 0, noSettings: true},
	"guard ui url":                 {code: 1},
	"guard ui enroll":              {code: 1},
	"guard demo":                   {code: -1, noSettings: true},
	"guard example-server":         {code: -1, noSettings: true},
	"guard version":                {code: 0, noSettings: true},
	"guard completion":             {args: []string{"bash"}, code: 0, noSettings: true},
	"guard wrap":                   {args: []string{"cursor"}, flags: []string{"--guard", "/bin/sh"}, code: 1},
	"guard unwrap":                 {args: []string{"cursor"}, code: 1, noSettings: true},
	"guard help":                   {code: 0, noSettings: true},
}

// commandsOf lists c and every command under it, hidden ones and cobra's
// completion machinery left out. (The one hidden command, guard bench,
// only says where the benchmark went, whatever it is given: main_test.go
// checks it.)
func commandsOf(c *cobra.Command) []*cobra.Command {
	if c.Hidden || c.Name() == cobra.ShellCompRequestCmd || c.Name() == cobra.ShellCompNoDescRequestCmd {
		return nil
	}
	out := []*cobra.Command{c}
	for _, sub := range c.Commands() {
		out = append(out, commandsOf(sub)...)
	}
	return out
}

// commandTree is the command line's commands, as a person can call them.
func commandTree(t *testing.T) []*cobra.Command {
	t.Helper()
	root := newApp(strings.NewReader(""), nil, nil, func(string) string { return "" }).commandLine()
	return commandsOf(root)
}

// runsAlone says whether c is a command that runs, rather than a command
// of subcommands.
func runsAlone(c *cobra.Command) bool { return !c.HasSubCommands() }

// words is c's command path, as the tests call it.
func words(c *cobra.Command) []string { return strings.Fields(c.CommandPath())[1:] }

// fixture is a directory with a configuration, and the flags that name it
// and a database in it.
func fixture(t *testing.T) (dir string, settings []string) {
	t.Helper()
	dir = t.TempDir()
	cfg := filepath.Join(dir, "guard.yaml")
	if err := os.WriteFile(cfg, []byte("policy: {default: annotations}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, []string{"--config", cfg, "--db", filepath.Join(dir, "guard.db")}
}

// placed is args with CONFIG and DB replaced by the fixture's files that
// settings name.
func placed(args, settings []string) []string {
	out := slices.Clone(args)
	for i, a := range out {
		switch a {
		case "CONFIG":
			out[i] = settings[1]
		case "DB":
			out[i] = settings[3]
		}
	}
	return out
}

func TestEveryCommandHasACase(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range commandTree(t) {
		if !runsAlone(c) {
			continue
		}
		seen[c.CommandPath()] = true
		tc, ok := commandCases[c.CommandPath()]
		if !ok {
			t.Errorf("%s: no entry in commandCases: say how the convention tests call it", c.CommandPath())
			continue
		}
		// Every command takes --config and --db (DESIGN: the command
		// line), but those that read neither.
		hasSettings := c.Flag("config") != nil && c.Flag("db") != nil
		if hasSettings == tc.noSettings {
			t.Errorf("%s: --config and --db: has them %v, its case says %v", c.CommandPath(), hasSettings, !tc.noSettings)
		}
	}
	for name := range commandCases {
		if !seen[name] {
			t.Errorf("commandCases names %q, which is no command", name)
		}
	}
}

// -h on every command, a command of subcommands too, exits 0 and lists
// every flag the command takes, saying which are required.
func TestHelpListsTheFlags(t *testing.T) {
	for _, c := range commandTree(t) {
		args := append(words(c), "-h")
		stdout, stderr, code := run(t, t.TempDir(), args...)
		if code != 0 || stderr != "" || !strings.Contains(stdout, "Usage:\n  "+c.UseLine()) {
			t.Errorf("guard %s: exit %d, stderr %q, stdout %q; want 0 and the usage", strings.Join(args, " "), code, stderr, stdout)
			continue
		}
		check := func(f *pflag.Flag) {
			if f.Hidden {
				return
			}
			if !strings.Contains(stdout, "--"+f.Name+" ") {
				t.Errorf("guard %s: --%s is not listed:\n%s", strings.Join(args, " "), f.Name, stdout)
			}
			if req := f.Annotations[cobra.BashCompOneRequiredFlag]; len(req) > 0 && !strings.HasSuffix(f.Usage, "(required)") {
				t.Errorf("guard %s: --%s is required, and its usage does not say so: %q", strings.Join(args, " "), f.Name, f.Usage)
			}
		}
		c.LocalFlags().VisitAll(check)
		c.InheritedFlags().VisitAll(check)
	}
}

// A flag no command has is bad usage, named, on every command.
func TestUnknownFlags(t *testing.T) {
	for _, c := range commandTree(t) {
		if c.Name() == "help" {
			continue // cobra's: it takes flags for the command it explains
		}
		args := append(words(c), "--no-such-flag")
		if c.CommandPath() == "guard run" {
			args = append(args, "--", "true")
		}
		_, stderr, code := run(t, t.TempDir(), args...)
		if code != exitUsage || !strings.Contains(stderr, "no-such-flag") || !strings.Contains(stderr, "usage: "+c.UseLine()) {
			t.Errorf("guard %s: exit %d, %q; want 2 naming the flag, and the usage", strings.Join(args, " "), code, stderr)
		}
	}
}

// A required flag left out is bad usage, named.
func TestMissingRequiredFlags(t *testing.T) {
	found := 0
	for _, c := range commandTree(t) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if req := f.Annotations[cobra.BashCompOneRequiredFlag]; len(req) == 0 {
				return
			}
			found++
			tc := commandCases[c.CommandPath()]
			dir, settings := fixture(t)
			args := placed(append(append(words(c), tc.args...), settings...), settings)
			for i := 0; i < len(tc.flags); i += 2 {
				if tc.flags[i] != "--"+f.Name {
					args = append(args, tc.flags[i], tc.flags[i+1])
				}
			}
			_, stderr, code := run(t, dir, args...)
			if code != exitUsage || !strings.Contains(stderr, `"`+f.Name+`"`) {
				t.Errorf("guard %s: exit %d, %q; want 2 naming --%s", strings.Join(args, " "), code, stderr, f.Name)
			}
		})
	}
	if found < 2 { // approvals deny --reason, policy test --call
		t.Fatalf("%d required flags", found)
	}
}

// Flags go before or after the positional arguments, or between them, on
// every command that takes both; the call is the same.
func TestFlagsBeforeAndAfterArguments(t *testing.T) {
	for _, c := range commandTree(t) {
		tc, ok := commandCases[c.CommandPath()]
		if !ok || !runsAlone(c) || tc.code < 0 || len(tc.args) == 0 {
			continue
		}
		flags := slices.Clone(tc.flags)
		if !tc.noSettings {
			flags = append(flags, "--config", "CONFIG", "--db", "DB")
		}
		if len(flags) == 0 {
			flags = []string{"--log-level", "error"}
		}
		orders := map[string][]string{
			"flags first":   append(slices.Clone(flags), tc.args...),
			"flags last":    append(slices.Clone(tc.args), flags...),
			"flags between": append(append(append([]string{}, tc.args[0]), flags...), tc.args[1:]...),
			"one dash":      append(slices.Clone(tc.args), oneDash(flags)...),
		}
		var first string
		for name, order := range orders {
			dir, settings := fixture(t)
			args := placed(append(words(c), order...), settings)
			stdout, stderr, code := run(t, dir, args...)
			if code != tc.code {
				t.Errorf("guard %s (%s): exit %d, stdout %q, stderr %q; want %d", strings.Join(args, " "), name, code, stdout, stderr, tc.code)
				continue
			}
			// What it says is the same whichever the order (but the
			// directory, and a new token's random bytes).
			got, _, _ := strings.Cut(strings.ReplaceAll(stderr, dir, "DIR"), "\n")
			if first == "" {
				first = got
			} else if got != first && c.Name() != "token" {
				t.Errorf("guard %s (%s): stderr %q, another order's %q", strings.Join(args, " "), name, got, first)
			}
		}
	}
}

// oneDash writes flags as Go's flag package also took them: -name.
func oneDash(flags []string) []string {
	out := slices.Clone(flags)
	for i, f := range out {
		if strings.HasPrefix(f, "--") {
			out[i] = f[1:]
		}
	}
	return out
}

// A positional argument more than a command takes is bad usage.
func TestTooManyArguments(t *testing.T) {
	for _, c := range commandTree(t) {
		tc, ok := commandCases[c.CommandPath()]
		if !ok || !runsAlone(c) || c.Name() == "help" || c.Name() == "check" || c.Annotations[annotationServerArgs] != "" {
			continue // help, audit check FILE... and guard run CMD... take any number
		}
		args := append(append(append(words(c), tc.args...), tc.flags...), "extra")
		_, stderr, code := run(t, t.TempDir(), args...)
		if code != exitUsage || !strings.Contains(stderr, `"extra"`) {
			t.Errorf("guard %s: exit %d, %q; want 2 naming the argument", strings.Join(args, " "), code, stderr)
		}
	}
}

// After guard run's server command, everything is the server's, flags of
// guard's names too, with or without "--".
func TestRunLeavesTheServersArguments(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"run", "--no-ui", "--", "sh", "-c", "exit 7", "--name", "x"},
		{"run", "--no-ui", "sh", "-c", "exit 7", "--no-such-flag"},
		{"run", "-no-ui", "--", "sh", "-c", "exit 7", "-name", "x"},
		{"run", "--no-ui", "--name", "srv", "sh", "-c", `[ "$1" = -config ] && exit 7`, "sh", "-config"},
	} {
		if _, stderr, code := run(t, dir, args...); code != 7 {
			t.Errorf("guard %s: exit %d, %q; want the server's 7", strings.Join(args, " "), code, stderr)
		}
	}
}

func TestOneDashLongFlags(t *testing.T) {
	root := newApp(strings.NewReader(""), nil, nil, func(string) string { return "" }).commandLine()
	for _, tc := range []struct{ in, want string }{
		{"approvals deny -config C ID -reason=x", "approvals deny --config C ID --reason=x"},
		{"approvals deny ID -reason -config", "approvals deny ID --reason -config"}, // a value
		{"audit query -limit -1 -h", "audit query --limit -1 -h"},
		{"-log-level debug tools list", "--log-level debug tools list"},
		{"run -no-ui -name n -- srv -config x", "run --no-ui --name n -- srv -config x"},
		{"run -no-ui srv -name x", "run --no-ui srv -name x"},
		{"tools diff -x s t", "tools diff -x s t"}, // not a flag of guard's: pflag says so
		{"-version", "--version"},
		{"token -help", "token --help"},
	} {
		if got := strings.Join(oneDashLongFlags(root, strings.Fields(tc.in)), " "); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.in, got, tc.want)
		}
	}
}

func TestLogSettings(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		env    map[string]string
		args   []string
		code   int
		stderr string
	}{
		{nil, []string{"policy", "check", "--log-level", "loud"}, 2, `--log-level "loud": want debug, info, warn or error`},
		{nil, []string{"policy", "check", "--log-format", "xml"}, 2, `--log-format "xml": want text or json`},
		{map[string]string{"GUARD_LOG_LEVEL": "info+2"}, []string{"policy", "check"}, 2, `GUARD_LOG_LEVEL "info+2"`},
		{map[string]string{"GUARD_LOG_FORMAT": "yaml"}, []string{"policy", "check"}, 2, `GUARD_LOG_FORMAT "yaml"`},
		// The flag wins over the environment.
		{map[string]string{"GUARD_LOG_FORMAT": "yaml"}, []string{"policy", "check", "--log-format", "json"}, 0, ""},
	} {
		_, stderr, code := runEnv(t, dir, tc.env, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.stderr) {
			t.Errorf("%v %s: exit %d, %q; want %d with %q", tc.env, strings.Join(tc.args, " "), code, stderr, tc.code, tc.stderr)
		}
	}
}

// guard run logs at info unless told otherwise; at warn, its start lines
// are gone; as JSON, each line is an object.
func TestRunLogs(t *testing.T) {
	dir := t.TempDir()
	_, stderr, _ := run(t, dir, "run", "--no-ui", "--", "true")
	if !strings.Contains(stderr, "level=INFO") {
		t.Errorf("guard run at its default level: %q", stderr)
	}
	_, stderr, _ = run(t, dir, "run", "--log-level", "warn", "--no-ui", "--", "true")
	if strings.Contains(stderr, "level=INFO") {
		t.Errorf("guard run --log-level warn: %q", stderr)
	}
	_, stderr, _ = run(t, dir, "--log-format", "json", "run", "--no-ui", "--", "true")
	for line := range strings.SplitSeq(strings.TrimSpace(stderr), "\n") {
		if !strings.HasPrefix(line, `{"time":`) {
			t.Errorf("guard run --log-format json: %q", line)
		}
	}
}

func TestVersion(t *testing.T) {
	dir := t.TempDir()
	a, _, code := run(t, dir, "version")
	b, _, code2 := run(t, dir, "--version")
	if code != 0 || code2 != 0 || a != b || !strings.HasPrefix(a, "guard ") || !strings.Contains(a, "\nrevision ") {
		t.Fatalf("guard version (%d) %q, guard --version (%d) %q", code, a, code2, b)
	}
	got := versionText(build{Version: "v1.2.0", Revision: "0123abcd", Time: "2026-01-02T03:04:05Z", Go: "go1.26.8", Platform: "linux/amd64"})
	if want := "guard v1.2.0\nrevision 0123abcd (2026-01-02T03:04:05Z)\ngo1.26.8 linux/amd64\n"; got != want {
		t.Fatalf("%q, want %q", got, want)
	}
}

func TestCompletion(t *testing.T) {
	dir := t.TempDir()
	for shell, want := range map[string]string{"bash": "__start_guard", "zsh": "#compdef guard", "fish": "complete -c guard", "powershell": "Register-ArgumentCompleter"} {
		stdout, stderr, code := run(t, dir, "completion", shell)
		if code != 0 || !strings.Contains(stdout, want) {
			t.Errorf("guard completion %s: exit %d, %q, stdout of %d bytes without %q", shell, code, stderr, len(stdout), want)
		}
	}
	// The scripts parse in the shells that are here.
	for shell, check := range map[string][]string{"bash": {"bash", "-n"}, "zsh": {"zsh", "-n"}, "fish": {"fish", "--no-execute"}} {
		if _, err := exec.LookPath(check[0]); err != nil {
			continue
		}
		script, _, _ := run(t, dir, "completion", shell)
		file := filepath.Join(dir, "guard."+shell)
		if err := os.WriteFile(file, []byte(script), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(check[0], append(check[1:], file)...).CombinedOutput(); err != nil {
			t.Errorf("%s does not parse guard completion %s: %v\n%s", check[0], shell, err, out)
		}
	}
	if _, stderr, code := run(t, dir, "completion", "tcsh"); code != exitUsage || !strings.Contains(stderr, "tcsh") {
		t.Errorf("guard completion tcsh: exit %d, %q", code, stderr)
	}
	// What the scripts ask guard: commands, and the values of a flag.
	stdout, _, _ := run(t, dir, cobra.ShellCompRequestCmd, "audit", "query", "--format", "")
	if !strings.Contains(stdout, "jsonl") || !strings.Contains(stdout, "csv") {
		t.Errorf("completing --format: %q", stdout)
	}
	stdout, _, _ = run(t, dir, cobra.ShellCompRequestCmd, "appr")
	if !strings.Contains(stdout, "approvals") {
		t.Errorf("completing appr: %q", stdout)
	}
}
