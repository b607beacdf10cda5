package config

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// Every variable the configuration expands is recorded with its value,
// but those of a server's command (which the server reads anyway); a
// server's environment lacks them unless its env list names them.
func TestServerEnvWithholdsExpandedVariables(t *testing.T) {
	vars := map[string]string{"TOKEN": "t0ken-value-1", "OTHER": "other-value-2", "ROOT": "/srv/data", "HOME": "/home/me"}
	cfg, err := parse([]byte(`
include: ["${HOME}/guard-rules/*.yaml"]
redact: {keys: ["${ROOT}"]}
servers:
  remote:
    url: https://x.example/mcp?key=${OTHER}
    headers: {Authorization: "Bearer ${TOKEN}"}
  files:
    command: [server, "${ROOT}"]
    env: [OTHER]
`), "guard.yaml", func(k string) string { return vars[k] })
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"TOKEN": "t0ken-value-1", "OTHER": "other-value-2"}; len(cfg.Expanded) != 2 ||
		cfg.Expanded["TOKEN"] != want["TOKEN"] || cfg.Expanded["OTHER"] != want["OTHER"] {
		t.Errorf("Expanded = %v, want %v", cfg.Expanded, want)
	}
	environ := []string{"PATH=/bin", "HOME=/home/me", "TOKEN=t0ken-value-1", "OTHER=other-value-2", "ROOT=/srv/data", "GUARD_DB=/x.db", "GUARD_CONFIG=/g.yaml", "GUARD_LISTEN=0.0.0.0:8930", "GUARD_PUBLIC_URL=https://g.example.com"}
	if got, want := cfg.ServerEnv(environ, cfg.Servers["files"]), []string{"PATH=/bin", "HOME=/home/me", "OTHER=other-value-2", "ROOT=/srv/data"}; !slices.Equal(got, want) {
		t.Errorf("files' environment = %q, want %q", got, want)
	}
	if got, want := cfg.ServerEnv(environ, nil), []string{"PATH=/bin", "HOME=/home/me", "ROOT=/srv/data"}; !slices.Equal(got, want) {
		t.Errorf("an unnamed server's environment = %q, want %q", got, want)
	}
	// guard's own database credentials (on PostgreSQL), unless listed.
	cfg.OwnVariables = []string{"PGPASSWORD"}
	pg := append(slices.Clip(environ), "PGPASSWORD=db-secret")
	if got := cfg.ServerEnv(pg, nil); slices.Contains(got, "PGPASSWORD=db-secret") {
		t.Errorf("an unnamed server sees guard's database password: %q", got)
	}
	cfg.Servers["files"].Env = append(cfg.Servers["files"].Env, "PGPASSWORD")
	if got := cfg.ServerEnv(pg, cfg.Servers["files"]); !slices.Contains(got, "PGPASSWORD=db-secret") {
		t.Errorf("a server whose env lists PGPASSWORD does not see it: %q", got)
	}
}

// env takes names only: a value, or a mapping, is an error with its line.
func TestServerEnvTakesNamesOnly(t *testing.T) {
	for _, bad := range []string{"env: [TOKEN=x]", "env: [\"${TOKEN}\"]", "env: {TOKEN: x}", "env: [1A]"} {
		_, err := parse([]byte("servers:\n  s:\n    "+bad+"\n"), "guard.yaml", func(string) string { return "" })
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.File != "guard.yaml" || ce.Line != 3 {
			t.Errorf("%s: err = %v, want a config error at guard.yaml:3", bad, err)
		}
	}
}

// A variable's unusable value is an error naming it; set and usable, it
// replaces the file's key; empty, it is not set.
func TestApplyEnvironment(t *testing.T) {
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	c := Default()
	c.PublicURL, c.AllowedHosts = "https://file.example.com", []string{"file.internal"}
	env["GUARD_PUBLIC_URL"] = ""
	if err := c.ApplyEnvironment(getenv); err != nil || c.PublicURL != "https://file.example.com" || len(c.AllowedHosts) != 1 {
		t.Fatalf("unset: %v %q %q", err, c.PublicURL, c.AllowedHosts)
	}
	for name, bad := range map[string]string{"GUARD_PUBLIC_URL": "guard.example.com", "GUARD_ALLOWED_HOSTS": " , "} {
		env := map[string]string{name: bad}
		var ve *VariableError
		err := Default().ApplyEnvironment(func(k string) string { return env[k] })
		if !errors.As(err, &ve) || ve.Name != name || !strings.HasPrefix(err.Error(), name+" ") {
			t.Errorf("%s=%q: %v", name, bad, err)
		}
	}
	for _, flag := range []string{"listen", "ui", "no-ui", "allow-remote"} {
		v, _ := LookupVariable(flag)
		if _, err := ReadVariable(v, func(string) string { return "x" }); err == nil {
			t.Errorf("%s=x is usable", v.Name)
		}
	}
}
