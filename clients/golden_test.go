package clients

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/tools/txtar"
)

var update = flag.Bool("update", false, "rewrite the golden files' expected sections from what the code does")

// testWrapper wraps with a fixed guard, a --db flag for every entry
// whose env does not name guard's database, and servers on hosts named
// oauth.* asking for OAuth.
func testWrapper() *Wrapper {
	return &Wrapper{
		Guard: "/opt/guard/bin/guard",
		Flags: func(env map[string]string) ([]string, error) {
			if env["GUARD_DB"] != "" {
				return nil, nil
			}
			return []string{"--db", "/srv/guard/guard.db"}, nil
		},
		Probe: func(_ context.Context, url string, _ bool, _ map[string]string) bool {
			return strings.Contains(url, "://oauth.")
		},
	}
}

// report is a change's outcomes, one server a line.
func report(c *Change) string {
	var b strings.Builder
	for _, o := range c.Servers {
		name := o.Name
		if s := SectionName(o.Section); s != "" && s != c.File.Client.servers {
			name = s + ": " + name
		}
		fmt.Fprintf(&b, "%s: %s\n", name, o)
	}
	if c.Note != "" {
		fmt.Fprintf(&b, "note: %s\n", c.Note)
	}
	return b.String()
}

// Each file in testdata/golden is a client's file (named for the client,
// up to its first dot) before wrap, after wrap (with what wrap said of
// each server), and after unwrap; and, when it has an edit, after that
// edit by hand between wrap and unwrap.
func TestGolden(t *testing.T) {
	paths, _ := filepath.Glob("testdata/golden/*.txtar")
	if len(paths) == 0 {
		t.Fatal("no golden files")
	}
	for _, path := range paths {
		name := strings.TrimSuffix(filepath.Base(path), ".txtar")
		t.Run(name, func(t *testing.T) {
			ar, err := txtar.ParseFile(path)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]string{}
			for _, f := range ar.Files {
				want[f.Name] = string(f.Data)
			}
			client, _, _ := strings.Cut(name, ".")
			c, err := Lookup(client)
			if err != nil {
				t.Fatal(err)
			}
			got := golden(t, c, want)
			for i, f := range ar.Files {
				g, ok := got[f.Name]
				if !ok {
					continue
				}
				if *update {
					ar.Files[i].Data = []byte(g)
				} else if g != string(f.Data) {
					t.Errorf("%s: %s differs (go test ./clients -run TestGolden -update rewrites it):\n%s", path, f.Name, unifiedDiff(f.Name, string(f.Data), g))
				}
			}
			if *update {
				if err := os.WriteFile(path, txtar.Format(ar), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// golden runs wrap, a second wrap, unwrap, and with an edit, wrap, the
// edit and unwrap, on the file of client c in want["before"].
func golden(t *testing.T, c *Client, want map[string]string) map[string]string {
	t.Helper()
	ctx := context.Background()
	got := map[string]string{}
	before := want["before"]
	f := &File{Client: c, Path: filepath.Join(t.TempDir(), "config"), sections: [][]string{{c.servers}}}
	if s, ok := want["sections"]; ok {
		f.sections = nil
		for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
			f.sections = append(f.sections, strings.Fields(line))
		}
	}
	if err := os.WriteFile(f.Path, []byte(before), 0o640); err != nil {
		t.Fatal(err)
	}
	// The mode the file has (0640 on Unix; Windows keeps only whether it
	// is read-only) is the mode it keeps.
	st, err := os.Stat(f.Path)
	if err != nil {
		t.Fatal(err)
	}
	mode := st.Mode().Perm()
	w := testWrapper()
	wrap := func() *Change {
		t.Helper()
		ch, err := Commit(func() (*Change, error) { return w.Wrap(ctx, f) }, false)
		if err != nil {
			t.Fatalf("wrap: %v", err)
		}
		return ch
	}
	unwrap := func() *Change {
		t.Helper()
		ch, err := Commit(func() (*Change, error) { return Unwrap(f) }, false)
		if err != nil {
			t.Fatalf("unwrap: %v", err)
		}
		return ch
	}
	read := func() string {
		t.Helper()
		b, err := os.ReadFile(f.Path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	ch := wrap()
	got["wrapped"], got["report"] = read(), report(ch)
	if st, err := os.Stat(f.Path); err != nil || st.Mode().Perm() != mode {
		t.Errorf("the file's mode after wrap: %v %v, want %v", st.Mode(), err, mode)
	}
	if ch.Changed() {
		if b, err := os.ReadFile(f.Path + BackupSuffix); err != nil || string(b) != before {
			t.Errorf("the backup is not the original: %v", err)
		}
	}
	if again := wrap(); again.Changed() {
		t.Errorf("a second wrap changed the file:\n%s", again.Diff())
	}
	unwrap()
	got["unwrapped"] = read()
	if got["unwrapped"] != before {
		t.Errorf("unwrap did not give back the file byte for byte:\n%s", unifiedDiff("config", before, got["unwrapped"]))
	}
	for _, leftover := range []string{BackupSuffix, recordSuffix} {
		if _, err := os.Stat(f.Path + leftover); err == nil {
			t.Errorf("%s is left after unwrap", leftover)
		}
	}
	if from, ok := want["edit.from"]; ok {
		wrap()
		wrapped := read()
		edited := strings.Replace(wrapped, strings.TrimSuffix(from, "\n"), strings.TrimSuffix(want["edit.to"], "\n"), 1)
		if edited == wrapped {
			t.Errorf("the edit %q is not in the wrapped file", from)
			return got
		}
		if err := os.WriteFile(f.Path, []byte(edited), 0o640); err != nil {
			t.Fatal(err)
		}
		ch := unwrap()
		got["edited"], got["edited-report"] = read(), report(ch)
		// What the person changed by hand outside guard's entries stays.
		if _, err := f.parse([]byte(got["edited"])); err != nil {
			t.Errorf("unwrap after an edit left a file that does not parse: %v", err)
		}
	}
	// Strict JSON stays strict, for the clients that read nothing else.
	if json.Valid([]byte(before)) {
		for _, k := range []string{"wrapped", "edited"} {
			if s, ok := got[k]; ok && !json.Valid([]byte(s)) {
				t.Errorf("%s is not strict JSON", k)
			}
		}
	}
	return got
}
