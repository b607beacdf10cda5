package config

import (
	"slices"
	"strings"

	"github.com/guard-mcp/guard/policy"
)

// ServerEnv returns the environment of a server's process: environ (as
// os.Environ gives it) without the variables the configuration expanded
// (guard's own secrets: a header's token, a password) and without guard's
// own variables (those of Variables: GUARD_DB, GUARD_CONFIG, ...; and
// OwnVariables), except those the server's env
// list names. Every other variable (PATH, HOME, ...) passes. srv may be
// nil: a server the configuration does not name.
func (c *Config) ServerEnv(environ []string, srv *policy.Server) []string {
	var allowed []string
	if srv != nil {
		allowed = srv.Env
	}
	vars := Variables()
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		_, secret := c.Expanded[name]
		own := slices.ContainsFunc(vars, func(v Variable) bool { return v.Name == name }) || slices.Contains(c.OwnVariables, name)
		if (secret || own) && !slices.Contains(allowed, name) {
			continue
		}
		out = append(out, kv)
	}
	return out
}
