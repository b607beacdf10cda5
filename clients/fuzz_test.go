package clients

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// Whatever a file holds, wrap leaves a file its client reads as it read
// the original, save guard's entries, and unwrap gives back the original
// to the byte; a file guard cannot read is left as it is.
func FuzzWrapUnwrap(f *testing.F) {
	for _, client := range []string{"cursor", "vscode", "codex", "gemini-cli"} {
		f.Add(client == "codex", string(goldenBefore(f, client)))
	}
	f.Add(false, `{"mcpServers":{"r":{"url":"https://h.example/mcp","headers":{"A":"b"}},"s":{"command":"x","args":[]},}}`)
	f.Add(true, "[mcp_servers.s]\ncommand = \"x\"\nargs = [ # first\n  \"a\", # a\n]\nenv = {}\nenv_vars = []\n")
	f.Fuzz(func(t *testing.T, isTOML bool, content string) {
		client := "vscode"
		if isTOML {
			client = "codex"
		}
		c, _ := Lookup(client)
		// The contents alone, in memory: writing files (each synced) would
		// make the fuzzer wait on the disk.
		file := &File{Client: c, Path: "config", sections: [][]string{{c.servers}}}
		ch, err := testWrapper().wrap(context.Background(), file, []byte(content), nil)
		if err != nil {
			if strings.Contains(err.Error(), "please report it") {
				t.Fatalf("wrap broke the file: %v", err)
			}
			return
		}
		if _, err := file.parse(ch.After); err != nil {
			t.Fatalf("the wrapped file does not parse: %v\n%s", err, ch.After)
		}
		if !ch.Changed() {
			return
		}
		// The record as it is written and read back.
		b, err := json.Marshal(ch.record)
		if err != nil {
			t.Fatal(err)
		}
		var rec record
		if err := json.Unmarshal(b, &rec); err != nil {
			t.Fatal(err)
		}
		u, err := file.unwrap(ch.After, &rec)
		if err != nil {
			t.Fatalf("unwrap: %v", err)
		}
		if string(u.After) != content {
			t.Fatalf("unwrap did not give back the file:\n%q\nwant\n%q", u.After, content)
		}
		// After an edit elsewhere: each entry given back all the same, to
		// a file that parses.
		edited := append(slices.Clone(ch.After), '\n')
		u, err = file.unwrap(edited, &rec)
		if err != nil {
			t.Fatalf("unwrap after an edit: %v", err)
		}
		if _, err := file.parse(u.After); err != nil {
			t.Fatalf("unwrap after an edit broke the file: %v\n%s", err, u.After)
		}
		for _, o := range u.Servers {
			if o.Action != Restored {
				t.Fatalf("after an edit elsewhere, %s: %s", o.Name, o)
			}
		}
	})
}
