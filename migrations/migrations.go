// Package migrations holds guard's database schema as numbered SQL files,
// one set per engine, applied in order, each once, each in its own
// transaction. A version number means the same schema on both engines:
// PostgreSQL's first migration creates at once what SQLite's first twelve
// built up, and a migration that one engine alone needs is a file holding
// only a comment on the other (0013: PostgreSQL's change notifications).
package migrations

import (
	"embed"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
)

//go:embed sqlite/*.sql postgres/*.sql
var files embed.FS

// SQLite holds the SQLite migrations, named NNNN_description.sql.
func SQLite() fs.FS { return sub("sqlite") }

// Postgres holds the PostgreSQL migrations, named NNNN_description.sql.
func Postgres() fs.FS { return sub("postgres") }

func sub(dir string) fs.FS {
	f, err := fs.Sub(files, dir)
	if err != nil {
		panic(err) // the directory is embedded: cannot happen
	}
	return f
}

// Migration is one migration file of a set.
type Migration struct {
	Version int    // the number its name starts with
	Name    string // the file's name in its set
}

// List lists a set's migrations in order.
func List(set fs.FS) ([]Migration, error) {
	entries, err := fs.ReadDir(set, ".")
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	var out []Migration
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		v, err := strconv.Atoi(strings.SplitN(e.Name(), "_", 2)[0])
		if err != nil {
			return nil, fmt.Errorf("migration %s: the name must start with its number", e.Name())
		}
		out = append(out, Migration{v, e.Name()})
	}
	slices.SortFunc(out, func(a, b Migration) int { return a.Version - b.Version })
	return out, nil
}

// Latest is the version of a set's last migration (0 for none).
func Latest(set fs.FS) int64 {
	names, _ := List(set)
	if len(names) == 0 {
		return 0
	}
	return int64(names[len(names)-1].Version)
}

// Apply calls apply with each migration of set, in order, and its SQL.
func Apply(set fs.FS, apply func(m Migration, body string) error) error {
	names, err := List(set)
	if err != nil {
		return err
	}
	for _, m := range names {
		body, err := fs.ReadFile(set, m.Name)
		if err != nil {
			return fmt.Errorf("migration %s: %w", m.Name, err)
		}
		if err := apply(m, string(body)); err != nil {
			return err
		}
	}
	return nil
}
