package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// version and revision are the release's tag and commit, set by the
// release build (scripts/release):
//
//	-ldflags "-X main.version=v1.2.0 -X main.revision=COMMIT"
//
// They are variables only for the linker to set; nothing assigns them.
// Without them, guard reads what the Go toolchain recorded.
var version, revision string

func init() { register(versionCommand) }

func versionCommand(a *app) *cobra.Command {
	c := leaf("version", "print guard's version, revision and platform (also guard --version)", exactly())
	c.RunE = a.runs(func(_ context.Context, _ []string) int {
		fmt.Fprint(a.stdout, versionText(thisBuild()))
		return exitOK
	})
	return c
}

// build is what identifies a build of guard.
type build struct {
	Version  string // the release tag, or the module's version; "(devel)" for a build from a checkout
	Revision string // the commit, "" when unknown
	Time     string // the commit's time, when the toolchain recorded it
	Modified bool   // built from a work tree with changes
	Go       string // the toolchain
	Platform string // GOOS/GOARCH
}

// thisBuild is this binary's build: the linker's version and revision
// where the release build set them, else the toolchain's record (go
// install ...@v1.2.0 records the module's version; a build in a clone, the
// commit).
func thisBuild() build {
	b := build{Version: version, Revision: revision, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		if b.Version == "" {
			b.Version = "(unknown)"
		}
		return b
	}
	if b.Version == "" {
		b.Version = info.Main.Version
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			if b.Revision == "" {
				b.Revision = s.Value
			}
		case "vcs.time":
			b.Time = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	if b.Version == "" {
		b.Version = "(devel)"
	}
	return b
}

// versionText is how guard version and guard --version print a build:
//
//	guard v1.2.0
//	revision 0123abcd... (2026-01-02T03:04:05Z)
//	go1.26.8 linux/amd64
func versionText(b build) string {
	var s strings.Builder
	fmt.Fprintf(&s, "guard %s\n", b.Version)
	rev := b.Revision
	if rev == "" {
		rev = "unknown"
	}
	if b.Time != "" {
		rev += " (" + b.Time + ")"
	}
	if b.Modified {
		rev += ", with uncommitted changes"
	}
	fmt.Fprintf(&s, "revision %s\n%s %s\n", rev, b.Go, b.Platform)
	return s.String()
}

// buildVersion is the version guard records of itself (lifecycle records,
// replicas, the serverInfo of its HTTP front): the release tag, the
// module's version, or "devel" for a build from a checkout.
func buildVersion() string {
	if v := thisBuild().Version; v != "(devel)" && v != "(unknown)" {
		return v
	}
	return "devel"
}
