//go:build unix

package store

import "log/syslog"

// dialSyslog connects to the local syslog: the system's, or the datagram
// socket at socket when it is not "".
func dialSyslog(socket string) (localSyslog, error) {
	network := ""
	if socket != "" {
		network = "unixgram"
	}
	return syslog.Dial(network, socket, syslog.LOG_INFO|syslog.LOG_AUTHPRIV, "guard")
}
