package config

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/guard-mcp/guard/hosts"
)

// Variable is an environment variable that a setting of one host's guard
// may come from: what a deployment passes per host (a container's, a
// service unit's environment) without a flag or a file of its own. A
// flag given wins over it, and it wins over the configuration file and
// the default.
type Variable struct {
	Name string // GUARD_LISTEN
	// Flag is the flag it stands for, without its dashes ("" when the
	// setting has none).
	Flag string
	// Key is the configuration file's key it stands for ("" when none).
	Key string
	// Check says why a value is unusable, nil when it is usable; nil
	// when any value goes (a flag's own parsing checks it then).
	Check func(string) error
}

// Variables are every environment variable guard takes a setting from.
// A value that is set and empty counts as not set.
func Variables() []Variable {
	return []Variable{
		{Name: "GUARD_CONFIG", Flag: "config"},
		{Name: "GUARD_DB", Flag: "db", Key: "db"},
		{Name: "GUARD_LISTEN", Flag: "listen", Check: checkAddr},
		{Name: "GUARD_ALLOW_REMOTE", Flag: "allow-remote", Check: checkBool},
		{Name: "GUARD_UI", Flag: "ui", Key: "ui.listen", Check: checkAddr},
		{Name: "GUARD_NO_UI", Flag: "no-ui", Check: checkBool},
		{Name: "GUARD_PUBLIC_URL", Key: "public_url", Check: func(s string) error { _, err := ParsePublicURL(s); return err }},
		{Name: "GUARD_ALLOWED_HOSTS", Key: "allowed_hosts", Check: checkHosts},
		// The log's flags check their values, with the variable's name.
		{Name: "GUARD_LOG_FORMAT", Flag: "log-format"},
		{Name: "GUARD_LOG_LEVEL", Flag: "log-level"},
	}
}

// LookupVariable is the variable of a flag, and whether it has one.
func LookupVariable(flag string) (Variable, bool) {
	for _, v := range Variables() {
		if v.Flag == flag {
			return v, true
		}
	}
	return Variable{}, false
}

// VariableError is a variable whose value is unusable: it names the
// variable, as a flag's error names the flag.
type VariableError struct {
	Name, Value string
	Err         error
}

func (e *VariableError) Error() string {
	return fmt.Sprintf("%s %q: %v", e.Name, e.Value, e.Err)
}

func (e *VariableError) Unwrap() error { return e.Err }

// ReadVariable is the value of v in the environment getenv reads, ""
// when it is not set; an unusable value is a *VariableError.
func ReadVariable(v Variable, getenv func(string) string) (string, error) {
	s := getenv(v.Name)
	if s == "" || v.Check == nil {
		return s, nil
	}
	if err := v.Check(s); err != nil {
		return "", &VariableError{Name: v.Name, Value: s, Err: err}
	}
	return s, nil
}

// ApplyEnvironment sets the configuration's keys that have a variable and
// no flag (public_url, allowed_hosts) from the environment getenv reads:
// a variable that is set replaces the file's value.
func (c *Config) ApplyEnvironment(getenv func(string) string) error {
	for _, v := range Variables() {
		if v.Flag != "" || v.Key == "" {
			continue
		}
		s, err := ReadVariable(v, getenv)
		if err != nil {
			return err
		}
		switch {
		case s == "":
		case v.Key == "public_url":
			c.PublicURL, _ = ParsePublicURL(s)
		case v.Key == "allowed_hosts":
			c.AllowedHosts = splitList(s)
		}
	}
	return nil
}

// splitList splits a comma-separated list, without blanks.
func splitList(s string) []string {
	var out []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

func checkAddr(s string) error {
	if _, _, err := net.SplitHostPort(s); err != nil {
		return fmt.Errorf("want HOST:PORT (port 0 for any free one): %w", err)
	}
	return nil
}

func checkBool(s string) error {
	if _, err := strconv.ParseBool(s); err != nil {
		return fmt.Errorf("want true or false")
	}
	return nil
}

func checkHosts(s string) error {
	list := splitList(s)
	if len(list) == 0 {
		return fmt.Errorf("want host names separated by commas")
	}
	for _, h := range list {
		if _, err := hosts.Parse(h); err != nil {
			return err
		}
	}
	return nil
}
