package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/guard-mcp/guard/internal/pgtest"
	"github.com/guard-mcp/guard/store"
)

// The tests run guard on SQLite by default, and on PostgreSQL when
// GUARD_TEST_DB=postgres (pgtest.EngineEnv): then each env's database is a
// new database of the test binary's cluster, signed with a key file of
// the env's own, which every configuration the env writes names
// (audit.key_file), and guard's per-machine files go to a data directory
// of the test's own.

// useEngine makes e's database the engine's: on SQLite the file
// dir/data/guard.db (as it has always been); on PostgreSQL a new database,
// the key file dir/data/audit.key, and XDG_DATA_HOME and XDG_CONFIG_HOME
// under dir for every guard the test starts, so that none touches the
// home directory of the user running the tests.
func (e *env) useEngine() {
	e.db = filepath.Join(e.dir, "data", "guard.db")
	if !pgtest.Postgres() {
		return
	}
	e.db = pgtest.Database(e.t)
	e.key = filepath.Join(e.dir, "data", "audit.key")
	e.t.Setenv("XDG_DATA_HOME", filepath.Join(e.dir, "xdg", "data"))
	e.t.Setenv("XDG_CONFIG_HOME", filepath.Join(e.dir, "xdg", "config"))
}

// sqliteOnly skips a test of what only SQLite has when the tests run on
// PostgreSQL, saying why.
func sqliteOnly(t *testing.T, why string) {
	t.Helper()
	if pgtest.Postgres() {
		t.Skip("SQLite only: " + why)
	}
}

// writeConfig writes a configuration file of e's: config with, on
// PostgreSQL, e's checkpoint key (addKeyFile).
func (e *env) writeConfig(path, config string) {
	e.t.Helper()
	if e.key != "" {
		var err error
		if config, err = addKeyFile(config, e.key); err != nil {
			e.t.Fatal(err)
		}
	}
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		e.t.Fatal(err)
	}
}

// addKeyFile returns the YAML configuration config with audit.key_file set
// to key. Without an audit mapping, one is added as the last line, so that
// the lines config has keep their numbers (guard's messages name them);
// with one, key_file joins it (unless it has one), and the document is
// written anew. A config that is not YAML gets the line too: guard reports
// its error as before.
func addKeyFile(config, key string) (string, error) {
	var doc yaml.Node
	if yaml.Unmarshal([]byte(config), &doc) == nil && len(doc.Content) == 1 && doc.Content[0].Kind == yaml.MappingNode {
		top := doc.Content[0].Content
		for i := 0; i+1 < len(top); i += 2 {
			if top[i].Value != "audit" {
				continue
			}
			audit := top[i+1]
			if audit.Kind != yaml.MappingNode {
				return "", fmt.Errorf("adding audit.key_file: the configuration's audit is not a mapping:\n%s", config)
			}
			for j := 0; j+1 < len(audit.Content); j += 2 {
				if audit.Content[j].Value == "key_file" {
					return config, nil
				}
			}
			audit.Content = append(audit.Content,
				&yaml.Node{Kind: yaml.ScalarNode, Value: "key_file"},
				&yaml.Node{Kind: yaml.ScalarNode, Value: key})
			b, err := yaml.Marshal(&doc)
			if err != nil {
				return "", fmt.Errorf("adding audit.key_file: %w", err)
			}
			return string(b), nil
		}
	}
	if config != "" && !strings.HasSuffix(config, "\n") {
		config += "\n"
	}
	return config + "audit: {key_file: " + strconv.Quote(key) + "}\n", nil
}

// storeOptions open e's database directly, with its key on PostgreSQL.
func (e *env) storeOptions() store.Options {
	return store.Options{Path: e.db, KeyPath: e.key}
}

// open opens e's database for writing, failing the test if it cannot.
func (e *env) open(ctx context.Context) *store.DB {
	e.t.Helper()
	db, err := store.Open(ctx, e.storeOptions())
	if err != nil {
		e.t.Fatalf("opening the test's database: %v", err)
	}
	return db
}

// openReadOnly opens e's database for reading, failing the test if it
// cannot.
func (e *env) openReadOnly(ctx context.Context) *store.DB {
	e.t.Helper()
	db, err := store.OpenReadOnly(ctx, e.storeOptions())
	if err != nil {
		e.t.Fatalf("opening the test's database to read: %v", err)
	}
	return db
}

// addKeyFile adds the key as a last line where there is no audit mapping
// (the other lines keep their numbers), joins an audit mapping of either
// style, and leaves a key_file the test chose.
func TestAddKeyFile(t *testing.T) {
	const key = "/tmp/t/data/audit.key"
	for _, c := range []struct{ config, want string }{
		{"", "audit: {key_file: \"/tmp/t/data/audit.key\"}\n"},
		{"policy: {default: allow}", "policy: {default: allow}\naudit: {key_file: \"/tmp/t/data/audit.key\"}\n"},
		{"policy:\n  rules:\n    - {name: x, acton: deny}\n", "policy:\n  rules:\n    - {name: x, acton: deny}\naudit: {key_file: \"/tmp/t/data/audit.key\"}\n"},
		{"audit: {verify_every: 300ms}\nui: {listen: x}\n", "audit: {verify_every: 300ms, key_file: /tmp/t/data/audit.key}\nui: {listen: x}\n"},
		{"policy: {default: allow}\naudit:\n  stream:\n    - {syslog: \"tcp://a\"}\n",
			"policy: {default: allow}\naudit:\n    stream:\n        - {syslog: \"tcp://a\"}\n    key_file: /tmp/t/data/audit.key\n"},
		{"audit: {key_file: mine.key}\n", "audit: {key_file: mine.key}\n"},
	} {
		got, err := addKeyFile(c.config, key)
		if err != nil || got != c.want {
			t.Errorf("addKeyFile(%q):\n%q, %v\nwant\n%q", c.config, got, err, c.want)
		}
	}
	if _, err := addKeyFile("audit: on\n", key); err == nil {
		t.Error("an audit that is not a mapping was taken")
	}
}
