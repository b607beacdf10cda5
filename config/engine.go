package config

import "github.com/guard-mcp/guard/policy"

// Engine is the policy engine over guard's configuration file: it keeps
// the file's configuration in force beside its policy, and reloads both.
type Engine = policy.Engine[*Config]

// NewEngine starts an Engine on cfg, read from file ("": the built-in
// defaults), which it reads again with Load when the file changes.
func NewEngine(file string, cfg *Config, o policy.EngineOptions) (*Engine, error) {
	return policy.NewEngine(file, cfg, reload, o)
}

// reload reads the configuration again: file's, or the built-in one.
func reload(file string, getenv func(string) string) (*Config, error) {
	if file == "" {
		return Default(), nil
	}
	return Load(file, getenv)
}
