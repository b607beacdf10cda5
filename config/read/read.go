// Package read reads the values of guard's configuration file from its YAML
// nodes, strictly: a mapping's unknown key is an error, and every error
// names the file and the line it is about. The packages that own a section
// of the file (policy, config) read it with a Reader.
package read

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Error is a problem in a configuration file, with its place.
type Error struct {
	File    string
	Line    int
	Problem string
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Problem)
	}
	return e.File + ": " + e.Problem
}

var yamlLine = regexp.MustCompile(`line (\d+): (.*)`)

// YAMLError places an error of the YAML parser in file, at its line.
func YAMLError(file string, err error) error {
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		n, _ := strconv.Atoi(m[1])
		return &Error{File: file, Line: n, Problem: m[2]}
	}
	return &Error{File: file, Problem: strings.TrimPrefix(err.Error(), "yaml: ")}
}

// Reader reads the nodes of one file. Each of its methods returns a
// function that reads one value into its destination, for Mapping.
type Reader struct {
	File   string
	Getenv func(string) string
	// Expanded records every variable Expand replaced, with its value;
	// nil records none.
	Expanded map[string]string
}

// Document reads the text of a file: its top-level mapping, by keys (see
// Mapping). An empty text has no keys.
func (r *Reader) Document(data []byte, keys map[string]func(*yaml.Node) error) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return YAMLError(r.File, err)
	}
	if len(doc.Content) == 0 {
		return nil
	}
	return r.Mapping(doc.Content[0], keys)
}

// Errf is a problem at n.
func (r *Reader) Errf(n *yaml.Node, format string, args ...any) error {
	return &Error{File: r.File, Line: n.Line, Problem: fmt.Sprintf(format, args...)}
}

// Mapping walks a mapping node; an unknown key is an error. A null node
// (a key with nothing after it) has no keys.
func (r *Reader) Mapping(n *yaml.Node, fields map[string]func(*yaml.Node) error) error {
	if n.Kind != yaml.MappingNode {
		if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
			return nil
		}
		return r.Errf(n, "expected a mapping")
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		f, ok := fields[k.Value]
		if !ok {
			known := make([]string, 0, len(fields))
			for name := range fields {
				known = append(known, name)
			}
			slices.Sort(known)
			return r.Errf(k, "unknown key %q (known: %s)", k.Value, strings.Join(known, ", "))
		}
		if err := f(v); err != nil {
			return err
		}
	}
	return nil
}

// Str reads a string.
func (r *Reader) Str(dst *string) func(*yaml.Node) error {
	return func(n *yaml.Node) error {
		if n.Kind != yaml.ScalarNode {
			return r.Errf(n, "expected a string")
		}
		*dst = n.Value
		return nil
	}
}

// Enum reads one of the allowed strings.
func (r *Reader) Enum(dst *string, allowed ...string) func(*yaml.Node) error {
	return func(n *yaml.Node) error {
		if n.Kind != yaml.ScalarNode || !slices.Contains(allowed, n.Value) {
			return r.Errf(n, "%q is not one of %s", n.Value, strings.Join(allowed, ", "))
		}
		*dst = n.Value
		return nil
	}
}

// Bool reads true or false.
func (r *Reader) Bool(dst *bool) func(*yaml.Node) error {
	return func(n *yaml.Node) error {
		if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
			return r.Errf(n, "expected true or false, got %q", n.Value)
		}
		*dst = n.Value == "true"
		return nil
	}
}

// Duration reads a positive duration (ParseDuration).
func (r *Reader) Duration(dst *time.Duration) func(*yaml.Node) error {
	return func(n *yaml.Node) error {
		d, err := ParseDuration(n.Value)
		if err != nil || d <= 0 {
			return r.Errf(n, "%q is not a duration (like 90s, 10m, 7d)", n.Value)
		}
		*dst = d
		return nil
	}
}

// OptDuration reads a duration, or "off" (zero).
func (r *Reader) OptDuration(dst *time.Duration) func(*yaml.Node) error {
	return func(n *yaml.Node) error {
		if n.Kind == yaml.ScalarNode && (n.Value == "off" || n.Value == "false") {
			*dst = 0
			return nil
		}
		return r.Duration(dst)(n)
	}
}

// Count reads a positive whole number.
func (r *Reader) Count(dst *int) func(*yaml.Node) error {
	return func(n *yaml.Node) error {
		v, err := strconv.Atoi(n.Value)
		if err != nil || v <= 0 || n.Kind != yaml.ScalarNode {
			return r.Errf(n, "%q is not a positive whole number", n.Value)
		}
		*dst = v
		return nil
	}
}

