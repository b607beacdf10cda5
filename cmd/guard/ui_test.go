package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
)

// guard ui url prints the address the running guard serves the UI on (here
// a port --ui left to the system), and fails, saying why, once nothing
// serves it.
func TestUIURLIsWhereTheUIIsServed(t *testing.T) {
	dir := t.TempDir()
	env := map[string]string{"HOME": dir, "XDG_CONFIG_HOME": filepath.Join(dir, "config"), "XDG_DATA_HOME": filepath.Join(dir, "data")}
	stdin, feed := io.Pipe()
	logs, logw := io.Pipe()
	var out lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- newApp(stdin, &out, logw, func(k string) string { return env[k] }).main(context.Background(),
			[]string{"run", "--ui", "127.0.0.1:0", "--", "cat"})
		logw.Close()
	}()
	// The UI's start is recorded before it says so in the log.
	lines := bufio.NewScanner(logs)
	for lines.Scan() && !strings.Contains(lines.Text(), `msg="approval UI"`) {
	}
	go io.Copy(io.Discard, logs)
	stdout, stderr, code := run(t, dir, "ui", "url")
	if code != 0 {
		t.Fatalf("ui url while the UI serves: %d %q", code, stderr)
	}
	link := strings.TrimSpace(stdout)
	u, err := url.Parse(link)
	if err != nil || u.Port() == "8931" || u.Port() == "0" || u.Query().Get("token") == "" {
		t.Fatalf("ui url: %q", link)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := c.Get(link)
	if err != nil || res.StatusCode != http.StatusSeeOther || len(res.Cookies()) == 0 {
		t.Fatalf("logging in at %s: %v %v", link, res, err)
	}
	res.Body.Close()
	feed.Close()
	if code := <-done; code != 0 {
		t.Fatalf("guard run: exit %d", code)
	}
	if _, stderr, code := run(t, dir, "ui", "url"); code != 1 || !strings.Contains(stderr, "no guard serves the approval UI for this database") {
		t.Fatalf("ui url once nothing serves: %d %q", code, stderr)
	}
}
