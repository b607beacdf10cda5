package footprint

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Trim drops the executable's resident read-only pages, and the code
// runs on (its pages read again from the page cache).
func TestTrimDropsTheExecutablesPages(t *testing.T) {
	resident := func() (rss int64, n int) {
		var exe unix.Stat_t
		if err := unix.Stat("/proc/self/exe", &exe); err != nil {
			t.Fatal(err)
		}
		maps, err := executableMappings(exe)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range maps {
			rss += m.rss
		}
		return rss, len(maps)
	}
	before, n := resident()
	if n < 2 || before == 0 {
		t.Fatalf("%d read-only mappings of the executable, %d bytes resident: want its code and its read-only data", n, before)
	}
	dropped, err := Trim()
	if err != nil {
		t.Fatal(err)
	}
	after, _ := resident()
	t.Logf("resident before %d KiB, dropped %d KiB, resident after %d KiB", before>>10, dropped>>10, after>>10)
	if dropped <= 0 || after >= before {
		t.Fatalf("resident before %d, dropped %d, after %d", before, dropped, after)
	}
	// Code that start-up alone ran before runs again.
	if strings.Repeat("ab", 3) != "ababab" {
		t.Fatal("strings.Repeat")
	}
}
