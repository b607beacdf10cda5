package policy

import (
	"os"

	"github.com/guard-mcp/guard/config/read"
)

// ConfigError is a problem in a configuration file (read.Error).
type ConfigError = read.Error

// Load reads a file of the policy's sections alone, and its includes, as
// package config reads them in the whole file.
func Load(file string, getenv func(string) string) (*Config, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, &read.Error{File: file, Problem: err.Error()}
	}
	return parse(b, file, getenv)
}

// Parse reads the policy's sections from bytes (see Load).
func Parse(data []byte, file string) (*Config, error) { return parse(data, file, os.Getenv) }

func parse(data []byte, file string, getenv func(string) string) (*Config, error) {
	c := Default()
	r := &read.Reader{File: file, Getenv: getenv, Expanded: map[string]string{}}
	if err := r.Document(data, c.Keys(r)); err != nil {
		return nil, err
	}
	if err := c.ReadIncludes(file, getenv); err != nil {
		return nil, err
	}
	return c, c.Validate()
}

// reload reads a file again for an Engine under test.
func reload(file string, getenv func(string) string) (*Config, error) {
	if file == "" {
		return Default(), nil
	}
	return Load(file, getenv)
}
