package guard

import (
	"net/url"
	"strings"
)

// DisplayURL returns raw, an address from the configuration, as it may be
// shown in logs and metrics: without the password of its user information
// and without its query string, either of which may hold a credential
// (https://user:secret@host/v1?token=x becomes https://user@host/v1). A
// value that does not parse as a URL loses whatever could be either: what
// follows a "?", and the user information before an "@".
func DisplayURL(raw string) string {
	u, err := url.Parse(raw)
	if err == nil {
		if u.User != nil {
			if _, ok := u.User.Password(); ok {
				u.User = url.User(u.User.Username())
			}
		}
		u.RawQuery, u.ForceQuery = "", false
		return u.String()
	}
	s, _, _ := strings.Cut(raw, "?")
	rest := s
	scheme := ""
	if i := strings.Index(s, "://"); i >= 0 {
		scheme, rest = s[:i+3], s[i+3:]
	}
	host, path := rest, ""
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		host, path = rest[:i], rest[i:]
	}
	if i := strings.LastIndexByte(host, '@'); i >= 0 {
		host = host[i+1:]
	}
	return scheme + host + path
}
