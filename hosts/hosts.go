// Package hosts says which Host names a listener answers to: its own
// addresses, the names it is reached by, and *.suffix wildcards, each with
// or without a port. Checking Host (and Origin) against such a list is
// what stops DNS rebinding, which a browser's same-origin rules do not: a
// page of the attacker's, its name pointed at 127.0.0.1, sends its own
// name. It imports nothing of guard's, so that every front can use it.
package hosts

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// Pattern is one entry of a List.
type Pattern struct {
	name     string // lower case, IPv6 without brackets; for a wildcard, the suffix after "*."
	wildcard bool
	port     string // "" for none
}

// Parse reads an entry: a host name or address (an IPv6 address in
// brackets), or "*.suffix" for every name under suffix (not suffix
// itself), either with ":port". A name without a port matches a Host
// without one, or with port 80 or 443, which some clients send.
func Parse(entry string) (Pattern, error) {
	bad := func(why string) (Pattern, error) {
		return Pattern{}, fmt.Errorf("%q is not a host name: %s (write name, name:port or *.suffix)", entry, why)
	}
	s := strings.ToLower(strings.TrimSpace(entry))
	if strings.ContainsAny(s, "/@") {
		return bad("give the host only, not a URL, a path or a user")
	}
	var p Pattern
	if rest, ok := strings.CutPrefix(s, "*."); ok {
		p.wildcard, s = true, rest
	}
	name, port := split(s)
	if port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
			return bad("its port is not a number from 1 to 65535")
		}
	}
	if name == "" {
		return bad("it has no name")
	}
	if net.ParseIP(name) == nil || p.wildcard {
		for _, label := range strings.Split(name, ".") {
			if label == "" || strings.Trim(label, "abcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
				return bad("a name is labels of letters, digits and hyphens between dots")
			}
		}
	}
	p.name, p.port = name, port
	return p, nil
}

// split cuts a Host value into its name (IPv6 without brackets) and port.
func split(s string) (name, port string) {
	if h, p, err := net.SplitHostPort(s); err == nil {
		return h, p
	}
	return strings.TrimSuffix(strings.TrimPrefix(s, "["), "]"), ""
}

// matches reports whether the pattern allows a Host's name and port.
func (p Pattern) matches(name, port string) bool {
	if port != p.port && (p.port != "" || (port != "80" && port != "443")) {
		return false
	}
	if p.wildcard {
		return strings.HasSuffix(name, "."+p.name)
	}
	return name == p.name
}

// List is the Host names a listener answers to.
type List []Pattern

// New makes a List of entries (see Parse). An entry Parse refuses, such
// as an interface's address with a zone, is allowed as it is written and
// nothing else.
func New(entries ...string) List {
	l := make(List, 0, len(entries))
	for _, e := range entries {
		p, err := Parse(e)
		if err != nil {
			name, port := split(strings.ToLower(e))
			p = Pattern{name: name, port: port}
		}
		l = append(l, p)
	}
	return l
}

// Allows reports whether a request's Host is one of the list's.
func (l List) Allows(host string) bool {
	name, port := split(strings.ToLower(host))
	for _, p := range l {
		if p.matches(name, port) {
			return true
		}
	}
	return false
}

// AllowsOrigin reports whether an Origin header is http:// or https://
// one of the list's hosts.
func (l List) AllowsOrigin(origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" || u.User != nil {
		return false
	}
	return l.Allows(u.Host)
}
