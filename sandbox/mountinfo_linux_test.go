package sandbox

import (
	"sort"
	"strings"
	"testing"
)

func TestMountinfo(t *testing.T) {
	ms, err := parseMountinfo(strings.NewReader(`22 27 0:21 / /proc rw - proc proc rw
27 1 254:0 / / rw - ext4 /dev/vda rw
40 27 254:0 /home /mnt/home\040x rw - ext4 /dev/vda rw
41 27 254:0 /home/u/.local /srv/local rw - ext4 /dev/vda rw
42 27 254:1 / /data rw - ext4 /dev/vdb rw
`))
	if err != nil {
		t.Fatal(err)
	}
	got := aliases(ms, "/home/u/.local/share/guard")
	sort.Strings(got)
	want := []string{"/mnt/home x/u/.local/share/guard", "/srv/local/share/guard"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("aliases %q, want %q", got, want)
	}
	if a := ancestors([]string{"/home/u/.local/share/guard", "/home/u/.config/guard"}); strings.Join(a, " ") != "/home /home/u /home/u/.config /home/u/.local /home/u/.local/share" {
		t.Fatalf("ancestors %q", a)
	}
	if o := outermost([]string{"/a/b/c", "/a/b", "/d"}); strings.Join(o, " ") != "/d /a/b" {
		t.Fatalf("outermost %q", o)
	}
}
