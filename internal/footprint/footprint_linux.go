package footprint

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// dropExecutable drops the process's mappings of the pages of its
// executable's private read-only mappings that hold nothing of their own
// (no page copied on write: a debugger's breakpoint, relocations made
// before the segment became read-only), and returns the bytes that were
// resident there.
func dropExecutable() (int64, error) {
	var exe unix.Stat_t
	if err := unix.Stat("/proc/self/exe", &exe); err != nil {
		return 0, fmt.Errorf("footprint: the executable: %w", err)
	}
	maps, err := executableMappings(exe)
	if err != nil {
		return 0, err
	}
	var dropped int64
	for _, m := range maps {
		if m.anon > 0 || m.rss == 0 {
			continue
		}
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, m.lo, m.hi-m.lo, unix.MADV_DONTNEED); errno != 0 {
			return dropped, fmt.Errorf("footprint: madvise %x-%x: %w", m.lo, m.hi, errno)
		}
		dropped += m.rss
	}
	return dropped, nil
}

// mapping is one private read-only mapping of the executable.
type mapping struct {
	lo, hi    uintptr
	rss, anon int64 // resident bytes, and those copied on write
}

// executableMappings reads the private, read-only mappings of the file exe
// from /proc/self/smaps.
func executableMappings(exe unix.Stat_t) ([]mapping, error) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return nil, fmt.Errorf("footprint: %w", err)
	}
	defer f.Close()
	dev := fmt.Sprintf("%02x:%02x", unix.Major(uint64(exe.Dev)), unix.Minor(uint64(exe.Dev)))
	ino := strconv.FormatUint(exe.Ino, 10)
	var out []mapping
	var cur *mapping
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		name, v, _ := strings.Cut(line, ":")
		switch name {
		case "Rss", "Anonymous":
			if cur == nil {
				continue
			}
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("footprint: smaps: %q", line)
			}
			if name == "Rss" {
				cur.rss = kb << 10
			} else {
				cur.anon = kb << 10
			}
			continue
		}
		// A mapping's first line: start-end perms offset dev inode [path].
		fs := strings.Fields(line)
		if len(fs) < 5 || !strings.Contains(fs[0], "-") || strings.HasSuffix(fs[0], ":") {
			continue
		}
		cur = nil
		if len(fs[1]) != 4 || fs[1][1] == 'w' || fs[1][3] != 'p' || fs[3] != dev || fs[4] != ino {
			continue
		}
		lo, hi, _ := strings.Cut(fs[0], "-")
		l, err1 := strconv.ParseUint(lo, 16, 64)
		h, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("footprint: smaps: %q", line)
		}
		out = append(out, mapping{lo: uintptr(l), hi: uintptr(h)})
		cur = &out[len(out)-1]
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("footprint: smaps: %w", err)
	}
	return out, nil
}
