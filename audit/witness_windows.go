package audit

import (
	"errors"
	"net/url"
	"strings"
)

// errNoSyslog is what a syslog witness says on Windows, at each checkpoint
// it cannot have.
var errNoSyslog = errors.New("there is no local syslog on Windows: use a file:/// or an http(s) witness")

// dialSyslog fails: Windows has no local syslog.
func dialSyslog(string) (localSyslog, error) { return nil, errNoSyslog }

// fileURLPath is the Windows path of a file: URL: file:///C:/guard/witness
// is C:/guard/witness, file://host/share/witness the UNC path
// //host/share/witness.
func fileURLPath(u *url.URL) string {
	p := u.Path
	if u.Host != "" && u.Host != "localhost" {
		return "//" + u.Host + p
	}
	if len(p) >= 3 && p[0] == '/' && p[2] == ':' && strings.ContainsRune("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", rune(p[1])) {
		return p[1:]
	}
	return p
}
