package main

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A PostgreSQL URL with a password is refused in --db, where the process
// list shows it to every user of the machine, whatever the command, and
// the password is not repeated; the same URL in GUARD_DB or the
// configuration names the database (its password kept out of what is
// printed).
func TestAPasswordInTheDatabaseFlagIsRefused(t *testing.T) {
	dir := t.TempDir()
	for _, url := range []string{
		"postgres://guard:S3cret@127.0.0.1:1/guard",
		"postgresql://guard:S3cret@h1:5432,h2:5432/guard",
		"postgres://guard@127.0.0.1:1/guard?sslmode=disable&password=S3cret",
	} {
		for _, cmd := range [][]string{{"audit", "verify"}, {"approvals", "list"}, {"serve"}, {"ui", "url"}} {
			args := append(append([]string{}, cmd...), "--db", url)
			stdout, stderr, code := run(t, dir, args...)
			if code != exitUsage || !strings.Contains(stderr, "PGPASSWORD") || strings.Contains(stdout+stderr, "S3cret") {
				t.Errorf("guard %s: exit %d, stdout %q, stderr %q; want exit 2 naming PGPASSWORD, without the password", strings.Join(args, " "), code, stdout, stderr)
			}
		}
	}
	// Without a password the flag names the database.
	st, err := newApp(strings.NewReader(""), nil, nil, func(string) string { return "" }).settings(&commonFlags{db: "postgres://guard@127.0.0.1:1/guard"})
	if err != nil || !st.Postgres || st.DBPath != "postgres://guard@127.0.0.1:1/guard" || st.RulesDir != "" ||
		!slices.Contains(st.Config.OwnVariables, "PGPASSWORD") {
		t.Fatalf("settings of a PostgreSQL URL: %+v %v", st, err)
	}
	// In the configuration, with the password from the environment.
	cfg := filepath.Join(dir, "guard.yaml")
	writeFile(t, cfg, "db: postgres://guard:${PGPASS_TEST}@127.0.0.1:1/guard\n")
	env := map[string]string{"PGPASS_TEST": "S3cret", "HOME": dir}
	st, err = newApp(strings.NewReader(""), nil, nil, func(k string) string { return env[k] }).settings(&commonFlags{config: cfg})
	if err != nil || st.DBPath != "postgres://guard:S3cret@127.0.0.1:1/guard" || st.DBName() != "postgres://guard@127.0.0.1:1/guard" {
		t.Fatalf("a password from the environment in the configuration: %+v %v", st, err)
	}
}
