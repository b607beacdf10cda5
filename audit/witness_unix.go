//go:build unix

package audit

import (
	"log/syslog"
	"net/url"
)

// dialSyslog connects to the local syslog: the system's, or the datagram
// socket at socket when it is not "".
func dialSyslog(socket string) (localSyslog, error) {
	network := ""
	if socket != "" {
		network = "unixgram"
	}
	return syslog.Dial(network, socket, syslog.LOG_INFO|syslog.LOG_AUTHPRIV, "guard")
}

// fileURLPath is the path of a file: URL (file:///var/log/guard).
func fileURLPath(u *url.URL) string { return u.Path }
