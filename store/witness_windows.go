package store

import "errors"

// errNoSyslog is what a syslog witness says on Windows, at each checkpoint
// it cannot have.
var errNoSyslog = errors.New("there is no local syslog on Windows: use a file:/// or an http(s) witness")

// dialSyslog fails: Windows has no local syslog.
func dialSyslog(string) (localSyslog, error) { return nil, errNoSyslog }
