package benchmark

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
)

// TargetReleaseSize is guard's target for its release binary
// (linux/amd64), in bytes: 35 MB.
const TargetReleaseSize = 35_000_000

// ReleaseSize builds guard's release binary for linux/amd64 from the
// checkout the go command finds in the current directory, with the flags
// scripts/release builds with (stripped, -trimpath, no build id, no cgo,
// GOAMD64=v1; without its -X of the tag and commit, a few bytes), into
// dir/guard-release, writes its size and the target to w, and returns the
// size.
func ReleaseSize(ctx context.Context, dir string, w io.Writer) (int64, error) {
	bin := filepath.Join(dir, "guard-release")
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-ldflags", "-s -w -buildid=",
		"-o", bin, "github.com/guard-mcp/guard/cmd/guard")
	build.Env = append(os.Environ(), "GOOS=linux", "GOARCH=amd64", "GOAMD64=v1", "CGO_ENABLED=0", "GOFLAGS=", "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("building the release binary (run guard-bench in guard's checkout): %w\n%s", err, out)
	}
	fi, err := os.Stat(bin)
	if err != nil {
		return 0, fmt.Errorf("the release binary: %w", err)
	}
	n := fi.Size()
	fmt.Fprintf(w, "release binary: %d bytes (%.1f MiB) (target ≤ %d MB): %s\n", n, float64(n)/(1<<20), TargetReleaseSize/1_000_000, met(n <= TargetReleaseSize))
	return n, nil
}
