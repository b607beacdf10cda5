package health

import (
	"errors"
	"net"
	"regexp"
	"strings"
)

// Cause is what an error says of why, without where: the text of the
// innermost error it wraps (a refused connection, a full disk, a timeout,
// the database's own message), which names no host, address, user,
// database or URL, with whatever still looks like one cut out. /readyz
// answers anyone who can reach the port, and a connection's error names
// the database it failed to reach.
func Cause(err error) string {
	if err == nil {
		return ""
	}
	for {
		var dns *net.DNSError
		if errors.As(err, &dns) && dns.Err != "" {
			return scrub(dns.Err) // its Error() names the host looked up
		}
		var next error
		switch e := err.(type) {
		case interface{ Unwrap() error }:
			next = e.Unwrap()
		case interface{ Unwrap() []error }:
			if errs := e.Unwrap(); len(errs) > 0 {
				next = errs[0]
			}
		}
		if next == nil {
			return scrub(err.Error())
		}
		err = next
	}
}

var (
	// URLs, and user@host, up to what ends a word in a sentence.
	urlish = regexp.MustCompile("[A-Za-z][A-Za-z0-9+.-]*://[^\\s`'\"()]*[^\\s`'\"():,;]|[^\\s`'\"()]+@[^\\s`'\"()]*[^\\s`'\"():,;]")
	// key=value pairs of a connection string.
	connParam = regexp.MustCompile("\\b(?:user|password|host|hostaddr|dbname|database|port|sslmode|passfile)=[^\\s`'\"()]*")
	// IPv4 and bracketed IPv6 addresses, host:port.
	addressish = regexp.MustCompile(`\[[0-9A-Fa-f:.%\w]*\](?::\d+)?|\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b|\b[\w.-]+\.[A-Za-z]{2,}(?::\d+)?\b|\b[\w.-]+:\d{2,5}\b`)
)

// scrub cuts what looks like a URL, an address or a connection string's
// parameter out of text.
func scrub(text string) string {
	for _, re := range []*regexp.Regexp{urlish, connParam, addressish} {
		text = re.ReplaceAllString(text, "…")
	}
	return strings.TrimSpace(text)
}
