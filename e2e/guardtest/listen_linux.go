package guardtest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// listensAt reports whether the socket listening at addr (host:port) is
// held by process pid or one of its descendants, from /proc: another
// process may answer at a port a test picked and let go of.
func listensAt(pid int, addr string) bool {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		return false
	}
	inodes := listeningInodes(n)
	if len(inodes) == 0 {
		return false
	}
	owner := socketOwner(inodes)
	for p := owner; p > 1; p = parentOf(p) {
		if p == pid {
			return true
		}
	}
	return false
}

// listeningInodes returns the inodes of the TCP sockets listening on port.
func listeningInodes(port int) map[string]bool {
	want := fmt.Sprintf(":%04X", port)
	inodes := map[string]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(table)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			fs := strings.Fields(sc.Text())
			if len(fs) > 9 && strings.HasSuffix(fs[1], want) && fs[3] == "0A" {
				inodes[fs[9]] = true
			}
		}
		f.Close()
	}
	return inodes
}

// socketOwner returns the process holding one of the sockets inodes, or 0.
func socketOwner(inodes map[string]bool) int {
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range procs {
		fds, _ := filepath.Glob(dir + "/fd/*")
		for _, fd := range fds {
			link, err := os.Readlink(fd)
			if err != nil || !strings.HasPrefix(link, "socket:[") {
				continue
			}
			if inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] {
				pid, _ := strconv.Atoi(filepath.Base(dir))
				return pid
			}
		}
	}
	return 0
}

// parentOf returns the parent of process pid, or 0.
func parentOf(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	rest := string(b[strings.LastIndexByte(string(b), ')')+1:])
	fs := strings.Fields(rest)
	if len(fs) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(fs[1])
	return ppid
}
