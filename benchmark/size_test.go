package benchmark

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// ReleaseSize builds the release binary into the directory given and
// prints its size against the target.
func TestReleaseSize(t *testing.T) {
	if testing.Short() {
		t.Skip("builds guard's release binary: a minute or two")
	}
	dir := t.TempDir()
	var out strings.Builder
	n, err := ReleaseSize(context.Background(), dir, &out)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(out.String())
	fi, err := os.Stat(filepath.Join(dir, "guard-release"))
	if err != nil || fi.Size() != n {
		t.Fatalf("guard-release: %v, %d bytes; ReleaseSize said %d", err, fi.Size(), n)
	}
	m := regexp.MustCompile(`^release binary: ([0-9]+) bytes \([0-9]+\.[0-9] MiB\) \(target ≤ 35 MB\): (met|NOT MET)\n$`).FindStringSubmatch(out.String())
	if m == nil || m[1] != fmt.Sprint(n) || (m[2] == "met") != (n <= TargetReleaseSize) {
		t.Fatalf("line %q for %d bytes", out.String(), n)
	}
}