// Size reads a positive size (ParseSize).
func (r *Reader) Size(dst *int64) func(*yaml.Node) error {
	return func(n *yaml.Node) error {
		s, err := ParseSize(n.Value)
		if err != nil || s <= 0 {
			return r.Errf(n, "%q is not a size (like 64MiB, 512KiB, 1048576)", n.Value)
		}
		*dst = s
		return nil
	}
}

// List reads a list of strings: include globs, redact keys and patterns,
// a server's command line. Their variables are expanded but not recorded
// as guard's secrets: they are paths and names, not credentials, and a
// server reads its own command line anyway (${HOME}/projects must not take
// HOME from it, nor mask the home directory in every record).
func (r *Reader) List(dst *[]string) func(*yaml.Node) error {
	return func(n *yaml.Node) error {
		if n.Kind != yaml.SequenceNode {
			return r.Errf(n, "expected a list")
		}
		out := make([]string, 0, len(n.Content))
		for _, e := range n.Content {
			if e.Kind != yaml.ScalarNode {
				return r.Errf(e, "expected a string")
			}
			v := e.Value
			if strings.Contains(v, "${") {
				v = os.Expand(v, r.Getenv)
			}
			out = append(out, v)
		}
		*dst = out
		return nil
	}
}

// NonEmptyList reads a list of strings that must not be empty, nor hold
// an empty string; what names it in errors.
func (r *Reader) NonEmptyList(dst *[]string, what string) func(*yaml.Node) error {
	return func(n *yaml.Node) error {
		if err := r.List(dst)(n); err != nil {
			return err
		}
		if len(*dst) == 0 {
			return r.Errf(n, "%s: list at least one, or leave it out", what)
		}
		for i, s := range *dst {
			if strings.TrimSpace(s) == "" {
				return r.Errf(n.Content[i], "%s: an empty name", what)
			}
		}
		return nil
	}
}

// Names reads a list of non-empty names, each once: groups, users.
func (r *Reader) Names(dst *[]string, what string) func(*yaml.Node) error {
	return func(n *yaml.Node) error {
		if n.Kind != yaml.SequenceNode {
			return r.Errf(n, "%s: expected a list, like [sre]", what)
		}
		for _, e := range n.Content {
			v := strings.TrimSpace(e.Value)
			if e.Kind != yaml.ScalarNode || v == "" {
				return r.Errf(e, "%s: expected a name", what)
			}
			if slices.Contains(*dst, v) {
				return r.Errf(e, "%s: %q is listed twice", what, v)
			}
			*dst = append(*dst, v)
		}
		return nil
	}
}

// Expand replaces ${VAR} with the environment's value, and records the
// variable: the sites that carry credentials (a server's url and headers,
// passwords, webhook secrets) go through it, so that a value the
// configuration reads is known as guard's own secret.
func (r *Reader) Expand(s string) string {
	if !strings.Contains(s, "${") {
		return s
	}
	return os.Expand(s, func(k string) string {
		v := r.Getenv(k)
		if r.Expanded != nil {
			r.Expanded[k] = v
		}
		return v
	})
}

// Secret reads a string that may be a credential: its ${NAME} variables
// are expanded and known as guard's own secrets.
func (r *Reader) Secret(dst *string) func(*yaml.Node) error {
	return func(n *yaml.Node) error {
		if n.Kind != yaml.ScalarNode {
			return r.Errf(n, "expected a string")
		}
		*dst = r.Expand(n.Value)
		return nil
	}
}

// Written reports whether a mapping gives key a value, as written (before
// its variables are expanded).
func Written(n *yaml.Node, key string) bool { return strings.TrimSpace(Value(n, key)) != "" }

// CheckURL checks an identity provider's URL (an issuer, an audience, a
// token endpoint): an absolute URL without a fragment, https but where it
// is the machine itself. what names it in the error, example shows one.
func CheckURL(what, s, example string) error {
	if s == "" {
		return fmt.Errorf("%s is needed, like %s", what, example)
	}
	u, err := url.Parse(s)
	switch {
	case err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http"):
		return fmt.Errorf("%s %q: use an absolute https:// URL, like %s", what, s, example)
	case u.Fragment != "" || strings.Contains(s, "#"):
		return fmt.Errorf("%s %q has a fragment", what, s)
	case u.Scheme == "http" && !LoopbackHost(u.Hostname()):
		return fmt.Errorf("%s %q: use https (http only for this machine: localhost, 127.0.0.1, [::1])", what, s)
	}
	return nil
}

// LoopbackHost reports whether a URL's host (as url.URL.Hostname gives
// it) is this machine.
func LoopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// LoopbackAddr reports whether a listen address binds loopback only.
func LoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	return LoopbackHost(host)
}
