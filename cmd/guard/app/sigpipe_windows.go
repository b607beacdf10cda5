package app

// catchSIGPIPE does nothing: Windows has no SIGPIPE, and a write to a
// client that went away fails there by itself.
func catchSIGPIPE() (stop func()) { return func() {} }
